//! The hand-written starting harness for Ecdysis.
//!
//! For now it is neutral: every hook returns its neutral answer, so an episode
//! run through it behaves exactly like the Direct baseline while exercising
//! every hook of the `ecdysis:harness` world. The human-augmented rules land
//! in their own modules, one rule per file, with the logic in plain Rust so it
//! can be unit-tested natively (`cargo test` in this crate).

#[cfg(target_arch = "wasm32")]
mod component;

/// Decides the episode's step budget warning threshold: a quarter of the steps.
/// Plain Rust, so native unit tests cover it without a wasm runtime.
pub fn low_budget(steps_left: u32, max_steps: u32) -> bool {
    max_steps > 0 && steps_left.saturating_mul(4) <= max_steps
}

#[cfg(test)]
mod tests {
    use super::low_budget;

    #[test]
    fn low_budget_is_the_last_quarter() {
        assert!(!low_budget(100, 200));
        assert!(!low_budget(51, 200));
        assert!(low_budget(50, 200));
        assert!(low_budget(0, 200));
        assert!(!low_budget(0, 0));
    }
}
