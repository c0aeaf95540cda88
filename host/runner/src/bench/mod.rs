//! `ecdysis-host bench`: what the host costs, always next to a baseline
//! measured in the same run (machines here are noisy, so only side-by-side
//! ratios mean anything).
//!
//! - [`sandbox`]: per-hook call time, episode instantiation (pooled and
//!   on-demand), compile vs precompiled load, against native baselines;
//! - [`coder`]: how often coder replies become a candidate that builds,
//!   replayed from recorded replies;
//! - [`runner`]: the runner's own share of an evaluation's time and CPU
//!   with a fixed-latency simulated model, and [`baseline`]: its check
//!   against a recorded ratio.
//!
//! The environments' bench (gold replay against the Python reference) is
//! `ecdysis_tau2::bench`.

pub mod baseline;
pub mod calc;
pub mod runner;
pub mod sandbox;

pub use sandbox::{BenchOptions, SandboxBenchReport, run};
