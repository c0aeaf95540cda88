//! Running harnesses on benchmark tasks: one episode, then many.
//!
//! - [`agent`]: one episode: the agent loop with the harness hooks at their
//!   lifecycle points, the harness session (the failure policy), the
//!   trajectory record, and every conversion between the layers' types
//!   ([`agent::boundary`]).
//! - [`eval`]: what to run ([`eval::RunSpec`]) and the runner: tasks ×
//!   trials, scoring, metrics, resumable result directories.
//! - [`isolate`]: episodes in worker processes of the host binary under
//!   memory and CPU-time limits, a worker that dies costing only its
//!   episode (`--isolate process`, the service).
//! - [`vectors`]: cross-runtime conformance vectors: every hook call of
//!   re-run episodes for the Python and JavaScript runtimes to replay.
//! - [`bench`]: what the sandbox, the runner and `calculate` cost, next to
//!   baselines measured in the same run.
//!
//! It uses the contract (a worker opens its domain by name through the
//! contract's `DomainOpener`, which the binary hands it), the model and the
//! sandbox; it names no benchmark and not the registry (only its tests do),
//! and never reaches training, the proxy, the report, the service or the
//! CLI.

pub mod agent;
pub mod bench;
pub mod eval;
pub mod isolate;
pub mod vectors;
