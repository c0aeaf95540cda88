//! A small arbitrary-precision integer for `calculate`: Python evaluates
//! `2**100 // 3` exactly before converting to float, so the emulation must
//! too. Only what the expression evaluator needs: + - * // ** and exact,
//! correctly rounded conversion to float (CPython's `PyLong_AsDouble` and
//! `long_true_divide`).

use std::cmp::Ordering;

/// Sign-magnitude integer with little-endian base-2^32 limbs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BigInt {
    neg: bool,
    mag: Vec<u32>,
}

fn trim(v: &mut Vec<u32>) {
    while v.last() == Some(&0) {
        v.pop();
    }
}

fn cmp_mag(a: &[u32], b: &[u32]) -> Ordering {
    a.len()
        .cmp(&b.len())
        .then_with(|| a.iter().rev().cmp(b.iter().rev()))
}

fn add_mag(a: &[u32], b: &[u32]) -> Vec<u32> {
    let mut out = Vec::with_capacity(a.len().max(b.len()) + 1);
    let mut carry = 0u64;
    for i in 0..a.len().max(b.len()) {
        let s = u64::from(*a.get(i).unwrap_or(&0)) + u64::from(*b.get(i).unwrap_or(&0)) + carry;
        out.push(s as u32);
        carry = s >> 32;
    }
    if carry > 0 {
        out.push(carry as u32);
    }
    out
}

/// `a - b` for `|a| >= |b|`.
fn sub_mag(a: &[u32], b: &[u32]) -> Vec<u32> {
    let mut out = Vec::with_capacity(a.len());
    let mut borrow = 0i64;
    for (i, &x) in a.iter().enumerate() {
        let mut d = i64::from(x) - i64::from(*b.get(i).unwrap_or(&0)) - borrow;
        borrow = 0;
        if d < 0 {
            d += 1 << 32;
            borrow = 1;
        }
        out.push(d as u32);
    }
    trim(&mut out);
    out
}

fn mul_mag(a: &[u32], b: &[u32]) -> Vec<u32> {
    if a.is_empty() || b.is_empty() {
        return Vec::new();
    }
    let mut out = vec![0u32; a.len() + b.len()];
    for (i, &x) in a.iter().enumerate() {
        let mut carry = 0u64;
        for (j, &y) in b.iter().enumerate() {
            let t = u64::from(x) * u64::from(y) + u64::from(out[i + j]) + carry;
            out[i + j] = t as u32;
            carry = t >> 32;
        }
        let mut k = i + b.len();
        while carry > 0 {
            let t = u64::from(out[k]) + carry;
            out[k] = t as u32;
            carry = t >> 32;
            k += 1;
        }
    }
    trim(&mut out);
    out
}

fn bit_len_mag(a: &[u32]) -> u64 {
    match a.last() {
        None => 0,
        Some(&top) => (a.len() as u64 - 1) * 32 + u64::from(32 - top.leading_zeros()),
    }
}

fn shl_mag(a: &[u32], n: u64) -> Vec<u32> {
    if a.is_empty() {
        return Vec::new();
    }
    let (limbs, bits) = ((n / 32) as usize, (n % 32) as u32);
    let mut out = vec![0u32; limbs];
    let mut carry = 0u32;
    for &x in a {
        if bits == 0 {
            out.push(x);
        } else {
            out.push((x << bits) | carry);
            carry = x >> (32 - bits);
        }
    }
    if carry > 0 {
        out.push(carry);
    }
    out
}

/// `a >> n` and whether any 1 bit was shifted out.
fn shr_mag(a: &[u32], n: u64) -> (Vec<u32>, bool) {
    let (limbs, bits) = ((n / 32) as usize, (n % 32) as u32);
    if limbs >= a.len() {
        return (Vec::new(), a.iter().any(|&x| x != 0));
    }
    let mut lost = a[..limbs].iter().any(|&x| x != 0);
    let rest = &a[limbs..];
    let mut out = Vec::with_capacity(rest.len());
    if bits == 0 {
        out.extend_from_slice(rest);
    } else {
        lost |= rest[0] & ((1u32 << bits) - 1) != 0;
        for i in 0..rest.len() {
            let hi = rest.get(i + 1).map_or(0, |&x| x << (32 - bits));
            out.push((rest[i] >> bits) | hi);
        }
    }
    trim(&mut out);
    (out, lost)
}

