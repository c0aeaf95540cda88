//! Python `int` arithmetic for `calculate`, on [`num_bigint::BigInt`].
//!
//! Python evaluates `2**100 // 3` exactly before converting to float, so
//! the emulation must too. num-bigint supplies the integers (with
//! Karatsuba/Toom-3 multiplication, Burnikel–Ziegler division and
//! divide-and-conquer radix conversion); this module adds only what is
//! Python's own: floor division, `int / int` correctly rounded the way
//! CPython's `long_true_divide` does it, and `float(int)`'s overflow rule.

use num_bigint::{BigInt, Sign};
use num_integer::Integer;
use num_traits::{One, Signed, ToPrimitive, Zero};

/// Why a conversion to float failed (Python raises `OverflowError`).
#[derive(Debug, PartialEq, Eq)]
pub struct FloatOverflow;

/// An int from ASCII decimal digits (the tokenizer guarantees them).
pub fn from_decimal(digits: &str) -> BigInt {
    BigInt::parse_bytes(digits.as_bytes(), 10).unwrap_or_default()
}

/// `str(i)`.
pub fn to_decimal(i: &BigInt) -> String {
    i.to_str_radix(10)
}

/// `a // b` (floor division); `None` when `b == 0`.
pub fn floor_div(a: &BigInt, b: &BigInt) -> Option<BigInt> {
    if b.is_zero() {
        return None;
    }
    Some(a.div_floor(b))
}

/// `base ** exp` for `exp >= 0`; `None` when the result would exceed
/// `max_bits` (Python would compute it, slowly; the emulation refuses).
pub fn pow(base: &BigInt, exp: &BigInt, max_bits: u64) -> Option<BigInt> {
    if exp.is_zero() {
        return Some(BigInt::one());
    }
    let odd = exp.is_odd();
    if base.is_zero() || base.magnitude().is_one() {
        let negative = base.is_negative() && odd;
        return Some(if negative { -BigInt::one() } else { base.abs() });
    }
    let e = exp.to_u32()?;
    if u64::from(e).saturating_mul(base.bits().saturating_sub(1)) > max_bits {
        return None;
    }
    Some(base.pow(e))
}

/// `float(i)`, correctly rounded (ties to even), like `PyLong_AsDouble`.
pub fn to_f64(i: &BigInt) -> Result<f64, FloatOverflow> {
    // num-bigint rounds the top bits to odd before the final rounding to
    // nearest-even, which is correct rounding; a value that rounds to
    // 2**1024 or beyond comes back infinite, where CPython raises.
    match i.to_f64() {
        Some(f) if f.is_finite() => Ok(f),
        _ => Err(FloatOverflow),
    }
}

/// CPython's `long_true_divide`: `a / b` correctly rounded. `b != 0`.
pub fn true_div(a: &BigInt, b: &BigInt) -> Result<f64, FloatOverflow> {
    const MANT: i64 = 53;
    const MIN_EXP: i64 = -1021;
    const MAX_EXP: i64 = 1024;
    let negate = (a.sign() == Sign::Minus) != (b.sign() == Sign::Minus);
    let signed = |x: f64| if negate { -x } else { x };
    if a.is_zero() {
        return Ok(signed(0.0));
    }
    let diff = a.bits() as i64 - b.bits() as i64;
    if diff > MAX_EXP {
        return Err(FloatOverflow);
    }
    if diff < MIN_EXP - MANT - 1 {
        return Ok(signed(0.0));
    }
    // Shift `|a|` so that the quotient has MANT + 2 or MANT + 3 bits (fewer
    // for a subnormal result), remembering whether bits were dropped.
    let shift = diff.max(MIN_EXP) - MANT - 2;
    let (x, mut inexact) = if shift <= 0 {
        (a.magnitude() << (-shift) as u64, false)
    } else {
        let lost = a.magnitude().trailing_zeros().unwrap_or(0) < shift as u64;
        (a.magnitude() >> shift as u64, lost)
    };
    let (q, r) = x.div_rem(b.magnitude());
    inexact |= !r.is_zero();
    let x_bits = q.bits() as i64;
    let mut low: u128 = q.to_u128().unwrap_or(0);
    // Round the quotient to MANT bits (or fewer, subnormal), half to even,
    // the dropped bits and the remainder acting as sticky bits.
    let extra_bits = x_bits.max(MIN_EXP - shift) - MANT;
    let mask: u128 = 1 << (extra_bits - 1);
    if inexact {
        low |= 1;
    }
    if low & mask != 0 && low & (3 * mask - 1) != 0 {
        low += mask;
    }
    low &= !(2 * mask - 1);
    let dx = low as f64;
    if shift + x_bits >= MAX_EXP && (shift + x_bits > MAX_EXP || dx == 2f64.powi(x_bits as i32)) {
        return Err(FloatOverflow);
    }
    Ok(signed(ldexp(dx, shift)))
}

