//! Ecdysis host: runs, evaluates and trains sandboxed WebAssembly runtime
//! harnesses for LLM agents.
//!
//! A reader looking for a behaviour starts here; every module is one
//! concern, listed from the bottom layer up (a module uses only those above
//! it in this list, the CLI in `main.rs` uses them all):
//!
//! - [`rng`]: SplitMix64, the one seeded generator (every random choice
//!   is a function of an explicit seed).
//! - [`fsutil`]: atomic writes, the one crate walker and copier, paths in
//!   errors, timestamps.
//! - [`process`]: child processes with a timeout and a whole-group kill, a
//!   scrubbed environment, scratch directories (guest builds, external
//!   coders).
//! - [`jail`]: bubblewrap jails for untrusted work on the host (candidate
//!   builds, external coders): only the bound paths, no network, a cleared
//!   environment, a memory limit, nothing left running afterwards.
//! - [`gate`]: the network gate of a jailed external coder: it reaches its
//!   model endpoint and nothing else.
//! - [`env`](mod@env): the benchmark environments (τ² airline and retail,
//!   native and exact to the reference): tools, tasks split into what the
//!   agent sees ([`env::TaskView`]) and an opaque oracle, evaluation, gold
//!   replay.
//! - [`model`]: every LLM role behind one trait: the OpenAI-compatible
//!   client, the response cache, the usage ledger, the simulated testbed
//!   agents (`sim:`) and the user simulators.
//! - [`sandbox`]: the wasmtime host of the `ecdysis:harness` world (one
//!   bindings module per world version): one engine per process, fuel,
//!   epoch deadlines, memory and output caps, the answer checks.
//! - [`store`]: the content-addressed component store: the one guest-build
//!   path, manifests with lineage, verified precompiled artifacts,
//!   `inspect`.
//! - [`doctor`]: `check`, every hook called with representative inputs.
//! - [`agent`]: one episode: the agent loop with the harness hooks at their
//!   lifecycle points, the harness session (the failure policy), the
//!   trajectory record, and every conversion between the layers' types
//!   ([`agent::boundary`]).
//! - [`eval`]: what to run ([`eval::RunSpec`]) and the runner: tasks ×
//!   trials, scoring, metrics, resumable result directories.
//! - [`isolate`]: process isolation of evaluation: episodes in worker
//!   processes of this binary under memory and CPU-time limits, a worker
//!   that dies costing only its episode (`--isolate process`, the
//!   service).
//! - [`evolve`]: harness evolution: failure records, cross-task
//!   aggregation, the diagnosers (heuristic, FDCR roles), the coders, the
//!   training loop ([`evolve::train`], one round at a time), the
//!   acceptance rule and the method comparison ([`evolve::experiment`]).
//! - [`report`]: `ecdysis-host report`: run, training and experiment
//!   directories as one self-contained HTML page (plotters SVG charts,
//!   bootstrap intervals, the trajectory viewer), every value escaped.
//! - [`serve`]: `ecdysis-host serve`, the multi-tenant evaluation service
//!   (HTTP API, tenants, quotas, fair scheduling, the audit log, SQLite or
//!   Postgres, worker loops on any machine).
//! - [`bench`](mod@bench): what the sandbox and the runner cost, next to
//!   baselines measured in the same run.
//! - [`vectors`]: cross-runtime conformance vectors: every hook call of
//!   re-run episodes (input, env-view answers, output) for the Python and
//!   JavaScript runtimes to replay byte for byte.

pub mod agent;
pub mod bench;
pub mod doctor;
pub mod env;
pub mod eval;
pub mod evolve;
pub mod fsutil;
pub mod gate;
pub mod isolate;
pub mod jail;
pub mod model;
pub mod process;
pub mod report;
pub mod rng;
pub mod sandbox;
pub mod serve;
pub mod store;
pub mod vectors;
