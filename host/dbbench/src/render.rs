//! What the agent reads after `execute_sql`: the original client's
//! `str(cursor.fetchall())`, cut at 800 characters.
//!
//! The original converts each text-protocol cell by its column type
//! (mysql-connector-python's converter) and prints the list of row tuples
//! with Python's `repr`. This module does the same conversion into
//! [`Val`] values and prints them incrementally, so the caller can stop
//! reading rows once the printed text is past the cut (the rest can no
//! longer change what the agent sees). Agreement with the real connector
//! is tested on recorded vectors (`tests/dbbench/render_vectors.json`).

use std::sync::Arc;

use mysql_async::consts::{ColumnFlags, ColumnType};

use ecdysis_pyemu::{Val, repr};

/// The original's cut: longer results are truncated to this many
/// characters and `[TRUNCATED]` is appended.
pub const MAX_CHARS: usize = 800;

/// The marker appended to a truncated result.
pub const TRUNCATED: &str = "[TRUNCATED]";

/// MySQL's `binary` character set id (cells come back as `bytes`).
const BINARY_CHARSET: u16 = 63;

/// How one column's cells convert.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Integer columns (TINYINT to BIGINT, YEAR) become `int`.
    Int,
    /// FLOAT and DOUBLE become `float`.
    Float,
    /// DECIMAL becomes `decimal.Decimal`.
    Decimal,
    /// BIT becomes the big-endian `int` of its bytes.
    Bit,
    /// DATE becomes `datetime.date` (zero dates `None`).
    Date,
    /// DATETIME and TIMESTAMP become `datetime.datetime`.
    DateTime,
    /// TIME becomes `datetime.timedelta`.
    Time,
    /// A SET column becomes a `set` of its comma-separated members.
    Set,
    /// Any other column of a text character set becomes `str`.
    Text,
    /// Columns of the `binary` character set (and geometry) become `bytes`.
    Bytes,
}

impl Kind {
    /// The conversion mysql-connector-python applies to a column (a SET
    /// column arrives as a string type flagged `SET`).
    pub fn of(column_type: ColumnType, charset: u16, flags: ColumnFlags) -> Kind {
        use ColumnType::*;
        if flags.contains(ColumnFlags::SET_FLAG) {
            return Kind::Set;
        }
        match column_type {
            MYSQL_TYPE_TINY | MYSQL_TYPE_SHORT | MYSQL_TYPE_LONG | MYSQL_TYPE_LONGLONG
            | MYSQL_TYPE_INT24 | MYSQL_TYPE_YEAR => Kind::Int,
            MYSQL_TYPE_FLOAT | MYSQL_TYPE_DOUBLE => Kind::Float,
            MYSQL_TYPE_DECIMAL | MYSQL_TYPE_NEWDECIMAL => Kind::Decimal,
            MYSQL_TYPE_BIT => Kind::Bit,
            MYSQL_TYPE_DATE | MYSQL_TYPE_NEWDATE => Kind::Date,
            MYSQL_TYPE_DATETIME
            | MYSQL_TYPE_TIMESTAMP
            | MYSQL_TYPE_DATETIME2
            | MYSQL_TYPE_TIMESTAMP2 => Kind::DateTime,
            MYSQL_TYPE_TIME | MYSQL_TYPE_TIME2 => Kind::Time,
            MYSQL_TYPE_SET => Kind::Set,
            MYSQL_TYPE_GEOMETRY => Kind::Bytes,
            _ if charset == BINARY_CHARSET => Kind::Bytes,
            _ => Kind::Text,
        }
    }

    /// The Python value of a cell (`None` for SQL NULL).
    pub fn convert(self, cell: Option<&[u8]>) -> Val {
        let Some(bytes) = cell else {
            return Val::None;
        };
        let text = || String::from_utf8_lossy(bytes).into_owned();
        match self {
            // Text that is no number (MySQL never sends any) stays a str.
            Kind::Int => Val::int_from_decimal(text().trim()).unwrap_or_else(|| Val::str(&text())),
            Kind::Float => text()
                .trim()
                .parse::<f64>()
                .map_or_else(|_| Val::str(&text()), Val::Float),
            Kind::Decimal => Val::Decimal(text().into()),
            Kind::Bit => {
                // int.from_bytes(value, "big"): up to 64 bits.
                let v = bytes
                    .iter()
                    .fold(0u128, |acc, b| (acc << 8) | u128::from(*b));
                Val::from(v)
            }
            Kind::Date => date(&text()).unwrap_or(Val::None),
            Kind::DateTime => datetime(&text()).unwrap_or(Val::None),
            Kind::Time => time(&text()).unwrap_or(Val::None),
            Kind::Set => {
                let t = text();
                let mut items: Vec<Val> = Vec::new();
                if !t.is_empty() {
                    for part in t.split(',') {
                        if !items.iter().any(|i| i.as_str() == Some(part)) {
                            items.push(Val::str(part));
                        }
                    }
                }
                Val::Set(Arc::new(items))
            }
            Kind::Text => Val::str(&text()),
            Kind::Bytes => Val::Bytes(bytes.into()),
        }
    }
}

fn numbers(t: &str, seps: &[char]) -> Option<Vec<u64>> {
    t.split(seps).map(|p| p.parse::<u64>().ok()).collect()
}

/// `datetime.date(y, m, d)`; zero or invalid dates are `None`.
fn date(t: &str) -> Option<Val> {
    let p = numbers(t, &['-'])?;
    let [y, m, d] = p[..] else { return None };
    if y == 0 || m == 0 || d == 0 {
        return None;
    }
    Some(Val::object("date", format!("datetime.date({y}, {m}, {d})")))
}

