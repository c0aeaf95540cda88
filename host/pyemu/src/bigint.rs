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

/// `base ** exp` for `exp >= 0`, by binary exponentiation; `None` when the
/// result would exceed `max_bits` (Python would compute it, slowly; the
/// emulation refuses). `charge` gets the bit lengths of the operands of
/// every product before it is computed, and can stop with its error.
pub fn pow<E>(
    base: &BigInt,
    exp: &BigInt,
    max_bits: u64,
    mut charge: impl FnMut(u64, u64) -> Result<(), E>,
) -> Result<Option<BigInt>, E> {
    if exp.is_zero() {
        return Ok(Some(BigInt::one()));
    }
    let odd = exp.is_odd();
    if base.is_zero() || base.magnitude().is_one() {
        let negative = base.is_negative() && odd;
        return Ok(Some(if negative { -BigInt::one() } else { base.abs() }));
    }
    // The result has about exp * log2|base| bits (within one bit).
    let Some(mut e) = exp.to_u64() else {
        return Ok(None);
    };
    let shift = base.bits().saturating_sub(64);
    let top = (base.magnitude() >> shift)
        .to_f64()
        .unwrap_or(f64::INFINITY);
    if e as f64 * (top.log2() + shift as f64) > max_bits as f64 {
        return Ok(None);
    }
    let twos = base.magnitude().trailing_zeros().unwrap_or(0);
    if twos + 1 == base.bits() {
        // ±2**k: a shift (CPython is fast here too, so the emulation must be).
        charge(1, e * twos + 1)?;
        let magnitude = BigInt::one() << (e * twos);
        return Ok(Some(if base.is_negative() && odd {
            -magnitude
        } else {
            magnitude
        }));
    }
    let mut acc = BigInt::one();
    let mut square = base.clone();
    loop {
        if e & 1 == 1 {
            charge(acc.bits(), square.bits())?;
            acc *= &square;
        }
        e >>= 1;
        if e == 0 {
            return Ok(Some(acc));
        }
        charge(square.bits(), square.bits())?;
        square = &square * &square;
    }
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

    fn free(_: u64, _: u64) -> Result<(), ()> {
        Ok(())
    }

    fn p(base: i128, exp: i128) -> BigInt {
        pow(&int(base), &int(exp), 1 << 20, free).unwrap().unwrap()
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
        let big = p(2, 1100);
        let small = p(2, 1000);
        assert_eq!(true_div(&big, &small), Ok(1.2676506002282294e30));
        assert_eq!(true_div(&int(1), &int(3)), Ok(1.0 / 3.0));
        assert_eq!(true_div(&int(0), &int(-3)), Ok(-0.0));
        assert!(true_div(&int(0), &int(-3)).unwrap().is_sign_negative());
        assert_eq!(to_f64(&p(2, 1024)), Err(FloatOverflow));
        // 2**1024 - 2**970 rounds up to 2**1024: overflow, as in CPython.
        let edge = p(2, 1024) - p(2, 970);
        assert_eq!(to_f64(&edge), Err(FloatOverflow));
        let below = p(2, 1024) - p(2, 971);
        assert_eq!(to_f64(&below), Ok(f64::MAX));
        assert_eq!(to_f64(&int((1 << 53) + 1)), Ok(9007199254740992.0));
        assert_eq!(to_f64(&int((1 << 53) + 3)), Ok(9007199254740996.0));
        assert_eq!(to_f64(&int(-(1 << 53) - 1)), Ok(-9007199254740992.0));
    }

    #[test]
    fn powers_follow_python() {
        let pw = |b: &BigInt, e: &BigInt| pow(b, e, 64, free).unwrap();
        assert_eq!(pw(&int(-1), &int(3)), Some(int(-1)));
        assert_eq!(pw(&int(-1), &int(4)), Some(int(1)));
        assert_eq!(pw(&int(0), &int(0)), Some(int(1)));
        assert_eq!(pw(&int(0), &int(5)), Some(int(0)));
        assert_eq!(pw(&int(-3), &int(3)), Some(int(-27)));
        assert_eq!(pw(&int(-3), &int(40)), Some(int(12157665459056928801)));
        // Refused only when the result exceeds the limit by more than a bit.
        assert_eq!(pw(&int(2), &int(64)), Some(int(1 << 64)));
        assert_eq!(pw(&int(2), &int(65)), None);
        assert_eq!(pw(&int(3), &int(41)), None);
        let huge = from_decimal("99999999999999999999");
        assert_eq!(pw(&int(1), &huge), Some(int(1)));
        assert_eq!(pw(&int(-1), &huge), Some(int(-1)));
        assert_eq!(pw(&int(2), &huge), None);
        // The charge sees every product and can stop the computation.
        let mut products = 0;
        let counted = pow(&int(3), &int(13), 64, |_, _| {
            products += 1;
            if products > 3 { Err("stop") } else { Ok(()) }
        });
        assert_eq!(counted, Err("stop"));
        assert_eq!(products, 4);
    }
}