/// Schoolbook long division of magnitudes (bitwise; operands here are
/// small enough that simplicity wins).
fn divmod_mag(a: &[u32], b: &[u32]) -> (Vec<u32>, Vec<u32>) {
    if cmp_mag(a, b) == Ordering::Less {
        return (Vec::new(), a.to_vec());
    }
    if b.len() == 1 {
        let d = u64::from(b[0]);
        let mut q = vec![0u32; a.len()];
        let mut r = 0u64;
        for i in (0..a.len()).rev() {
            let cur = (r << 32) | u64::from(a[i]);
            q[i] = (cur / d) as u32;
            r = cur % d;
        }
        trim(&mut q);
        let mut rv = vec![r as u32];
        trim(&mut rv);
        return (q, rv);
    }
    let n = bit_len_mag(a);
    let mut q = vec![0u32; a.len()];
    let mut r: Vec<u32> = Vec::new();
    for i in (0..n).rev() {
        r = shl_mag(&r, 1);
        if a[(i / 32) as usize] >> (i % 32) & 1 == 1 {
            if r.is_empty() {
                r.push(1);
            } else {
                r[0] |= 1;
            }
        }
        if cmp_mag(&r, b) != Ordering::Less {
            r = sub_mag(&r, b);
            q[(i / 32) as usize] |= 1 << (i % 32);
        }
    }
    trim(&mut q);
    (q, r)
}

/// Why a conversion to float failed.
#[derive(Debug, PartialEq, Eq)]
pub struct FloatOverflow;

impl BigInt {
    /// From a machine integer.
    pub fn from_i128(v: i128) -> Self {
        let mut m = v.unsigned_abs();
        let mut mag = Vec::new();
        while m > 0 {
            mag.push(m as u32);
            m >>= 32;
        }
        Self { neg: v < 0, mag }
    }

    /// From ASCII decimal digits.
    pub fn from_decimal(s: &str) -> Self {
        let mut mag: Vec<u32> = Vec::new();
        for b in s.bytes().filter(u8::is_ascii_digit) {
            let mut carry = u64::from(b - b'0');
            for limb in mag.iter_mut() {
                let t = u64::from(*limb) * 10 + carry;
                *limb = t as u32;
                carry = t >> 32;
            }
            if carry > 0 {
                mag.push(carry as u32);
            }
        }
        trim(&mut mag);
        Self { neg: false, mag }
    }

    /// Whether the value is 0.
    pub fn is_zero(&self) -> bool {
        self.mag.is_empty()
    }

    /// Whether the value is < 0.
    pub fn is_negative(&self) -> bool {
        self.neg && !self.mag.is_empty()
    }

    /// Number of bits of `|self|`.
    pub fn bit_len(&self) -> u64 {
        bit_len_mag(&self.mag)
    }

    fn make(neg: bool, mut mag: Vec<u32>) -> Self {
        trim(&mut mag);
        let neg = neg && !mag.is_empty();
        Self { neg, mag }
    }

    /// `-self`.
    pub fn neg(&self) -> Self {
        Self::make(!self.neg, self.mag.clone())
    }

    /// `self + o`.
    pub fn add(&self, o: &Self) -> Self {
        if self.neg == o.neg {
            return Self::make(self.neg, add_mag(&self.mag, &o.mag));
        }
        match cmp_mag(&self.mag, &o.mag) {
            Ordering::Less => Self::make(o.neg, sub_mag(&o.mag, &self.mag)),
            _ => Self::make(self.neg, sub_mag(&self.mag, &o.mag)),
        }
    }

    /// `self - o`.
    pub fn sub(&self, o: &Self) -> Self {
        self.add(&o.neg())
    }

    /// `self * o`.
    pub fn mul(&self, o: &Self) -> Self {
        Self::make(self.neg != o.neg, mul_mag(&self.mag, &o.mag))
    }

    /// `self // o` (floor division); `None` when `o == 0`.
    pub fn floor_div(&self, o: &Self) -> Option<Self> {
        if o.is_zero() {
            return None;
        }
        let (q, r) = divmod_mag(&self.mag, &o.mag);
        let q = Self::make(self.neg != o.neg, q);
        if self.neg != o.neg && !r.is_empty() {
            return Some(q.sub(&Self::from_i128(1)));
        }
        Some(q)
    }

