//! Harness evolution: evaluate, collect failures, aggregate them across
//! tasks, diagnose a structured change, have a coder implement it once per
//! round, build, gate (the acceptance rule of [`accept`]) and keep the candidate only if it strictly beats the
//! incumbent on the training split.

pub mod ablate;
pub mod accept;
pub mod aggregate;
pub mod budget;
pub mod coder;
pub mod coder_bench;
pub mod experiment;
pub mod fdcr;
pub mod heuristic;
pub mod labeler;
pub mod mechanism;
pub mod power;
pub mod race;
pub mod records;
pub mod roles;
pub mod rulecoder;
pub mod screen;
pub mod select;
pub mod spec;
pub mod staging;
pub mod train;