/// Fractional seconds (`.25`) as microseconds.
fn micros(frac: &str) -> Option<u64> {
    if frac.is_empty() || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut f: String = frac.chars().take(6).collect();
    while f.len() < 6 {
        f.push('0');
    }
    f.parse().ok()
}

/// `datetime.datetime(...)`, trailing zero microseconds and seconds left
/// out as Python's `repr` does.
fn datetime(t: &str) -> Option<Val> {
    let (day, clock) = t.split_once(' ')?;
    let d = numbers(day, &['-'])?;
    let [y, mo, da] = d[..] else { return None };
    if y == 0 || mo == 0 || da == 0 {
        return None;
    }
    let (hms, frac) = match clock.split_once('.') {
        Some((h, f)) => (h, Some(f)),
        None => (clock, None),
    };
    let c = numbers(hms, &[':'])?;
    let [h, mi, s] = c[..] else { return None };
    let us = match frac {
        Some(f) => micros(f)?,
        None => 0,
    };
    let mut fields = vec![y, mo, da, h, mi, s, us];
    for _ in 0..2 {
        if fields.len() > 5 && fields.last() == Some(&0) {
            fields.pop();
        }
    }
    let list: Vec<String> = fields.iter().map(u64::to_string).collect();
    Some(Val::object(
        "datetime",
        format!("datetime.datetime({})", list.join(", ")),
    ))
}

/// `datetime.timedelta(...)` of a TIME value (`[-]h:mm:ss[.ffffff]`),
/// normalised as Python does (days may be negative, seconds and
/// microseconds never are).
fn time(t: &str) -> Option<Val> {
    let (neg, body) = match t.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, t),
    };
    let (hms, frac) = match body.split_once('.') {
        Some((h, f)) => (h, Some(f)),
        None => (body, None),
    };
    let c = numbers(hms, &[':'])?;
    let [h, m, s] = c[..] else { return None };
    let us = match frac {
        Some(f) => micros(f)?,
        None => 0,
    };
    let mut total = (((h * 60 + m) * 60 + s) * 1_000_000 + us) as i128;
    if neg {
        total = -total;
    }
    const DAY: i128 = 86_400 * 1_000_000;
    let days = total.div_euclid(DAY);
    let rest = total.rem_euclid(DAY);
    let (secs, micro) = (rest / 1_000_000, rest % 1_000_000);
    let mut parts = Vec::new();
    if days != 0 {
        parts.push(format!("days={days}"));
    }
    if secs != 0 {
        parts.push(format!("seconds={secs}"));
    }
    if micro != 0 {
        parts.push(format!("microseconds={micro}"));
    }
    if parts.is_empty() {
        parts.push("0".into());
    }
    Some(Val::object(
        "timedelta",
        format!("datetime.timedelta({})", parts.join(", ")),
    ))
}

/// The printed result, built row by row: `[` + `repr(row)`, joined by
/// `, ` + `]`, stopping once past [`MAX_CHARS`].
#[derive(Debug, Default)]
pub struct Printer {
    text: String,
    chars: usize,
    rows: usize,
}

impl Printer {
    /// An empty result: `[`, no rows yet.
    pub fn new() -> Self {
        Printer {
            text: "[".into(),
            chars: 1,
            rows: 0,
        }
    }

    /// Adds one row. Returns `false` once the text is past the cut: more
    /// rows cannot change what is shown.
    pub fn push_row(&mut self, row: Vec<Val>) -> bool {
        let start = self.text.len();
        if self.rows > 0 {
            self.text.push_str(", ");
        }
        repr::write_repr(&mut self.text, &Val::tuple(row));
        self.chars += self.text[start..].chars().count();
        self.rows += 1;
        !self.is_past_cut()
    }

    /// Whether the text already exceeds the cut.
    pub fn is_past_cut(&self) -> bool {
        self.chars > MAX_CHARS
    }

    /// The text the agent reads.
    pub fn finish(mut self) -> String {
        if self.is_past_cut() {
            return truncate(&self.text);
        }
        self.text.push(']');
        truncate(&self.text)
    }
}

/// The original's cut of any printed text (results and error messages).
pub fn truncate(text: &str) -> String {
    match text.char_indices().nth(MAX_CHARS) {
        Some((at, _)) => format!("{}{TRUNCATED}", &text[..at]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temporal_values_print_like_python() {
        let k = |kind: Kind, t: &str| repr::repr(&kind.convert(Some(t.as_bytes())));
        assert_eq!(
            k(Kind::Time, "-01:00:00"),
            "datetime.timedelta(days=-1, seconds=82800)"
        );
        assert_eq!(k(Kind::Time, "00:00:00"), "datetime.timedelta(0)");
        assert_eq!(
            k(Kind::Time, "00:00:00.5"),
            "datetime.timedelta(microseconds=500000)"
        );
        assert_eq!(
            k(Kind::DateTime, "2020-01-02 03:04:00"),
            "datetime.datetime(2020, 1, 2, 3, 4)"
        );
        assert_eq!(k(Kind::Date, "0000-00-00"), "None");
        assert_eq!(k(Kind::Bit, "\u{1}\u{0}"), "256");
    }

    #[test]
    fn printing_stops_past_the_cut_with_the_same_prefix() {
        let mut p = Printer::new();
        let mut n = 0;
        while p.push_row(vec![Val::str(&"x".repeat(50)), Val::Int(1)]) {
            n += 1;
        }
        let short = p.finish();
        assert!(n < 20, "stopped after {n} rows");
        assert_eq!(short.chars().count(), MAX_CHARS + TRUNCATED.len());
        let mut full = String::from("[");
        for i in 0..100 {
            if i > 0 {
                full.push_str(", ");
            }
            full.push_str(&format!("('{}', 1)", "x".repeat(50)));
        }
        full.push(']');
        assert_eq!(short, truncate(&full));
    }
}
