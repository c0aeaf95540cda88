//! The work bound of one `calculate` call.
//!
//! CPython evaluates whatever `eval` accepts, however long it takes: a
//! product of hundreds of 4,000-digit literals, or `9**999999 //
//! 7**999999`, takes it seconds. The emulation runs inside the host (an env-view call
//! from a harness hook is a host call under the hook's deadline), so it
//! charges every step to a [`Meter`] and stops with an emulation-limit
//! error once the [`WORK_BUDGET`] is spent. Charges are made *before* the
//! work, so a call never does more than the budget plus one step.
//!
//! One unit is about one 64-bit limb multiply-add (its time in a
//! release build, for the inputs that spend the whole budget: `bench
//! --calc`). Tokens and parser steps are charged
//! 1–2 units although they cost more: parsing is linear in the input, so
//! the input's size bounds it, not the budget. The cost model follows the
//! algorithms num-bigint uses: schoolbook below 32 limbs, Karatsuba
//! (3 half-size products per halving) above — an over-estimate for the
//! Toom-3 sizes — and schoolbook or Burnikel–Ziegler division.

use num_bigint::BigInt;

use super::super::PyErr;

/// Units one call may spend: tens of milliseconds of work (`bench --calc`
/// times it; the docs' performance page has the numbers). Enough for any
/// expression a model writes and for ints of a few hundred thousand digits
/// (`3**(2**20)`); what it refuses takes CPython itself a noticeable time.
pub const WORK_BUDGET: u64 = 1 << 25;

/// Largest int (in bits) an operation may produce: 512 KiB of limbs.
pub const MAX_INT_BITS: u64 = 1 << 22;

/// Units charged for any big-integer operation, whatever its size (an
/// allocation and a few branches).
const OP_FLOOR: u64 = 8;

/// Operand size below which num-bigint multiplies by schoolbook.
const SCHOOLBOOK_LIMBS: u64 = 32;

/// Divisor size up to which num-bigint divides by schoolbook.
const SCHOOL_DIV_LIMBS: u64 = 64;

/// Measured cost of a Burnikel–Ziegler division whose quotient is a few
/// limbs (`int / int` shifts to exactly that shape), per dividend limb.
const SHORT_QUOTIENT_PER_LIMB: u64 = 100;

/// Message of the emulation-limit error a spent budget raises.
pub const TOO_EXPENSIVE: &str = "expression too expensive to emulate (work budget exhausted)";

/// Message of the emulation-limit error an oversized int raises.
pub const TOO_LARGE: &str = "integer too large to emulate";

/// Work spent so far by one call.
#[derive(Debug)]
pub struct Meter {
    spent: u64,
    budget: u64,
}

impl Default for Meter {
    fn default() -> Self {
        Self::new(WORK_BUDGET)
    }
}

impl Meter {
    /// A meter that allows `budget` units.
    pub fn new(budget: u64) -> Self {
        Self { spent: 0, budget }
    }

    /// Units spent so far.
    pub fn spent(&self) -> u64 {
        self.spent
    }

    /// Charges `units`, failing once the budget is exceeded.
    pub fn charge(&mut self, units: u64) -> Result<(), PyErr> {
        self.spent = self.spent.saturating_add(units);
        if self.spent > self.budget {
            Err(PyErr::internal(TOO_EXPENSIVE))
        } else {
            Ok(())
        }
    }
}

/// 64-bit limbs of `|i|` (at least 1).
pub fn limbs(i: &BigInt) -> u64 {
    i.bits() / 64 + 1
}

/// Cost of a `n`-limb product in the Karatsuba model: 3 products of half
/// the size per level down to the schoolbook size.
fn balanced(n: u64) -> u64 {
    if n <= SCHOOLBOOK_LIMBS {
        return n * n;
    }
    let levels = (n.div_ceil(SCHOOLBOOK_LIMBS))
        .next_power_of_two()
        .trailing_zeros();
    3u64.saturating_pow(levels)
        .saturating_mul(SCHOOLBOOK_LIMBS * SCHOOLBOOK_LIMBS)
}

/// Cost of multiplying an `a`-limb by a `b`-limb int: num-bigint splits
/// the longer operand into pieces of the shorter one's size.
pub fn mul_cost(a: u64, b: u64) -> u64 {
    let (short, long) = if a <= b { (a, b) } else { (b, a) };
    let cost = if short <= SCHOOLBOOK_LIMBS {
        short * long
    } else {
        long.div_ceil(short).saturating_mul(balanced(short))
    };
    cost.max(OP_FLOOR)
}

/// Cost of dividing an `a`-limb by a `b`-limb int.
pub fn div_cost(a: u64, b: u64) -> u64 {
    if a < b {
        return OP_FLOOR.max(a);
    }
    let quotient = a - b + 1;
    let cost = if b <= SCHOOL_DIV_LIMBS {
        quotient * b + a
    } else if quotient <= 2 {
        SHORT_QUOTIENT_PER_LIMB * a
    } else {
        // Burnikel–Ziegler: about two products of quotient × divisor size.
        mul_cost(quotient, b)
            .saturating_mul(2)
            .saturating_add(SHORT_QUOTIENT_PER_LIMB * a)
    };
    cost.max(OP_FLOOR)
}

/// Cost of a linear pass over `n` limbs (add, negate, shift, compare).
pub fn linear(n: u64) -> u64 {
    n.max(OP_FLOOR)
}

/// Cost of converting `digits` decimal digits to an int or back
/// (num-bigint's schoolbook radix conversion at these sizes).
pub fn decimal_cost(digits: u64) -> u64 {
    let limbs = digits / 19 + 1;
    (limbs * limbs).max(OP_FLOOR)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meter_refuses_past_the_budget() {
        let mut m = Meter::new(100);
        assert!(m.charge(60).is_ok());
        assert!(m.charge(40).is_ok());
        let err = m.charge(1).unwrap_err();
        assert_eq!(err.msg, TOO_EXPENSIVE);
        assert_eq!(m.spent(), 101);
    }

    #[test]
    fn cost_model_grows_like_the_algorithms() {
        assert_eq!(mul_cost(1, 1), OP_FLOOR);
        assert_eq!(mul_cost(32, 32), 1024);
        // Karatsuba: doubling the size triples the cost.
        assert_eq!(balanced(64), 3 * 1024);
        assert_eq!(balanced(128), 9 * 1024);
        // An unbalanced product is as many balanced ones as fit.
        assert_eq!(mul_cost(64, 640), 10 * balanced(64));
        assert_eq!(mul_cost(640, 64), mul_cost(64, 640));
        // A 2**22-bit square stays far above the budget, a 2**19-bit one
        // well below.
        assert!(mul_cost(1 << 16, 1 << 16) > WORK_BUDGET);
        assert!(mul_cost(1 << 13, 1 << 13) < WORK_BUDGET / 4);
        assert_eq!(div_cost(10, 3), 8 * 3 + 10);
        assert_eq!(div_cost(3, 10), OP_FLOOR);
        assert_eq!(div_cost(1000, 999), 100 * 1000);
    }
}
