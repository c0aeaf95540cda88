//! Python operators on [`Val`]s, with CPython's error messages.

use std::cmp::Ordering;

use super::repr::to_str;
use super::{PyErr, PyResult, Val};

/// A number operand: `bool` counts as `int`, as in Python.
#[derive(Clone, Copy, Debug)]
pub enum Num {
    /// `int` (or `bool`).
    Int(i128),
    /// `float`.
    Float(f64),
}

impl Num {
    /// The number inside `v`, if `v` is an `int`, `float` or `bool`.
    pub fn of(v: &Val) -> Option<Num> {
        match v {
            Val::Bool(b) => Some(Num::Int(i128::from(*b))),
            Val::Int(i) => Some(Num::Int(*i)),
            Val::Float(f) => Some(Num::Float(*f)),
            _ => None,
        }
    }

    /// Back to a value.
    pub fn val(self) -> Val {
        match self {
            Num::Int(i) => Val::Int(i),
            Num::Float(f) => Val::Float(f),
        }
    }

    /// `float(n)` (exact for every int JSON can carry).
    pub fn to_f64(self) -> f64 {
        match self {
            Num::Int(i) => i as f64,
            Num::Float(f) => f,
        }
    }
}

/// Exact comparison of an int with a float, as CPython does it (no
/// rounding of the int). `None` when `f` is NaN.
fn cmp_int_float(i: i128, f: f64) -> Option<Ordering> {
    if f.is_nan() {
        return None;
    }
    if f.is_infinite() || f.abs() >= 1.7e38 {
        return Some(if f > 0.0 {
            Ordering::Less
        } else {
            Ordering::Greater
        });
    }
    let t = f.trunc();
    let ti = t as i128;
    match i.cmp(&ti) {
        Ordering::Equal => 0.0f64.partial_cmp(&(f - t)),
        o => Some(o),
    }
}

/// Numeric comparison; `None` for NaN.
pub fn num_cmp(a: Num, b: Num) -> Option<Ordering> {
    match (a, b) {
        (Num::Int(x), Num::Int(y)) => Some(x.cmp(&y)),
        (Num::Float(x), Num::Float(y)) => x.partial_cmp(&y),
        (Num::Int(x), Num::Float(y)) => cmp_int_float(x, y),
        (Num::Float(x), Num::Int(y)) => cmp_int_float(y, x).map(Ordering::reverse),
    }
}

/// Python `a == b`.
pub fn eq(a: &Val, b: &Val) -> bool {
    if let (Some(x), Some(y)) = (Num::of(a), Num::of(b)) {
        return num_cmp(x, y) == Some(Ordering::Equal);
    }
    match (a, b) {
        (Val::None, Val::None) => true,
        (Val::BigInt(x), Val::BigInt(y)) => x == y,
        (Val::Str(x), Val::Str(y)) => x == y,
        (Val::Bytes(x), Val::Bytes(y)) => x == y,
        (Val::List(x), Val::List(y)) | (Val::Tuple(x), Val::Tuple(y)) => {
            x.len() == y.len() && x.iter().zip(y.iter()).all(|(p, q)| eq(p, q))
        }
        (Val::Dict(x), Val::Dict(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| eq(v, w)))
        }
        _ => false,
    }
}

fn unorderable(op: &str, a: &Val, b: &Val) -> PyErr {
    PyErr::type_error(format!(
        "'{op}' not supported between instances of '{}' and '{}'",
        a.type_name(),
        b.type_name()
    ))
}

/// Python `a <= b`.
pub fn le(a: &Val, b: &Val) -> PyResult<bool> {
    if let (Some(x), Some(y)) = (Num::of(a), Num::of(b)) {
        return Ok(matches!(
            num_cmp(x, y),
            Some(Ordering::Less | Ordering::Equal)
        ));
    }
    match (a, b) {
        (Val::Str(x), Val::Str(y)) => Ok(x <= y),
        (Val::List(_), Val::List(_)) => Ok(eq(a, b) || lt(a, b)?),
        _ => Err(unorderable("<=", a, b)),
    }
}

