//! The bottom layer of the Ecdysis host: what every other crate needs from
//! the operating system, and nothing about harnesses or benchmarks.
//!
//! - [`rng`]: SplitMix64, the one seeded generator (every random choice is
//!   a function of an explicit seed); [`stats`]: the one median; [`date`]:
//!   the one civil-date conversion.
//! - [`fsutil`]: atomic writes, the one crate walker and copier, paths in
//!   errors, timestamps; [`layout`]: the files of run and training
//!   directories, named once.
//! - [`process`]: child processes with a timeout and a whole-group kill, a
//!   scrubbed environment, scratch directories.
//! - [`rlimit`]: kernel limits of a child process and what its exit says.
//! - [`jail`]: bubblewrap jails for untrusted work on the host (candidate
//!   builds, external coders): only the bound paths, no network, a cleared
//!   environment, a memory limit, nothing left running afterwards.
//! - [`egress`]: the egress proxy of a jailed external coder: it reaches its
//!   model endpoint and nothing else.
//! - [`ids`]: the identities results files record (the agent model).
//! - [`progress`]: the `tracing` targets under which every crate reports
//!   progress and security downgrades for the binary to render.
//! - [`text`]: the one cut of text for display, at a character boundary.

pub mod date;
pub mod egress;
pub mod fsutil;
pub mod ids;
pub mod jail;
pub mod layout;
pub mod process;
pub mod progress;
pub mod rlimit;
pub mod rng;
pub mod stats;
pub mod text;
