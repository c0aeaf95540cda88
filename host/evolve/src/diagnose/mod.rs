//! The diagnose stage: aggregated failure groups in, one structured
//! [`change_spec::ChangeSpec`] out. Offline, the [`heuristic`] diagnoser
//! writes it by rules from the evidence; with models, the four [`fdcr`]
//! roles discuss it and the Moderator writes it. [`roles`] decides who
//! diagnoses and who codes; every role and coder request is fitted to the
//! endpoint's context by the [`token_budget`].

pub mod change_spec;
pub mod fdcr;
pub mod heuristic;
pub mod roles;
pub mod token_budget;
