//! The hand-written ("human-augmented") starting harness for Ecdysis, for
//! the τ² airline and retail domains, organised by the four layers of the
//! `ecdysis:harness` world, one small rule per module file:
//!
//! - [`contract`]: interface rules in the system prompt, policy checks on
//!   the write tools' descriptions.
//! - [`skills`]: BM25 over the opening message → at most two procedures.
//! - [`realize`]: tool-name aliases, argument repairs (`#` of order ids,
//!   quoted numbers, double-encoded JSON), calls written as text rescued
//!   into structured calls, and policy gates before write tools that read
//!   the state through the env view.
//! - [`regulate`]: repeated identical failures, error streaks, stalls,
//!   step and error budgets.
//!
//! Every tunable text, threshold and list lives in [`tables`]. The rules are
//! plain Rust over the mirror types of [`types`] and the [`view::EnvView`]
//! trait, so `cargo test` runs them natively; `component.rs` is the thin
//! WIT glue compiled for `wasm32`.
//!
//! Inputs are only what the agent sees: the domain, the policy and tools,
//! the opening message, proposed calls, their results and read-only state.

pub mod contract;
pub mod episode;
pub mod realize;
pub mod regulate;
pub mod shell;
pub mod skills;
// Data tables keep their own layout (one entry per line where it fits), so
// programs can append entries textually.
#[rustfmt::skip]
pub mod tables;
pub mod text;
pub mod types;
pub mod view;

pub use episode::Harness;

#[cfg(target_arch = "wasm32")]
mod component;

/// A seeded xorshift generator for tests that draw many inputs.
#[cfg(test)]
pub(crate) fn seeded(mut seed: u64) -> impl FnMut() -> u64 {
    move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    }
}
