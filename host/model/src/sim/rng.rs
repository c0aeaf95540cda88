//! Deterministic rolls: every random decision of a simulated agent is a
//! pure function of (seed, task id, decision tag, plan step).

use ecdysis_sys::rng::mix as splitmix64;

/// Keyed by blake3 of (seed, task id). Rolls do not depend on the profile,
/// so two profiles run with the same seed share their randomness (a quirk
/// at rate 0.3 fires wherever the same quirk at rate 0.6 would).
#[derive(Debug, Clone)]
pub(crate) struct Rolls {
    key: [u8; 32],
}

impl Rolls {
    pub(crate) fn new(seed: u64, task_id: &str) -> Self {
        let mut hasher = blake3::Hasher::new();
        hasher.update(b"ecdysis-sim-agent/v1\0");
        hasher.update(&seed.to_le_bytes());
        hasher.update(task_id.as_bytes());
        Self {
            key: *hasher.finalize().as_bytes(),
        }
    }

    fn raw(&self, tag: &str, step: usize) -> u64 {
        let mut hasher = blake3::Hasher::new_keyed(&self.key);
        hasher.update(tag.as_bytes());
        hasher.update(&[0]);
        hasher.update(&(step as u64).to_le_bytes());
        let bytes = hasher.finalize();
        let mut word = [0u8; 8];
        word.copy_from_slice(&bytes.as_bytes()[..8]);
        splitmix64(u64::from_le_bytes(word))
    }

    /// Uniform in [0, 1).
    pub(crate) fn unit(&self, tag: &str, step: usize) -> f64 {
        (self.raw(tag, step) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// True with probability `p` (never at 0, always at 1).
    pub(crate) fn chance(&self, tag: &str, step: usize, p: f64) -> bool {
        p > 0.0 && self.unit(tag, step) < p
    }

    /// Uniform in 0..n (0 when n is 0).
    pub(crate) fn pick(&self, tag: &str, step: usize, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.raw(tag, step) % n as u64) as usize
        }
    }
}

/// A per-episode seed from a run seed, a task id and a trial number, for
/// runners that want distinct but reproducible episodes.
pub fn episode_seed(run_seed: u64, task_id: &str, trial: u32) -> u64 {
    let mut hasher = blake3::Hasher::new();
    hasher.update(b"ecdysis-sim-episode/v1\0");
    hasher.update(&run_seed.to_le_bytes());
    hasher.update(task_id.as_bytes());
    hasher.update(&[0]);
    hasher.update(&trial.to_le_bytes());
    let mut word = [0u8; 8];
    word.copy_from_slice(&hasher.finalize().as_bytes()[..8]);
    u64::from_le_bytes(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rolls_are_deterministic_and_spread() {
        let a = Rolls::new(7, "t1");
        let b = Rolls::new(7, "t1");
        let c = Rolls::new(8, "t1");
        assert_eq!(a.unit("x", 3), b.unit("x", 3));
        assert_ne!(a.unit("x", 3), c.unit("x", 3));
        assert_ne!(a.unit("x", 3), a.unit("x", 4));
        let hits = (0..1000).filter(|i| a.chance("y", *i, 0.3)).count();
        assert!((200..400).contains(&hits), "{hits}");
        assert!((0..100).all(|i| a.chance("z", i, 1.0)));
        assert!((0..100).all(|i| !a.chance("z", i, 0.0)));
        assert_ne!(episode_seed(1, "t", 0), episode_seed(1, "t", 1));
    }
}
