//! `calculate`'s evaluator: CPython's numeric semantics for the values
//! this alphabet can produce (int, float, complex, the empty tuple,
//! Ellipsis), with every big-integer step charged to the call's [`Meter`].

use num_bigint::BigInt;
use num_traits::{Signed, ToPrimitive, Zero};

use super::super::bigint::{self, true_div};
use super::super::repr::float_repr;
use super::super::{PyErr, PyResult};
use super::budget::{self, MAX_INT_BITS, Meter};
use super::floats::{complex_div, complex_pow, float_floordiv, float_pow};
use super::parse::{Arg, Expr, INT_MAX_STR_DIGITS, grow};

/// A Python value.
#[derive(Clone, Debug)]
pub(super) enum V {
    Int(BigInt),
    Float(f64),
    Complex(f64, f64),
    Tuple,
    Ellipsis,
}

impl V {
    fn type_name(&self) -> &'static str {
        match self {
            V::Int(_) => "int",
            V::Float(_) => "float",
            V::Complex(..) => "complex",
            V::Tuple => "tuple",
            V::Ellipsis => "ellipsis",
        }
    }

    /// `str(v)`; an int of more than 4300 digits raises `ValueError`
    /// (`sys.int_info.default_max_str_digits`), without being converted.
    fn to_str(&self, m: &mut Meter) -> PyResult<String> {
        Ok(match self {
            V::Int(i) => {
                // 10**4300 has 14,285 bits: anything longer has more digits.
                let too_long = i.bits() > 14_285 || {
                    m.charge(budget::decimal_cost(i.bits() / 3))?;
                    let s = bigint::to_decimal(&i.abs());
                    s.len() > INT_MAX_STR_DIGITS
                };
                if too_long {
                    return Err(PyErr::value(format!(
                        "Exceeds the limit ({INT_MAX_STR_DIGITS} digits) for integer string \
                         conversion; use sys.set_int_max_str_digits() to increase the limit"
                    )));
                }
                bigint::to_decimal(i)
            }
            V::Float(f) => float_repr(*f),
            V::Complex(re, im) => complex_repr(*re, *im),
            V::Tuple => "()".into(),
            V::Ellipsis => "Ellipsis".into(),
        })
    }
}

fn complex_repr(re: f64, im: f64) -> String {
    let fmt = |x: f64| {
        let s = float_repr(x);
        s.strip_suffix(".0").map(str::to_string).unwrap_or(s)
    };
    if re == 0.0 && re.is_sign_positive() {
        format!("{}j", fmt(im))
    } else {
        let sign = if im.is_sign_negative() || im.is_nan() && im.is_sign_negative() {
            ""
        } else {
            "+"
        };
        format!("({}{sign}{}j)", fmt(re), fmt(im))
    }
}

fn unsupported(op: &str, a: &V, b: &V) -> PyErr {
    let op = if op == "**" { "** or pow()" } else { op };
    PyErr::type_error(format!(
        "unsupported operand type(s) for {op}: '{}' and '{}'",
        a.type_name(),
        b.type_name()
    ))
}

/// `float(int)`: `OverflowError` past the float range.
pub(super) fn int_to_f64(i: &BigInt, m: &mut Meter) -> PyResult<f64> {
    m.charge(budget::linear(budget::limbs(i)))?;
    bigint::to_f64(i)
        .map_err(|_| PyErr::other("OverflowError", "int too large to convert to float"))
}