/// Python `a >= b`.
pub fn ge(a: &Val, b: &Val) -> PyResult<bool> {
    if let (Some(x), Some(y)) = (Num::of(a), Num::of(b)) {
        return Ok(matches!(
            num_cmp(x, y),
            Some(Ordering::Greater | Ordering::Equal)
        ));
    }
    match (a, b) {
        (Val::Str(x), Val::Str(y)) => Ok(x >= y),
        (Val::List(_), Val::List(_)) => Ok(eq(a, b) || lt(b, a)?),
        _ => Err(unorderable(">=", a, b)),
    }
}

/// Python `a < b`.
pub fn lt(a: &Val, b: &Val) -> PyResult<bool> {
    if let (Some(x), Some(y)) = (Num::of(a), Num::of(b)) {
        return Ok(num_cmp(x, y) == Some(Ordering::Less));
    }
    match (a, b) {
        (Val::Str(x), Val::Str(y)) => Ok(x < y),
        (Val::List(x), Val::List(y)) => {
            for (p, q) in x.iter().zip(y.iter()) {
                if !eq(p, q) {
                    return lt(p, q);
                }
            }
            Ok(x.len() < y.len())
        }
        _ => Err(unorderable("<", a, b)),
    }
}

/// Python `a > b`.
pub fn gt(a: &Val, b: &Val) -> PyResult<bool> {
    match (a, b) {
        (Val::Str(_), Val::Str(_)) | (Val::List(_), Val::List(_)) => lt(b, a),
        _ => match (Num::of(a), Num::of(b)) {
            (Some(x), Some(y)) => Ok(num_cmp(x, y) == Some(Ordering::Greater)),
            _ => Err(unorderable(">", a, b)),
        },
    }
}

/// The dict key `v` would look up in `d` (`v in d`, `d[v]`): `Some` for a
/// `str`, `None` for other hashable values (which never equal a str key),
/// `TypeError` for unhashable ones.
pub fn as_key(v: &Val) -> PyResult<Option<&str>> {
    match v {
        Val::Str(s) => Ok(Some(s)),
        Val::List(_) | Val::Set(_) | Val::Dict(_) | Val::AnyDict(_) => Err(PyErr::type_error(
            format!("unhashable type: '{}'", v.type_name()),
        )),
        _ => Ok(None),
    }
}

/// `v in d` for a dict with str keys.
pub fn in_dict(v: &Val, d: &super::Dict) -> PyResult<bool> {
    Ok(as_key(v)?.is_some_and(|k| d.contains_key(k)))
}

/// `v in {"a", "b"}` for a set of strings.
pub fn in_str_set(v: &Val, set: &[&str]) -> PyResult<bool> {
    Ok(as_key(v)?.is_some_and(|k| set.contains(&k)))
}

/// `list(v)`: the items iterating `v` yields.
pub fn iterate(v: &Val) -> PyResult<Vec<Val>> {
    match v {
        Val::List(items) => Ok(items.to_vec()),
        Val::Str(s) => Ok(s
            .chars()
            .map(|c| Val::str(c.encode_utf8(&mut [0; 4])))
            .collect()),
        Val::Dict(d) => Ok(d.keys().map(Val::str).collect()),
        _ => Err(PyErr::type_error(format!(
            "'{}' object is not iterable",
            v.type_name()
        ))),
    }
}

/// `len(v)`.
pub fn len(v: &Val) -> PyResult<usize> {
    match v {
        Val::List(items) => Ok(items.len()),
        Val::Str(s) => Ok(s.chars().count()),
        Val::Dict(d) => Ok(d.len()),
        _ => Err(PyErr::type_error(format!(
            "object of type '{}' has no len()",
            v.type_name()
        ))),
    }
}

