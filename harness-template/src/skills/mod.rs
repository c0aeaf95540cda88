//! Procedural skills: a small library of procedures (`tables::SKILLS`),
//! retrieved from the agent-visible opening message only.
//!
//! Rules (one per file):
//! - [`bm25`]: score the domain's skills against the opening message.
//! - [`select`]: keep at most 1–2 skills above a threshold.

pub mod bm25;
pub mod select;

pub use select::select;
