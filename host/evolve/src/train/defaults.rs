//! `train`'s defaults, each defined once: [`super::TrainPlan`]'s and
//! [`super::TrainSpec`]'s `Default` and the command line's flags both read
//! these, so the library and `--help` cannot drift apart.

use super::Method;

/// The evolution method.
pub const METHOD: Method = Method::Ecdysis;
/// The harness source crate training starts from.
pub const SOURCE: &str = "harness-template";
/// The testbed agent: the clumsy profile, whose quirks a harness can fix.
pub const AGENT: &str = "sim:clumsy";
/// Rounds at most.
pub const ROUNDS: u32 = 3;
/// Episodes with reward below this are failures.
pub const LAMBDA: f64 = 1.0;
/// Rounds in a row without an accepted candidate before training stops.
pub const PLATEAU: u32 = 2;
/// The training split.
pub const TRAIN_SPLIT: &str = "train";
/// The held-out split, evaluated at the end.
pub const TEST_SPLIT: &str = "test";
/// Trials per held-out task (the paper's protocol: three).
pub const TEST_TRIALS: u32 = 3;
/// Whether training starts from the source's rule tables emptied.
pub const START_BLANK: bool = false;
/// Simulated latency of one rule-coder call, in milliseconds.
pub const CODER_LATENCY_MS: u64 = 0;