/// `container.count(x)` for a `list` or `str`.
pub fn count(container: &Val, x: &Val) -> PyResult<usize> {
    match container {
        Val::List(items) => Ok(items.iter().filter(|i| eq(i, x)).count()),
        Val::Str(s) => match x {
            Val::Str(sub) => Ok(str_count(s, sub)),
            other => Err(PyErr::type_error(format!(
                "must be str, not {}",
                other.type_name()
            ))),
        },
        other => Err(PyErr::attribute(other, "count")),
    }
}

/// `s.count(sub)`: non-overlapping occurrences; `len(s) + 1` for `""`.
fn str_count(s: &str, sub: &str) -> usize {
    if sub.is_empty() {
        return s.chars().count() + 1;
    }
    s.matches(sub).count()
}

/// `sorted(v)`, with the comparisons (and so the `TypeError` for mixed
/// types) in the order CPython's list sort makes them for short lists: a
/// leading run, then binary insertion.
pub fn sorted(v: &Val) -> PyResult<Vec<Val>> {
    let mut items = iterate(v)?;
    let n = items.len();
    if n < 2 {
        return Ok(items);
    }
    // count_run
    let mut run = 2;
    if lt(&items[1], &items[0])? {
        while run < n && lt(&items[run], &items[run - 1])? {
            run += 1;
        }
        items[..run].reverse();
    } else {
        while run < n && !lt(&items[run], &items[run - 1])? {
            run += 1;
        }
    }
    // binarysort of the rest
    for start in run..n {
        let pivot = items[start].clone();
        let (mut l, mut r) = (0, start);
        while l < r {
            let p = l + ((r - l) >> 1);
            if lt(&pivot, &items[p])? {
                r = p;
            } else {
                l = p + 1;
            }
        }
        items[l..=start].rotate_right(1);
    }
    Ok(items)
}

fn overflow() -> PyErr {
    PyErr::internal("integer overflow beyond the emulated 128-bit range")
}

/// The binary arithmetic operators the tools use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
}

impl Op {
    fn symbol(self) -> &'static str {
        match self {
            Op::Add => "+",
            Op::Sub => "-",
            Op::Mul => "*",
        }
    }
}

/// `a <op> b`, or `a <op>= b` when `inplace` (which only changes the
/// operator shown in a `TypeError`).
pub fn binop(op: Op, a: &Val, b: &Val, inplace: bool) -> PyResult<Val> {
    if let (Some(x), Some(y)) = (Num::of(a), Num::of(b)) {
        return Ok(match (x, y) {
            (Num::Int(x), Num::Int(y)) => Val::Int(
                match op {
                    Op::Add => x.checked_add(y),
                    Op::Sub => x.checked_sub(y),
                    Op::Mul => x.checked_mul(y),
                }
                .ok_or_else(overflow)?,
            ),
            _ => {
                let (x, y) = (x.to_f64(), y.to_f64());
                Val::Float(match op {
                    Op::Add => x + y,
                    Op::Sub => x - y,
                    Op::Mul => x * y,
                })
            }
        });
    }
    match (op, a, b) {
        (Op::Add, Val::Str(x), Val::Str(y)) => return Ok(Val::str(&format!("{x}{y}"))),
        (Op::Add, Val::List(x), Val::List(y)) => {
            return Ok(Val::list(x.iter().chain(y.iter()).cloned().collect()));
        }
        (Op::Add, Val::Str(_) | Val::List(_), other) => {
            let t = a.type_name();
            return Err(PyErr::type_error(format!(
                "can only concatenate {t} (not \"{}\") to {t}",
                other.type_name()
            )));
        }
        (Op::Mul, Val::Str(_) | Val::List(_), n) | (Op::Mul, n, Val::Str(_) | Val::List(_)) => {
            let seq = if matches!(a, Val::Str(_) | Val::List(_)) {
                a
            } else {
                b
            };
            return match n {
                Val::Int(_) | Val::Bool(_) => {
                    let times = match Num::of(n) {
                        Some(Num::Int(k)) => usize::try_from(k.max(0)).map_err(|_| overflow())?,
                        _ => 0,
                    };
                    if times.saturating_mul(super::ops::len(seq)?) > 1 << 24 {
                        return Err(PyErr::internal("sequence repetition too large to emulate"));
                    }
                    Ok(repeat(seq, times))
                }
                other => Err(PyErr::type_error(format!(
                    "can't multiply sequence by non-int of type '{}'",
                    other.type_name()
                ))),
            };
        }
        _ => {}
    }
    Err(PyErr::type_error(format!(
        "unsupported operand type(s) for {}{}: '{}' and '{}'",
        op.symbol(),
        if inplace { "=" } else { "" },
        a.type_name(),
        b.type_name()
    )))
}

