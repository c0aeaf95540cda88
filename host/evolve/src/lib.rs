//! Harness evolution, laid out as a training round reads it: [`evaluate`]
//! the incumbent on the training tasks (the runner runs the episodes; this
//! crate picks which), [`aggregate`] the scrubbed failures across tasks,
//! [`diagnose`] a structured change from them, [`code`] it into a staging
//! copy of the harness, [`gate`] the built candidate (screen, acceptance
//! rule, racing, power) and keep it only if it beats the incumbent on the
//! training split. [`train`] is the loop that runs those stages round by
//! round and records them; [`experiment`], [`ablate`] and [`coder_bench`]
//! are the comparisons built on it.
//!
//! The crate owns the method: what evolution may know of an episode, how
//! it is grouped, diagnosed, coded and judged, and the training run's
//! files. It uses only the crates before it in the workspace order
//! (`ecdysis-sys`, `-env`, `-model`, `-sandbox`, `-runner`) and must not
//! depend on the report, tracking, service or command-line crates after
//! it. Nothing it sends to a model or coder may come from oracle material:
//! every prompt is rendered from [`aggregate::failure_record`]s, which are
//! scrubbed of it.

pub mod ablate;
pub mod aggregate;
pub mod code;
pub mod coder_bench;
pub mod diagnose;
pub mod evaluate;
pub mod experiment;
pub mod gate;
pub mod staging;
pub mod train;