/// `dx * 2**e`, exact for the values `true_div` produces.
fn ldexp(mut dx: f64, mut e: i64) -> f64 {
    while e > 0 {
        let step = e.min(1000);
        dx *= 2f64.powi(step as i32);
        e -= step;
    }
    while e < 0 {
        let step = (-e).min(1000);
        dx /= 2f64.powi(step as i32);
        e += step;
    }
    dx
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(v: i128) -> BigInt {
        BigInt::from(v)
    }

    #[test]
    fn arithmetic_and_conversion() {
        let a = from_decimal("99999999999999999999");
        let sq = &a * &a;
        assert_eq!(to_decimal(&sq), "9999999999999999999800000000000000000001");
        assert_eq!(to_f64(&sq), Ok(1e40));
        assert_eq!(floor_div(&int(-7), &int(2)), Some(int(-4)));
        assert_eq!(floor_div(&int(7), &int(-2)), Some(int(-4)));
        assert_eq!(floor_div(&int(-6), &int(2)), Some(int(-3)));
        assert_eq!(floor_div(&int(1), &int(0)), None);
        let big = pow(&int(2), &int(1100), 1 << 20).unwrap();
        let small = pow(&int(2), &int(1000), 1 << 20).unwrap();
        assert_eq!(true_div(&big, &small), Ok(1.2676506002282294e30));
        assert_eq!(true_div(&int(1), &int(3)), Ok(1.0 / 3.0));
        assert_eq!(true_div(&int(0), &int(-3)), Ok(-0.0));
        assert!(true_div(&int(0), &int(-3)).unwrap().is_sign_negative());
        assert_eq!(
            to_f64(&pow(&int(2), &int(1024), 1 << 20).unwrap()),
            Err(FloatOverflow)
        );
        // 2**1024 - 2**970 rounds up to 2**1024: overflow, as in CPython.
        let edge =
            pow(&int(2), &int(1024), 1 << 20).unwrap() - pow(&int(2), &int(970), 1 << 20).unwrap();
        assert_eq!(to_f64(&edge), Err(FloatOverflow));
        let below =
            pow(&int(2), &int(1024), 1 << 20).unwrap() - pow(&int(2), &int(971), 1 << 20).unwrap();
        assert_eq!(to_f64(&below), Ok(f64::MAX));
        assert_eq!(to_f64(&int((1 << 53) + 1)), Ok(9007199254740992.0));
        assert_eq!(to_f64(&int((1 << 53) + 3)), Ok(9007199254740996.0));
        assert_eq!(to_f64(&int(-(1 << 53) - 1)), Ok(-9007199254740992.0));
    }

    #[test]
    fn powers_follow_python() {
        assert_eq!(pow(&int(-1), &int(3), 64), Some(int(-1)));
        assert_eq!(pow(&int(-1), &int(4), 64), Some(int(1)));
        assert_eq!(pow(&int(0), &int(0), 64), Some(int(1)));
        assert_eq!(pow(&int(0), &int(5), 64), Some(int(0)));
        assert_eq!(pow(&int(-3), &int(3), 64), Some(int(-27)));
        assert_eq!(pow(&int(2), &int(65), 64), None);
        assert_eq!(
            pow(&int(1), &from_decimal("99999999999999999999"), 64),
            Some(int(1))
        );
    }
}