/// `seq * times` for a `str` or `list` (anything else is returned as is).
fn repeat(seq: &Val, times: usize) -> Val {
    match seq {
        Val::Str(s) => Val::str(&s.repeat(times)),
        Val::List(l) => Val::list(l.iter().cloned().cycle().take(l.len() * times).collect()),
        other => other.clone(),
    }
}

/// `-v` for a number.
pub fn neg(v: &Val) -> PyResult<Val> {
    match Num::of(v) {
        Some(Num::Int(i)) => Ok(Val::Int(i.checked_neg().ok_or_else(overflow)?)),
        Some(Num::Float(f)) => Ok(Val::Float(-f)),
        None => Err(PyErr::type_error(format!(
            "bad operand type for unary -: '{}'",
            v.type_name()
        ))),
    }
}

/// `round(v, 2)`: ints (and bools) come back as ints, floats are rounded
/// half-to-even on their exact binary value, like CPython.
pub fn round2(v: &Val) -> PyResult<Val> {
    match v {
        Val::Int(i) => Ok(Val::Int(*i)),
        Val::Bool(b) => Ok(Val::Int(i128::from(*b))),
        Val::Float(f) => Ok(Val::Float(round_f64(*f, 2))),
        other => Err(PyErr::type_error(format!(
            "type {} doesn't define __round__ method",
            other.type_name()
        ))),
    }
}

/// CPython's `round(f, ndigits)` for a float: the correctly rounded
/// decimal (ties to even), read back as a float.
pub fn round_f64(f: f64, ndigits: usize) -> f64 {
    if !f.is_finite() || f == 0.0 {
        return f;
    }
    // Rust's fixed-precision formatting is exact with ties to even, the
    // same rounding CPython's dtoa mode 3 performs.
    let s = format!("{:.*}", ndigits, f);
    let r: f64 = s.parse().unwrap_or(f);
    if r == 0.0 { 0.0f64.copysign(f) } else { r }
}

/// `abs(v)` for a number.
pub fn abs(v: &Val) -> PyResult<Val> {
    match Num::of(v) {
        Some(Num::Int(i)) => Ok(Val::Int(i.checked_abs().ok_or_else(overflow)?)),
        Some(Num::Float(f)) => Ok(Val::Float(f.abs())),
        None => Err(PyErr::type_error(format!(
            "bad operand type for abs(): '{}'",
            v.type_name()
        ))),
    }
}

/// Python truthiness.
pub fn truthy(v: &Val) -> bool {
    match v {
        Val::None => false,
        Val::Bool(b) => *b,
        Val::Int(i) => *i != 0,
        // Never zero: zero fits `Val::Int`.
        Val::BigInt(_) => true,
        Val::Float(f) => *f != 0.0,
        Val::Str(s) => !s.is_empty(),
        Val::Bytes(b) => !b.is_empty(),
        Val::List(l) | Val::Tuple(l) | Val::Set(l) => !l.is_empty(),
        Val::Dict(d) => !d.is_empty(),
        Val::AnyDict(d) => !d.is_empty(),
        // A zero Decimal has only zeros before its exponent; `NaN` and
        // `Infinity` have no digit and are true.
        Val::Decimal(d) => {
            let mantissa = d.split(['e', 'E']).next().unwrap_or_default();
            !mantissa.bytes().any(|b| b.is_ascii_digit())
                || mantissa.bytes().any(|b| (b'1'..=b'9').contains(&b))
        }
        // Python's default for objects. Of DBBench's dates and times only a
        // zero `timedelta` is false, and nothing tests their truth.
        Val::Object(_) => true,
    }
}