    /// `self ** e` for `e >= 0`; `None` when the result would exceed
    /// `max_bits` (Python would compute it, slowly; the emulation refuses).
    pub fn pow(&self, e: &Self, max_bits: u64) -> Option<Self> {
        if e.is_zero() {
            return Some(Self::from_i128(1));
        }
        if self.is_zero() || self.mag == [1] {
            let odd = e.mag[0] & 1 == 1;
            return Some(Self::make(self.neg && odd, self.mag.clone()));
        }
        if e.mag.len() > 1
            || u64::from(e.mag[0]).saturating_mul(self.bit_len().saturating_sub(1)) > max_bits
        {
            return None;
        }
        let mut exp = e.mag[0];
        let mut base = self.clone();
        let mut acc = Self::from_i128(1);
        while exp > 0 {
            if exp & 1 == 1 {
                acc = acc.mul(&base);
            }
            exp >>= 1;
            if exp > 0 {
                base = base.mul(&base);
            }
        }
        Some(acc)
    }

    /// Decimal text (`str(int)`).
    pub fn to_decimal(&self) -> String {
        if self.is_zero() {
            return "0".into();
        }
        let mut mag = self.mag.clone();
        let mut chunks = Vec::new();
        while !mag.is_empty() {
            let (q, r) = divmod_mag(&mag, &[1_000_000_000]);
            chunks.push(r.first().copied().unwrap_or(0));
            mag = q;
        }
        let mut s = String::from(if self.neg { "-" } else { "" });
        s.push_str(&chunks.last().copied().unwrap_or(0).to_string());
        for c in chunks.iter().rev().skip(1) {
            s.push_str(&format!("{c:09}"));
        }
        s
    }

    /// `float(self)`, correctly rounded (ties to even).
    pub fn to_f64(&self) -> Result<f64, FloatOverflow> {
        true_div(self, &Self::from_i128(1))
    }
}

/// CPython's `long_true_divide`: `a / b` correctly rounded. `b != 0`.
pub fn true_div(a: &BigInt, b: &BigInt) -> Result<f64, FloatOverflow> {
    const MANT: i64 = 53;
    const MIN_EXP: i64 = -1021;
    const MAX_EXP: i64 = 1024;
    let negate = a.neg != b.neg;
    let signed = |x: f64| if negate { -x } else { x };
    if a.is_zero() {
        return Ok(signed(0.0));
    }
    let diff = a.bit_len() as i64 - b.bit_len() as i64;
    if diff > MAX_EXP {
        return Err(FloatOverflow);
    }
    if diff < MIN_EXP - MANT - 1 {
        return Ok(signed(0.0));
    }
    let shift = diff.max(MIN_EXP) - MANT - 2;
    let (x, mut inexact) = if shift <= 0 {
        (shl_mag(&a.mag, (-shift) as u64), false)
    } else {
        shr_mag(&a.mag, shift as u64)
    };
    let (q, r) = divmod_mag(&x, &b.mag);
    inexact |= !r.is_empty();
    let x_bits = bit_len_mag(&q) as i64;
    let mut low: u128 = q
        .iter()
        .rev()
        .fold(0u128, |acc, &d| (acc << 32) | u128::from(d));
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

    #[test]
    fn arithmetic_and_conversion() {
        let a = BigInt::from_decimal("99999999999999999999");
        assert_eq!(
            a.mul(&a).to_decimal(),
            "9999999999999999999800000000000000000001"
        );
        assert_eq!(a.mul(&a).to_f64(), Ok(1e40));
        assert_eq!(
            BigInt::from_i128(-7).floor_div(&BigInt::from_i128(2)),
            Some(BigInt::from_i128(-4))
        );
        let big = BigInt::from_i128(2)
            .pow(&BigInt::from_i128(1100), 1 << 20)
            .unwrap();
        let small = BigInt::from_i128(2)
            .pow(&BigInt::from_i128(1000), 1 << 20)
            .unwrap();
        assert_eq!(true_div(&big, &small), Ok(1.2676506002282294e30));
        assert_eq!(
            true_div(&BigInt::from_i128(1), &BigInt::from_i128(3)),
            Ok(1.0 / 3.0)
        );
        assert_eq!(
            BigInt::from_i128(2)
                .pow(&BigInt::from_i128(1024), 1 << 20)
                .unwrap()
                .to_f64(),
            Err(FloatOverflow)
        );
        let n = BigInt::from_i128((1 << 53) + 1);
        assert_eq!(n.to_f64(), Ok(9007199254740992.0));
    }
}