/// Evaluates `e` the way CPython's bytecode does: operands left to right,
/// each operator once both its operands are values.
pub(super) fn eval(e: &Expr, m: &mut Meter) -> PyResult<V> {
    match e {
        Expr::Int(digits) => {
            m.charge(budget::decimal_cost(digits.len() as u64))?;
            Ok(V::Int(bigint::from_decimal(digits)))
        }
        Expr::Float(f) => Ok(V::Float(*f)),
        Expr::Ellipsis => Ok(V::Ellipsis),
        Expr::EmptyTuple => Ok(V::Tuple),
        Expr::Chain(first, rest) => {
            let mut acc = grow(|| eval(first, m))?;
            for (op, e) in rest {
                let b = grow(|| eval(e, m))?;
                acc = binop(op, acc, b, m)?;
            }
            Ok(acc)
        }
        Expr::Power(segments) => {
            // `-a ** -b` loads a, then b, then negates b, raises, negates.
            let mut values = Vec::with_capacity(segments.len());
            for (_, p) in segments {
                values.push(grow(|| eval(p, m))?);
            }
            let mut acc: Option<V> = None;
            for ((unary, _), v) in segments.iter().zip(values).rev() {
                let mut v = match acc {
                    None => v,
                    Some(exponent) => binop("**", v, exponent, m)?,
                };
                for op in unary.iter().rev() {
                    v = unary_op(op, v, m)?;
                }
                acc = Some(v);
            }
            acc.ok_or_else(|| PyErr::internal("empty power chain"))
        }
        Expr::Calls(callee, calls) => {
            let f = grow(|| eval(callee, m))?;
            // Nothing in the alphabet is callable: the first call raises.
            match calls.first() {
                Some(arg) => Err(call_error(&f, arg.as_ref(), m)),
                None => Ok(f),
            }
        }
    }
}

/// The exception calling `f` with `arg` raises.
fn call_error(f: &V, arg: Option<&Arg>, m: &mut Meter) -> PyErr {
    let described = |what: &str, v: &V, m: &mut Meter| match f.to_str(m) {
        Ok(name) => PyErr::type_error(format!(
            "{name} argument after {what}, not {}",
            v.type_name()
        )),
        Err(e) => e,
    };
    match arg {
        None => {}
        Some(Arg::Pos(x)) => {
            if let Err(e) = grow(|| eval(x, m)) {
                return e;
            }
        }
        Some(Arg::Star(x)) => match grow(|| eval(x, m)) {
            Err(e) => return e,
            Ok(V::Tuple) => {}
            Ok(v) => return described("* must be an iterable", &v, m),
        },
        Some(Arg::DoubleStar(x)) => {
            return match grow(|| eval(x, m)) {
                Err(e) => e,
                Ok(v) => described("** must be a mapping", &v, m),
            };
        }
    }
    PyErr::type_error(format!("'{}' object is not callable", f.type_name()))
}

/// `+v` or `-v`.
fn unary_op(op: &str, v: V, m: &mut Meter) -> PyResult<V> {
    match (v, op) {
        (V::Int(i), "-") => {
            m.charge(budget::linear(budget::limbs(&i)))?;
            Ok(V::Int(-i))
        }
        (V::Float(f), "-") => Ok(V::Float(-f)),
        (V::Complex(re, im), "-") => Ok(V::Complex(-re, -im)),
        (v @ (V::Int(_) | V::Float(_) | V::Complex(..)), _) => Ok(v),
        (v, op) => Err(PyErr::type_error(format!(
            "bad operand type for unary {op}: '{}'",
            v.type_name()
        ))),
    }
}

/// `a op b` for a binary operator of the alphabet.
fn binop(op: &str, a: V, b: V, m: &mut Meter) -> PyResult<V> {
    use V::*;
    match (&a, &b) {
        (Int(x), Int(y)) => int_binop(op, x, y, m),
        _ => float_binop(op, a, b, m),
    }
}

/// `int op int`, exact, every step charged to the meter before it runs.
fn int_binop(op: &str, x: &BigInt, y: &BigInt, m: &mut Meter) -> PyResult<V> {
    use V::*;
    let (lx, ly) = (budget::limbs(x), budget::limbs(y));
    match op {
        "+" | "-" => {
            m.charge(budget::linear(lx.max(ly)))?;
            Ok(Int(if op == "+" { x + y } else { x - y }))
        }
        "*" => {
            if x.bits() + y.bits() > MAX_INT_BITS {
                return Err(PyErr::internal(budget::TOO_LARGE));
            }
            m.charge(budget::mul_cost(lx, ly))?;
            Ok(Int(x * y))
        }
        "/" => {
            if y.is_zero() {
                return Err(PyErr::other("ZeroDivisionError", "division by zero"));
            }
            m.charge(budget::linear(lx) + budget::div_cost(ly + 1, ly))?;
            true_div(x, y).map(Float).map_err(|_| {
                PyErr::other(
                    "OverflowError",
                    "integer division result too large for a float",
                )
            })
        }
        "//" => {
            m.charge(budget::div_cost(lx, ly))?;
            bigint::floor_div(x, y).map(Int).ok_or_else(|| {
                PyErr::other("ZeroDivisionError", "integer division or modulo by zero")
            })
        }
        _ => {
            if y.is_negative() {
                float_pow(int_to_f64(x, m)?, int_to_f64(y, m)?)
            } else {
                let charge = |a: u64, b: u64| m.charge(budget::mul_cost(a / 64 + 1, b / 64 + 1));
                bigint::pow(x, y, MAX_INT_BITS, charge)?
                    .map(Int)
                    .ok_or_else(|| PyErr::internal(budget::TOO_LARGE))
            }
        }
    }
}

