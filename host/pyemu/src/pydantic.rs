//! The part of pydantic v2 (lax mode) that τ²'s models exercise: building a
//! model instance from a dict or keyword arguments, with pydantic's
//! coercions (`"2"` → `2`, `2` → `2.0` for a float field...) and the exact
//! text of `str(ValidationError)`.

use super::repr::repr;
use super::{PyErr, Val};
use crate::Dict;

/// Version in the documentation links of pydantic's error messages; it is
/// the pydantic release τ²'s conformance vectors were generated with.
pub const DOCS_VERSION: &str = "2.14";

/// A field type.
#[derive(Debug)]
pub enum Ty {
    /// `str`
    Str,
    /// `int`
    Int,
    /// `float`
    Float,
    /// `bool`
    Bool,
    /// `Literal["a", "b", ...]`
    Lit(&'static [&'static str]),
    /// `Optional[T]`
    Opt(&'static Ty),
    /// `List[T]`
    List(&'static Ty),
    /// `Dict[str, T]`
    Dict(&'static Ty),
    /// A nested model.
    Model(&'static Model),
    /// A union of models told apart by the literal value of one field
    /// (pydantic's smart union picks the same member for valid data).
    Tagged(&'static str, &'static [&'static Model]),
    /// A `(str, Enum)` by its values. A member is held as its value: a
    /// `str` enum member compares, hashes and JSON-encodes as its value.
    Enum(&'static [&'static str]),
    /// `datetime.date` from its ISO text, held as `str(date)`
    /// (`YYYY-MM-DD`): every use τ² makes of one (`json.dumps(...,
    /// default=str)`, its DB hash, f-strings) goes through `str()`.
    Date,
    /// `datetime.datetime` from ISO text, held as `str(datetime)`
    /// (`YYYY-MM-DD HH:MM:SS`, as `default=str` writes it).
    DateTime,
}

/// A pydantic model: its class name and fields in declaration order.
#[derive(Debug)]
pub struct Model {
    /// Class name (shown in `N validation errors for NAME`).
    pub name: &'static str,
    /// Whether unknown keys are refused (`extra="forbid"`, τ²'s
    /// `BaseModelNoExtra`) rather than dropped (pydantic's default).
    pub extra_forbid: bool,
    /// Fields in declaration order, which is also `model_dump()` order.
    pub fields: &'static [Field],
}

/// A model field.
#[derive(Debug)]
pub struct Field {
    /// Field name.
    pub name: &'static str,
    /// Field type.
    pub ty: Ty,
    /// What an absent field becomes.
    pub default: FieldDefault,
}

/// What a field is when the input leaves it out.
#[derive(Debug)]
pub enum FieldDefault {
    /// Nothing: the field is required.
    Required,
    /// `None`.
    None,
    /// A value (pydantic neither validates nor copies a default; a factory
    /// makes a fresh one each time).
    Value(fn() -> Val),
}

impl FieldDefault {
    fn value(&self) -> Option<Val> {
        match self {
            FieldDefault::Required => None,
            FieldDefault::None => Some(Val::None),
            FieldDefault::Value(make) => Some(make()),
        }
    }
}

impl Field {
    /// A required field.
    pub const fn req(name: &'static str, ty: Ty) -> Self {
        Self {
            name,
            ty,
            default: FieldDefault::Required,
        }
    }

    /// A field defaulting to `None`.
    pub const fn opt(name: &'static str, ty: Ty) -> Self {
        Self {
            name,
            ty,
            default: FieldDefault::None,
        }
    }

    /// A field with a default value or factory.
    pub const fn with(name: &'static str, ty: Ty, default: fn() -> Val) -> Self {
        Self {
            name,
            ty,
            default: FieldDefault::Value(default),
        }
    }
}

/// One entry of a pydantic `ValidationError`.
#[derive(Clone, Debug)]
pub struct LineError {
    loc: Vec<String>,
    kind: &'static str,
    msg: String,
    input: Val,
}

/// A pydantic `ValidationError`.
#[derive(Clone, Debug)]
pub struct ValidationError {
    title: &'static str,
    errors: Vec<LineError>,
    /// Set when an input exceeded what the emulation represents (an int
    /// beyond 128 bits); the error is then reported as that, not as text
    /// pydantic would not have produced.
    limit: bool,
}

impl ValidationError {
    /// `str(exc)`.
    pub fn text(&self) -> String {
        let n = self.errors.len();
        let mut out = format!(
            "{n} validation error{} for {}",
            if n == 1 { "" } else { "s" },
            self.title
        );
        for e in &self.errors {
            if !e.loc.is_empty() {
                out.push('\n');
                out.push_str(&e.loc.join("."));
            }
            out.push_str(&format!(
                "\n  {} [type={}, input_value={}, input_type={}]",
                e.msg,
                e.kind,
                truncated_repr(&e.input),
                e.input.type_name()
            ));
            out.push_str(&format!(
                "\n    For further information visit https://errors.pydantic.dev/{DOCS_VERSION}/v/{}",
                e.kind
            ));
        }
        out
    }
}

impl From<ValidationError> for PyErr {
    fn from(e: ValidationError) -> Self {
        if e.limit {
            return PyErr::internal("integer string beyond the emulated 128-bit range");
        }
        PyErr::other("ValidationError", e.text())
    }
}

/// pydantic-core shows `repr(input)` cut to its first 25 and last 24 bytes
/// (on character boundaries) around `...` when it is longer than 50 bytes.
fn truncated_repr(v: &Val) -> String {
    let r = repr(v);
    if r.len() <= 50 {
        return r;
    }
    let mut a = 25;
    while !r.is_char_boundary(a) {
        a -= 1;
    }
    let mut b = r.len() - 24;
    while !r.is_char_boundary(b) {
        b += 1;
    }
    format!("{}...{}", &r[..a], &r[b..])
}

/// An input to validate: a raw Python value, or a list of instances that
/// are already valid models (pydantic accepts instances as they are).
#[derive(Clone, Debug)]
pub enum Input {
    /// A raw value, validated and coerced.
    Raw(Val),
    /// A list of model instances, accepted unchanged.
    Instances(Vec<Val>),
}

struct Ctx {
    errors: Vec<LineError>,
    limit: bool,
}

impl Ctx {
    fn err(&mut self, loc: &[String], kind: &'static str, msg: impl Into<String>, input: &Val) {
        self.errors.push(LineError {
            loc: loc.to_vec(),
            kind,
            msg: msg.into(),
            input: input.clone(),
        });
    }
}

/// `Model(**kwargs)`: validates keyword arguments (in call order) into an
/// instance, or fails with pydantic's error.
pub fn construct(
    model: &'static Model,
    kwargs: Vec<(&str, Input)>,
) -> Result<Val, ValidationError> {
    let mut ctx = Ctx {
        errors: Vec::new(),
        limit: false,
    };
    // The dict pydantic reports as the input of a missing field.
    let as_dict = Dict::from_pairs(kwargs.iter().map(|(k, v)| {
        (
            *k,
            match v {
                Input::Raw(v) => v.clone(),
                Input::Instances(items) => Val::list(items.clone()),
            },
        )
    }));
    let whole = Val::dict(as_dict);
    let mut out = Dict::with_capacity(model.fields.len());
    for f in model.fields {
        let loc = vec![f.name.to_string()];
        match kwargs.iter().find(|(k, _)| *k == f.name) {
            Some((_, Input::Instances(items))) => out.insert(f.name, Val::list(items.clone())),
            Some((_, Input::Raw(v))) => {
                if let Some(v) = validate(&mut ctx, &f.ty, v, &loc) {
                    out.insert(f.name, v);
                }
            }
            None => match f.default.value() {
                Some(v) => out.insert(f.name, v),
                None => ctx.err(&loc, "missing", "Field required", &whole),
            },
        }
    }
    if model.extra_forbid {
        for (k, v) in &kwargs {
            if !model.fields.iter().any(|f| f.name == *k) {
                let v = match v {
                    Input::Raw(v) => v.clone(),
                    Input::Instances(items) => Val::list(items.clone()),
                };
                ctx.err(
                    &[k.to_string()],
                    "extra_forbidden",
                    "Extra inputs are not permitted",
                    &v,
                );
            }
        }
    }
    if ctx.errors.is_empty() {
        Ok(Val::dict(out))
    } else {
        Err(ValidationError {
            title: model.name,
            errors: ctx.errors,
            limit: ctx.limit,
        })
    }
}

/// `Model.model_validate(v)` / `Model(**v)` for a raw value.
pub fn validate_model(model: &'static Model, v: &Val) -> Result<Val, ValidationError> {
    let mut ctx = Ctx {
        errors: Vec::new(),
        limit: false,
    };
    match validate(&mut ctx, &Ty::Model(model), v, &[]) {
        Some(out) if ctx.errors.is_empty() => Ok(out),
        _ => Err(ValidationError {
            title: model.name,
            errors: ctx.errors,
            limit: ctx.limit,
        }),
    }
}

fn validate(ctx: &mut Ctx, ty: &Ty, v: &Val, loc: &[String]) -> Option<Val> {
    match ty {
        Ty::Str => match v {
            Val::Str(_) => Some(v.clone()),
            _ => {
                ctx.err(loc, "string_type", "Input should be a valid string", v);
                None
            }
        },
        Ty::Bool => match v {
            Val::Bool(_) => Some(v.clone()),
            _ => {
                ctx.err(loc, "bool_type", "Input should be a valid boolean", v);
                None
            }
        },
        Ty::Int => match to_int(v) {
            Ok(i) => Some(Val::Int(i)),
            Err(f) if f == TOO_BIG => {
                ctx.limit = true;
                ctx.err(loc, f.0, f.1, v);
                None
            }
            Err((kind, msg)) => {
                ctx.err(loc, kind, msg, v);
                None
            }
        },
        Ty::Float => match to_float(v) {
            Ok(f) => Some(Val::Float(f)),
            Err((kind, msg)) => {
                ctx.err(loc, kind, msg, v);
                None
            }
        },
        Ty::Lit(options) => match v {
            Val::Str(s) if options.contains(&&**s) => Some(v.clone()),
            _ => {
                ctx.err(
                    loc,
                    "literal_error",
                    format!("Input should be {}", literal_expected(options)),
                    v,
                );
                None
            }
        },
        Ty::Enum(options) => match v {
            Val::Str(s) if options.contains(&&**s) => Some(v.clone()),
            _ => {
                ctx.err(
                    loc,
                    "enum",
                    format!("Input should be {}", literal_expected(options)),
                    v,
                );
                None
            }
        },
        Ty::Date | Ty::DateTime => match parse_date(ty, v) {
            Ok(d) => Some(d),
            Err((kind, msg)) => {
                ctx.err(loc, kind, msg, v);
                None
            }
        },
        Ty::Opt(inner) => match v {
            Val::None => Some(Val::None),
            _ => validate(ctx, inner, v, loc),
        },
        Ty::List(inner) => match v {
            Val::List(items) => {
                let mut out = Vec::with_capacity(items.len());
                let before = ctx.errors.len();
                for (i, item) in items.iter().enumerate() {
                    let mut l = loc.to_vec();
                    l.push(i.to_string());
                    if let Some(x) = validate(ctx, inner, item, &l) {
                        out.push(x);
                    }
                }
                (ctx.errors.len() == before).then(|| Val::list(out))
            }
            _ => {
                ctx.err(loc, "list_type", "Input should be a valid list", v);
                None
            }
        },
        Ty::Dict(inner) => match v {
            Val::Dict(d) => {
                let mut out = Dict::with_capacity(d.len());
                let before = ctx.errors.len();
                for (k, item) in d.iter() {
                    let mut l = loc.to_vec();
                    l.push(k.to_string());
                    if let Some(x) = validate(ctx, inner, item, &l) {
                        out.insert(k, x);
                    }
                }
                (ctx.errors.len() == before).then(|| Val::dict(out))
            }
            _ => {
                ctx.err(loc, "dict_type", "Input should be a valid dictionary", v);
                None
            }
        },
        Ty::Model(model) => match v {
            Val::Dict(d) => {
                let mut out = Dict::with_capacity(model.fields.len());
                let before = ctx.errors.len();
                for f in model.fields {
                    let mut l = loc.to_vec();
                    l.push(f.name.to_string());
                    match d.get(f.name) {
                        Some(x) => {
                            if let Some(x) = validate(ctx, &f.ty, x, &l) {
                                out.insert(f.name, x);
                            }
                        }
                        None => match f.default.value() {
                            Some(x) => out.insert(f.name, x),
                            None => ctx.err(&l, "missing", "Field required", v),
                        },
                    }
                }
                if model.extra_forbid {
                    for (k, x) in d.iter() {
                        if !model.fields.iter().any(|f| f.name == k) {
                            let mut l = loc.to_vec();
                            l.push(k.to_string());
                            ctx.err(&l, "extra_forbidden", "Extra inputs are not permitted", x);
                        }
                    }
                }
                (ctx.errors.len() == before).then(|| Val::dict(out))
            }
            _ => {
                ctx.err(
                    loc,
                    "model_type",
                    format!(
                        "Input should be a valid dictionary or instance of {}",
                        model.name
                    ),
                    v,
                );
                None
            }
        },
        Ty::Tagged(tag, members) => {
            let value = v.as_dict().and_then(|d| d.get(tag)).and_then(Val::as_str);
            let member = members.iter().find(|m| {
                m.fields.iter().any(|f| {
                    f.name == *tag && matches!(f.ty, Ty::Lit(opts) if Some(opts[0]) == value)
                })
            });
            match member {
                Some(m) => validate(ctx, &Ty::Model(m), v, loc),
                None => {
                    ctx.err(
                        loc,
                        "union_tag_invalid",
                        format!("Input tag {value:?} does not match any member"),
                        v,
                    );
                    None
                }
            }
        }
    }
}

/// `date` (and `datetime`) text as pydantic reads it from a `str`: ISO
/// `YYYY-MM-DD`, with `THH:MM:SS` for a datetime. The held form is `str()`
/// of the value. Only the shapes τ²'s data files use are read; anything
/// else is refused with pydantic's error kind.
fn parse_date(ty: &Ty, v: &Val) -> Result<Val, Failure> {
    let failure = match ty {
        Ty::Date => (
            "date_from_datetime_parsing",
            "Input should be a valid date or datetime",
        ),
        _ => (
            "datetime_from_date_parsing",
            "Input should be a valid datetime or date",
        ),
    };
    let Val::Str(s) = v else {
        return Err(match ty {
            Ty::Date => ("date_type", "Input should be a valid date"),
            _ => ("datetime_type", "Input should be a valid datetime"),
        });
    };
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    let (day, time) = match s.split_once(['T', ' ']) {
        Some((d, t)) => (d, Some(t)),
        None => (&**s, None),
    };
    let parts: Vec<&str> = day.split('-').collect();
    let valid_day = parts.len() == 3
        && parts[0].len() == 4
        && parts[1].len() == 2
        && parts[2].len() == 2
        && parts.iter().all(|p| digits(p));
    let time_parts: Option<Vec<&str>> = time.map(|t| t.split(':').collect());
    let valid_time = match &time_parts {
        None => true,
        Some(p) => p.len() == 3 && p.iter().all(|x| x.len() == 2 && digits(x)),
    };
    if !valid_day || !valid_time {
        return Err(failure);
    }
    match (ty, time) {
        (Ty::Date, None) => Ok(Val::str(day)),
        // A date field takes a datetime only at midnight.
        (Ty::Date, Some("00:00:00")) => Ok(Val::str(day)),
        (Ty::Date, Some(_)) => Err((
            "date_from_datetime_inexact",
            "Datetimes provided to dates should have zero time - e.g. be exact dates",
        )),
        (_, None) => Ok(Val::str(&format!("{day} 00:00:00"))),
        (_, Some(t)) => Ok(Val::str(&format!("{day} {t}"))),
    }
}

fn literal_expected(options: &[&str]) -> String {
    let quoted: Vec<String> = options.iter().map(|o| repr(&Val::str(o))).collect();
    match quoted.len() {
        0 => String::new(),
        1 => quoted[0].clone(),
        n => format!("{} or {}", quoted[..n - 1].join(", "), quoted[n - 1]),
    }
}

type Failure = (&'static str, &'static str);

const INT_TYPE: Failure = ("int_type", "Input should be a valid integer");
const INT_PARSING: Failure = (
    "int_parsing",
    "Input should be a valid integer, unable to parse string as an integer",
);
const INT_FROM_FLOAT: Failure = (
    "int_from_float",
    "Input should be a valid integer, got a number with a fractional part",
);
const INT_PARSING_SIZE: Failure = (
    "int_parsing_size",
    "Unable to parse input string as an integer, exceeded maximum size",
);
/// Not a pydantic error: a digit string beyond the 128 bits ints have here.
const TOO_BIG: Failure = ("emulation_limit", "integer beyond the emulated range");
const FINITE_NUMBER: Failure = ("finite_number", "Input should be a finite number");
const FLOAT_TYPE: Failure = ("float_type", "Input should be a valid number");
const FLOAT_PARSING: Failure = (
    "float_parsing",
    "Input should be a valid number, unable to parse string as a number",
);

/// Lax-mode `int` validation.
pub fn to_int(v: &Val) -> Result<i128, Failure> {
    match v {
        Val::Int(i) => Ok(*i),
        Val::Bool(b) => Ok(i128::from(*b)),
        Val::Float(f) => float_as_int(*f),
        Val::Str(s) => str_as_int(s),
        _ => Err(INT_TYPE),
    }
}

fn float_as_int(f: f64) -> Result<i128, Failure> {
    if !f.is_finite() {
        Err(FINITE_NUMBER)
    } else if f % 1.0 != 0.0 {
        Err(INT_FROM_FLOAT)
    } else if (i64::MIN as f64) < f && f < (i64::MAX as f64) {
        Ok(f as i128)
    } else {
        Err(INT_PARSING_SIZE)
    }
}

/// A strict JSON integer (`-?(0|[1-9][0-9]*)`), the first thing
/// pydantic-core tries on a string.
fn json_int(s: &str) -> Option<i128> {
    if !is_json_int(s) {
        return None;
    }
    s.parse::<i128>().ok()
}

fn is_json_int(s: &str) -> bool {
    let digits = s.strip_prefix('-').unwrap_or(s);
    !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'))
}

fn str_as_int(s: &str) -> Result<i128, Failure> {
    let parse = |t: &str| match json_int(t) {
        Some(i) => Ok(i),
        // Valid digits that only overflow: Python would hold a big int.
        None if is_json_int(t) => Err(TOO_BIG),
        None => Err(INT_PARSING),
    };
    match parse(s) {
        Err(INT_PARSING) => {}
        done => return done,
    }
    match clean_int_str(s) {
        Some(c) => parse(&c),
        None => Err(INT_PARSING),
    }
}

/// pydantic-core's clean-up of an integer string: surrounding whitespace,
/// one sign, leading zeros, a `.000` tail and single underscores between
/// digits. `None` when nothing changed (which is itself a parse failure).
fn clean_int_str(original: &str) -> Option<String> {
    let len_before = original.len();
    let mut s = original.trim();
    if let Some(rest) = s.strip_prefix('+') {
        if rest.starts_with('-') {
            return None;
        }
        s = rest;
    }
    let mut negative = false;
    if let Some(rest) = s.strip_prefix('-') {
        if rest.starts_with('-') || rest.starts_with('+') {
            return None;
        }
        negative = true;
        s = rest;
    }
    s = strip_leading_zeros(s)?;
    if let Some(i) = s.find('.') {
        let decimal = &s[i + 1..];
        if !decimal.is_empty() && decimal.chars().all(|c| c == '0') {
            s = &s[..i];
        }
    }
    let sign = if negative { "-" } else { "" };
    if let Some(stripped) = strip_underscores(s) {
        return Some(format!("{sign}{stripped}"));
    }
    if len_before == s.len() {
        return None;
    }
    Some(format!("{sign}{s}"))
}

fn strip_leading_zeros(s: &str) -> Option<&str> {
    let mut chars = s.char_indices();
    match chars.next() {
        Some((_, '0')) => {}
        Some((_, c)) if c.is_ascii_digit() || c == '-' => return Some(s),
        _ => return None,
    }
    for (i, c) in chars {
        match c {
            '0' | '_' => {}
            '1'..='9' | '-' => return Some(&s[i..]),
            '.' => return Some(&s[i - 1..]),
            _ => return None,
        }
    }
    Some(&s[s.len() - 1..])
}

fn strip_underscores(s: &str) -> Option<String> {
    if s.starts_with('_') || s.ends_with('_') || !s.contains('_') || s.contains("__") {
        None
    } else {
        Some(s.replace('_', ""))
    }
}

/// Lax-mode `float` validation.
pub fn to_float(v: &Val) -> Result<f64, Failure> {
    match v {
        Val::Float(f) => Ok(*f),
        Val::Int(i) => Ok(*i as f64),
        Val::Bool(b) => Ok(if *b { 1.0 } else { 0.0 }),
        Val::Str(s) => {
            // pydantic-core parses with Rust's `f64::from_str`, so this is
            // the same grammar by construction.
            if let Ok(f) = s.trim().parse::<f64>() {
                return Ok(f);
            }
            strip_underscores(s)
                .and_then(|x| x.parse::<f64>().ok())
                .ok_or(FLOAT_PARSING)
        }
        _ => Err(FLOAT_TYPE),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static P: Model = Model {
        name: "P",
        extra_forbid: false,
        fields: &[
            Field::req("a", Ty::Int),
            Field::req("b", Ty::Lit(&["x", "y", "z"])),
        ],
    };

    #[test]
    fn int_strings_follow_pydantic_core() {
        for (s, want) in [
            ("1", 1),
            (" 1 ", 1),
            ("1.0", 1),
            ("+1", 1),
            ("-1", -1),
            ("00012", 12),
            ("0_42", 42),
            ("-0", 0),
        ] {
            assert_eq!(str_as_int(s), Ok(want), "{s}");
        }
        for s in ["1.5", "0x10", "1e3", "", "abc", "1 000", "--1", "_1"] {
            assert_eq!(str_as_int(s), Err(INT_PARSING), "{s}");
        }
        assert_eq!(str_as_int(&"9".repeat(40)), Err(TOO_BIG));
        assert_eq!(str_as_int(&format!(" 00{}", "9".repeat(40))), Err(TOO_BIG));
    }

    #[test]
    fn error_text_matches_pydantic() {
        let e = construct(&P, vec![("a", Input::Raw(Val::str("abc")))]).unwrap_err();
        assert_eq!(
            e.text(),
            "2 validation errors for P\na\n  Input should be a valid integer, unable to parse string as an integer \
             [type=int_parsing, input_value='abc', input_type=str]\n    For further information visit \
             https://errors.pydantic.dev/2.14/v/int_parsing\nb\n  Field required [type=missing, \
             input_value={'a': 'abc'}, input_type=dict]\n    For further information visit \
             https://errors.pydantic.dev/2.14/v/missing"
        );
    }

    static STRICT: Model = Model {
        name: "APNSettings",
        extra_forbid: true,
        fields: &[
            Field::with("apn_name", Ty::Enum(&["internet", "broken"]), || {
                Val::str("internet")
            }),
            Field::opt("day", Ty::Opt(&Ty::Date)),
            Field::opt("at", Ty::Opt(&Ty::DateTime)),
        ],
    };

    #[test]
    fn enums_and_forbidden_extras_fail_as_pydantic_does() {
        let e = construct(
            &STRICT,
            vec![
                ("apn_name", Input::Raw(Val::str("x"))),
                ("extra", Input::Raw(Val::Int(1))),
            ],
        )
        .unwrap_err();
        // The text pydantic 2.14 gives for the same model and input.
        assert_eq!(
            e.text(),
            "2 validation errors for APNSettings\napn_name\n  Input should be 'internet' or 'broken' \
             [type=enum, input_value='x', input_type=str]\n    For further information visit \
             https://errors.pydantic.dev/2.14/v/enum\nextra\n  Extra inputs are not permitted \
             [type=extra_forbidden, input_value=1, input_type=int]\n    For further information visit \
             https://errors.pydantic.dev/2.14/v/extra_forbidden"
        );
        // A model that does not forbid extras drops them.
        assert!(
            construct(
                &P,
                vec![
                    ("a", Input::Raw(Val::Int(1))),
                    ("b", Input::Raw(Val::str("x"))),
                    ("c", Input::Raw(Val::None))
                ]
            )
            .is_ok()
        );
    }

    #[test]
    fn defaults_fill_absent_fields_and_dates_hold_their_str_form() {
        let v = validate_model(
            &STRICT,
            &Val::dict(Dict::from_pairs([
                ("day", Val::str("2025-01-01T00:00:00")),
                ("at", Val::str("2025-01-20T14:30:00")),
            ])),
        )
        .unwrap();
        let d = v.as_dict().unwrap();
        assert_eq!(d.get("apn_name").and_then(Val::as_str), Some("internet"));
        assert_eq!(d.get("day").and_then(Val::as_str), Some("2025-01-01"));
        assert_eq!(
            d.get("at").and_then(Val::as_str),
            Some("2025-01-20 14:30:00")
        );
        let e = validate_model(
            &STRICT,
            &Val::dict(Dict::from_pairs([("day", Val::str("2025-01-01T10:00:00"))])),
        )
        .unwrap_err();
        assert!(e.text().contains(
            "Datetimes provided to dates should have zero time - e.g. be exact dates [type=date_from_datetime_inexact"
        ));
        assert!(
            validate_model(
                &STRICT,
                &Val::dict(Dict::from_pairs([("day", Val::str("01/02/2025"))]))
            )
            .is_err()
        );
    }

    #[test]
    fn long_inputs_are_elided_like_pydantic_core() {
        assert_eq!(
            truncated_repr(&Val::str(&"y".repeat(60))),
            "'yyyyyyyyyyyyyyyyyyyyyyyy...yyyyyyyyyyyyyyyyyyyyyyy'"
        );
        assert_eq!(
            truncated_repr(&Val::str(&("é".repeat(24) + "xxxxxxxxxx"))),
            "'éééééééééééé...ééééééxxxxxxxxxx'"
        );
    }
}
