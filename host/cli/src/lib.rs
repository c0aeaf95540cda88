//! The Ecdysis host's library API, one path per layer: the crates of the
//! workspace under the module names the CLI and its tests use. The layers,
//! bottom up (each uses only those before it):
//!
//! - `ecdysis-sys`: [`rng`], [`fsutil`], [`process`], [`rlimit`], [`jail`],
//!   [`egress`];
//! - `ecdysis-pyemu`: [`py`], the Python semantics the environments are
//!   exact to;
//! - `ecdysis-env`: [`env`](mod@env), the benchmark environments;
//! - `ecdysis-model`: [`model`], every LLM role behind one trait;
//! - `ecdysis-sandbox`: [`sandbox`], [`store`], [`doctor`];
//! - `ecdysis-runner`: [`agent`], [`eval`], [`isolate`], [`vectors`],
//!   [`bench`](mod@bench);
//! - `ecdysis-evolve`: [`evolve`], harness training;
//! - `ecdysis-report`: [`report`], the HTML report;
//! - `ecdysis-track`: [`track`], result directories mirrored into MLflow;
//! - `ecdysis-serve`: [`serve`], the multi-tenant service.
//!
//! The binary (`main.rs`, `cli/`) parses flags into these crates' types and
//! renders what they report.

pub use ecdysis_env as env;
pub use ecdysis_evolve as evolve;
pub use ecdysis_model as model;
pub use ecdysis_pyemu as py;
pub use ecdysis_report as report;
pub use ecdysis_runner::{agent, bench, eval, isolate, vectors};
pub use ecdysis_sandbox::{doctor, sandbox, store};
pub use ecdysis_serve as serve;
pub use ecdysis_sys::{egress, fsutil, jail, process, progress, rlimit, rng};
pub use ecdysis_track as track;