/// `a op b` when not both are ints: floats, complex numbers, tuples...
fn float_binop(op: &str, a: V, b: V, m: &mut Meter) -> PyResult<V> {
    use V::*;
    match (&a, &b) {
        (Int(_) | Float(_), Int(_) | Float(_)) => {
            let x = as_f64(&a, m)?;
            let y = as_f64(&b, m)?;
            match op {
                "+" => Ok(Float(x + y)),
                "-" => Ok(Float(x - y)),
                "*" => Ok(Float(x * y)),
                "/" => {
                    if y == 0.0 {
                        Err(PyErr::other("ZeroDivisionError", "float division by zero"))
                    } else {
                        Ok(Float(x / y))
                    }
                }
                "//" => float_floordiv(x, y).map(Float),
                _ => float_pow(x, y),
            }
        }
        (Int(_) | Float(_) | Complex(..), Int(_) | Float(_) | Complex(..)) => {
            let (ar, ai) = as_complex(&a, m)?;
            let (br, bi) = as_complex(&b, m)?;
            match op {
                "+" => Ok(Complex(ar + br, ai + bi)),
                "-" => Ok(Complex(ar - br, ai - bi)),
                "*" => Ok(Complex(ar * br - ai * bi, ar * bi + ai * br)),
                "/" => complex_div(ar, ai, br, bi),
                "**" => complex_pow(ar, ai, br, bi),
                _ => Err(unsupported(op, &a, &b)),
            }
        }
        (Tuple, Tuple) if op == "+" => Ok(Tuple),
        // Repeating a sequence takes a Py_ssize_t count.
        (Tuple, Int(n)) | (Int(n), Tuple) if op == "*" => match n.to_i64() {
            Some(_) => Ok(Tuple),
            None => Err(PyErr::other(
                "OverflowError",
                "cannot fit 'int' into an index-sized integer",
            )),
        },
        (Tuple, _) | (_, Tuple)
            if op == "*"
                && matches!(
                    (&a, &b),
                    (Tuple, Float(_) | Complex(..) | Ellipsis | Tuple)
                        | (Float(_) | Complex(..) | Ellipsis, Tuple)
                ) =>
        {
            let other = if matches!(a, Tuple) { &b } else { &a };
            if matches!(other, Tuple) {
                return Err(unsupported(op, &a, &b));
            }
            Err(PyErr::type_error(format!(
                "can't multiply sequence by non-int of type '{}'",
                other.type_name()
            )))
        }
        (Tuple, _) if op == "+" => Err(PyErr::type_error(format!(
            "can only concatenate tuple (not \"{}\") to tuple",
            b.type_name()
        ))),
        _ => Err(unsupported(op, &a, &b)),
    }
}

fn as_f64(v: &V, m: &mut Meter) -> PyResult<f64> {
    match v {
        V::Int(i) => int_to_f64(i, m),
        V::Float(f) => Ok(*f),
        _ => Err(PyErr::internal("not a real number")),
    }
}

fn as_complex(v: &V, m: &mut Meter) -> PyResult<(f64, f64)> {
    match v {
        V::Complex(re, im) => Ok((*re, *im)),
        other => Ok((as_f64(other, m)?, 0.0)),
    }
}

/// `float(v)`, the tool's final conversion.
pub(super) fn to_float(v: &V, m: &mut Meter) -> PyResult<f64> {
    match v {
        V::Int(i) => int_to_f64(i, m),
        V::Float(f) => Ok(*f),
        other => Err(PyErr::type_error(format!(
            "float() argument must be a string or a real number, not '{}'",
            other.type_name()
        ))),
    }
}
