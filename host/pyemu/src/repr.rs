//! `repr()` and `str()` of [`Val`]s, including CPython's float repr.

use super::Val;

/// `repr(v)`.
pub fn repr(v: &Val) -> String {
    let mut out = String::new();
    write_repr(&mut out, v);
    out
}

/// `str(v)`, which is what an f-string interpolates.
pub fn to_str(v: &Val) -> String {
    match v {
        Val::Str(s) => s.to_string(),
        Val::Decimal(d) => d.to_string(),
        other => repr(other),
    }
}

/// Appends `repr(v)` to `out`.
pub fn write_repr(out: &mut String, v: &Val) {
    match v {
        Val::None => out.push_str("None"),
        Val::Bool(true) => out.push_str("True"),
        Val::Bool(false) => out.push_str("False"),
        Val::Int(i) => out.push_str(&i.to_string()),
        Val::BigInt(i) => out.push_str(&i.to_str_radix(10)),
        Val::Float(f) => out.push_str(&float_repr(*f)),
        Val::Str(s) => str_repr_into(s, out),
        Val::Bytes(b) => bytes_repr_into(b, out),
        Val::List(items) => write_items(out, items, "[", "]"),
        Val::Tuple(items) if items.len() == 1 => {
            out.push('(');
            write_repr(out, &items[0]);
            out.push_str(",)");
        }
        Val::Tuple(items) => write_items(out, items, "(", ")"),
        Val::Set(items) if items.is_empty() => out.push_str("set()"),
        Val::Set(items) => write_items(out, items, "{", "}"),
        Val::Dict(d) => write_pairs(out, d.iter(), |out, k| str_repr_into(k, out)),
        Val::AnyDict(pairs) => write_pairs(out, pairs.iter().map(|(k, v)| (k, v)), write_repr),
        Val::Decimal(d) => {
            out.push_str("Decimal('");
            out.push_str(d);
            out.push_str("')");
        }
        Val::Object(o) => out.push_str(&o.repr),
    }
}

fn write_items(out: &mut String, items: &[Val], open: &str, close: &str) {
    out.push_str(open);
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write_repr(out, item);
    }
    out.push_str(close);
}

fn write_pairs<'a, K: ?Sized + 'a>(
    out: &mut String,
    pairs: impl Iterator<Item = (&'a K, &'a Val)>,
    write_key: impl Fn(&mut String, &K),
) {
    out.push('{');
    for (i, (k, v)) in pairs.enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write_key(out, k);
        out.push_str(": ");
        write_repr(out, v);
    }
    out.push('}');
}

/// `repr(bytes)`: like `repr(str)` for ASCII, `\xNN` for other bytes.
fn bytes_repr_into(b: &[u8], out: &mut String) {
    let quote = if b.contains(&b'\'') && !b.contains(&b'"') {
        b'"'
    } else {
        b'\''
    };
    out.push('b');
    out.push(quote as char);
    for &c in b {
        match c {
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c as char);
            }
            0x20..0x7f => out.push(c as char),
            c => out.push_str(&format!("\\x{c:02x}")),
        }
    }
    out.push(quote as char);
}

/// The shortest round-tripping decimal digits of a finite, non-zero `f`
/// and its decimal point position: `f = 0.DIGITS × 10^decpt`.
///
/// The digits are ryu's (the shortest, closest to `f`: what CPython's
/// `repr` chooses too); only its layout differs from Python's, so the
/// digits are read back out of ryu's text (`1234.5`, `0.001234`,
/// `12340000000.0`, `1e30`, `1.234e-7`).
fn shortest_digits(f: f64) -> (Digits, i32) {
    let mut buf = ryu::Buffer::new();
    let text = buf.format_finite(f.abs());
    let (mantissa, exp) = match text.split_once('e') {
        Some((m, e)) => (m, e.parse::<i32>().unwrap_or(0)),
        None => (text, 0),
    };
    let int_len = mantissa.find('.').unwrap_or(mantissa.len());
    let mut digits = Digits::default();
    let mut decpt = int_len as i32 + exp;
    for b in mantissa.bytes().filter(u8::is_ascii_digit) {
        if digits.len == 0 && b == b'0' {
            // A leading zero (`0.00...`) moves the point, not a digit.
            decpt -= 1;
        } else {
            digits.push(b);
        }
    }
    while digits.len > 1 && digits.bytes[digits.len - 1] == b'0' {
        digits.len -= 1;
    }
    (digits, decpt)
}

/// Up to 17 significant digits (ryu writes at most 17, plus at most 16
/// padding zeros that are trimmed), without allocating.
#[derive(Default)]
struct Digits {
    bytes: [u8; 32],
    len: usize,
}

impl Digits {
    fn push(&mut self, b: u8) {
        if self.len < self.bytes.len() {
            self.bytes[self.len] = b;
            self.len += 1;
        }
    }

    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..self.len]).unwrap_or("0")
    }
}

/// CPython's `float.__repr__` (`repr(1.0) == '1.0'`, `repr(1e16) ==
/// '1e+16'`, `repr(1e-05) == '1e-05'`, `'inf'`, `'nan'`).
pub fn float_repr(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf".into() } else { "-inf".into() };
    }
    let sign = if f.is_sign_negative() { "-" } else { "" };
    if f == 0.0 {
        return format!("{sign}0.0");
    }
    let (digits, decpt) = shortest_digits(f);
    let digits = digits.as_str();
    let n = digits.len() as i32;
    // repr switches to exponent notation when the decimal exponent is < -4
    // or >= 16 (float_repr_style 'short', mode 'r').
    if decpt <= -4 || decpt > 16 {
        let exp = decpt - 1;
        let mant = if n == 1 {
            digits.to_string()
        } else {
            format!("{}.{}", &digits[..1], &digits[1..])
        };
        let esign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{mant}e{esign}{:02}", exp.abs())
    } else if decpt <= 0 {
        format!("{sign}0.{}{digits}", "0".repeat((-decpt) as usize))
    } else if decpt >= n {
        format!("{sign}{digits}{}.0", "0".repeat((decpt - n) as usize))
    } else {
        let (a, b) = digits.split_at(decpt as usize);
        format!("{sign}{a}.{b}")
    }
}