/// `str(v)`, re-exported for call sites that build messages.
pub fn s(v: &Val) -> String {
    to_str(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn j(v: serde_json::Value) -> Val {
        Val::from_json(&v)
    }

    #[test]
    fn equality_crosses_numeric_types() {
        assert!(eq(&j(serde_json::json!(1)), &j(serde_json::json!(1.0))));
        assert!(eq(&j(serde_json::json!(true)), &j(serde_json::json!(1))));
        assert!(!eq(&j(serde_json::json!("1")), &j(serde_json::json!(1))));
        assert!(eq(
            &j(serde_json::json!({"a": [1, 2]})),
            &j(serde_json::json!({"a": [1.0, 2]}))
        ));
    }

    #[test]
    fn truth_and_equality_of_the_values_dbbench_holds() {
        let dec = |t: &str| truthy(&Val::Decimal(t.into()));
        assert!(!dec("0") && !dec("-0.00") && !dec("0E+3"));
        assert!(dec("0.01") && dec("NaN") && dec("-Infinity"));
        assert!(!truthy(&Val::tuple(vec![])) && truthy(&Val::tuple(vec![Val::None])));
        assert!(!truthy(&Val::Bytes(b""[..].into())));
        assert!(truthy(&Val::from(u128::MAX)));
        assert!(eq(
            &Val::tuple(vec![Val::Int(1)]),
            &Val::tuple(vec![Val::Float(1.0)])
        ));
        assert!(!eq(&Val::tuple(vec![]), &Val::list(vec![])));
        assert!(eq(&Val::from(u128::MAX), &Val::from(u128::MAX)));
        let e = as_key(&Val::Set(std::sync::Arc::new(vec![]))).unwrap_err();
        assert_eq!(e.msg, "unhashable type: 'set'");
    }

    #[test]
    fn sorted_reports_the_first_failing_comparison() {
        let e = sorted(&j(serde_json::json!(["a", 1]))).unwrap_err();
        assert_eq!(
            e.msg,
            "'<' not supported between instances of 'int' and 'str'"
        );
        let ok = sorted(&j(serde_json::json!(["b", "a", "c", "a"]))).unwrap();
        assert_eq!(
            super::super::repr::repr(&Val::list(ok)),
            "['a', 'a', 'b', 'c']"
        );
        assert_eq!(sorted(&j(serde_json::json!("cab"))).unwrap().len(), 3);
    }

    #[test]
    fn arithmetic_errors_match_cpython() {
        let e = binop(
            Op::Sub,
            &j(serde_json::json!("a")),
            &j(serde_json::json!(1)),
            false,
        )
        .unwrap_err();
        assert_eq!(e.msg, "unsupported operand type(s) for -: 'str' and 'int'");
        let e = binop(
            Op::Add,
            &j(serde_json::json!(1)),
            &j(serde_json::json!("x")),
            true,
        )
        .unwrap_err();
        assert_eq!(e.msg, "unsupported operand type(s) for +=: 'int' and 'str'");
        let v = binop(
            Op::Mul,
            &j(serde_json::json!(3)),
            &j(serde_json::json!("ab")),
            false,
        )
        .unwrap();
        assert_eq!(v.as_str(), Some("ababab"));
    }

    #[test]
    fn round_is_half_even_on_binary_value() {
        assert_eq!(round_f64(2.675, 2), 2.67);
        assert_eq!(round_f64(0.125, 2), 0.12);
        assert_eq!(round_f64(0.375, 2), 0.38);
        assert!(round_f64(-0.001, 2).is_sign_negative());
    }
}
