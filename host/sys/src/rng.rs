//! SplitMix64: the crate's one small seeded generator. Every random choice
//! the host makes — bootstrap intervals, the paired gate's sign flips, the
//! random training-task draw, the simulated agents' rolls, the fuzz test's
//! cases — must be a pure function of an explicit seed, and none needs
//! cryptographic strength, so a few lines of a well-known mixer serve them
//! all without a dependency.

/// A SplitMix64 generator; its state is its seed.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`0` when `n` is 0), by Lemire's multiply-shift:
    /// no modulo bias worth naming (below 2^-32 for the sizes we draw from).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

/// The first output of a generator seeded with `x`: a one-shot mixer for
/// bits that were derived elsewhere (e.g. from a keyed hash).
pub fn mix(x: u64) -> u64 {
    SplitMix64::new(x).next_u64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_outputs_and_bounds() {
        // The reference sequence for seed 0 (Vigna's splitmix64.c).
        let mut g = SplitMix64::new(0);
        assert_eq!(g.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(g.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        assert_eq!(mix(0), 0xE220_A839_7B1D_CDAF);
        let mut g = SplitMix64::new(7);
        assert!((0..10_000).all(|_| g.below(13) < 13));
        assert_eq!(g.below(0), 0);
        // Same seed, same stream.
        let a: Vec<u64> = (0..5)
            .map({
                let mut g = SplitMix64::new(42);
                move |_| g.next_u64()
            })
            .collect();
        let b: Vec<u64> = (0..5)
            .map({
                let mut g = SplitMix64::new(42);
                move |_| g.next_u64()
            })
            .collect();
        assert_eq!(a, b);
    }
}