/// CPython's `str.__repr__`: single quotes unless the text contains `'`
/// and no `"`, backslash escapes for non-printable characters.
pub fn str_repr(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    str_repr_into(s, &mut out);
    out
}

/// [`str_repr`] appended to `out`: the one `repr(str)` of the crate (the
/// τ² tools' outputs and DBBench's rendered rows both use it).
pub fn str_repr_into(s: &str, out: &mut String) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if (c as u32) < 0x7f => out.push(c),
            c if is_printable(c) => out.push(c),
            c => {
                let cp = c as u32;
                if cp <= 0xff {
                    out.push_str(&format!("\\x{cp:02x}"));
                } else if cp <= 0xffff {
                    out.push_str(&format!("\\u{cp:04x}"));
                } else {
                    out.push_str(&format!("\\U{cp:08x}"));
                }
            }
        }
    }
    out.push(quote);
}

/// Python's `str.isprintable` for one character, from the Unicode
/// database CPython uses (its non-printable ranges: categories Cc, Cf,
/// Co, Cs, Zl, Zp, Zs and the unassigned code points).
pub fn is_printable(c: char) -> bool {
    let cp = c as u32;
    crate::unicode::NON_PRINTABLE
        .binary_search_by(|&(lo, hi)| {
            if hi < cp {
                std::cmp::Ordering::Less
            } else if lo > cp {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_err()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_repr_matches_cpython() {
        let cases = [
            (1.0, "1.0"),
            (0.1, "0.1"),
            (-0.0, "-0.0"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (1234567890123456.0, "1234567890123456.0"),
            (12345678901234567.0, "1.2345678901234568e+16"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.5e-5, "1.5e-05"),
            (123.456, "123.456"),
            (1e22, "1e+22"),
            (5e-324, "5e-324"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (f64::INFINITY, "inf"),
            (100.0, "100.0"),
            (123456789012345.6, "123456789012345.6"),
            (-2.5, "-2.5"),
            (1.5e300, "1.5e+300"),
            // Exact ties at 17 digits round to even (CPython's dtoa; Rust's
            // own `{:e}` rounds these up).
            (233115890514796.0 + 0.125, "233115890514796.12"),
            (158384277779029.0 + 0.375, "158384277779029.38"),
            (248889880452198.0 + 0.125, "248889880452198.12"),
            (266854832669453.0 + 0.625, "266854832669453.62"),
            (154665141705938.0 + 0.125, "154665141705938.12"),
        ];
        for (f, want) in cases {
            assert_eq!(float_repr(f), want, "{f}");
        }
    }

    /// The digits from Rust's own shortest formatting (`{:e}`, Grisu with
    /// a Dragon4 fallback): an independent implementation to check ryu's
    /// digits against.
    fn std_digits(f: f64) -> (String, i32) {
        let s = format!("{:e}", f.abs());
        let (mant, exp) = s.split_once('e').unwrap();
        let digits: String = mant.chars().filter(|c| c.is_ascii_digit()).collect();
        (digits, exp.parse::<i32>().unwrap() + 1)
    }

    #[test]
    fn ryu_digits_agree_with_std_shortest_formatting() {
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let (mut checked, mut ties) = (0, 0);
        for i in 0..200_000u64 {
            let r = next();
            let f = match i % 4 {
                // Any bit pattern: subnormals, huge and tiny exponents.
                0 => f64::from_bits(r),
                // Prices and quantities, as the tools see them.
                1 => (r % 10_000_000) as f64 / 100.0,
                2 => (r % 100_000) as f64 * 0.15,
                _ => f64::from_bits((r >> 12) | 0x4330_0000_0000_0000) - 4503599627370496.0,
            };
            if !f.is_finite() || f == 0.0 {
                continue;
            }
            let (digits, decpt) = shortest_digits(f);
            let ours = (digits.as_str().to_string(), decpt);
            let theirs = std_digits(f);
            if ours != theirs {
                // Only an exact tie may differ: std rounds it up, ryu and
                // CPython to the even digit.
                let exact = format!("{:.800e}", f.abs());
                let exact: String = exact.split('e').next().unwrap().replace('.', "");
                let rest = &exact[ours.0.len()..];
                assert!(
                    rest.starts_with('5') && rest[1..].bytes().all(|b| b == b'0'),
                    "{f:e}: {ours:?} vs {theirs:?}, not a tie"
                );
                assert!(
                    (ours.0.as_bytes()[ours.0.len() - 1] - b'0').is_multiple_of(2),
                    "{f:e}"
                );
                ties += 1;
            }
            checked += 1;
        }
        assert!(checked > 190_000);
        // The half-integer family hits ties; the test must see some.
        assert!(ties > 0);
    }

    #[test]
    fn str_repr_matches_cpython() {
        assert_eq!(str_repr("ab'c"), "\"ab'c\"");
        assert_eq!(str_repr("a'b\"c"), "'a\\'b\"c'");
        assert_eq!(
            str_repr("a\nb\u{0}\u{7f}\u{a0}\u{2028}😀é中"),
            "'a\\nb\\x00\\x7f\\xa0\\u2028😀é中'"
        );
    }
}
