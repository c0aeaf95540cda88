//! Test support for the workspace's crates (a dev-dependency only, never in
//! the binary):
//!
//! - [`mock`]: an in-process OpenAI-compatible server with scripted
//!   replies, for tests of anything that calls a model endpoint;
//! - [`guests`]: the repository root, a store shared by one test process,
//!   and guest crates built once per process;
//! - [`measure`]: a child process's wall time and peak memory, and a test
//!   case re-run alone in a child so its bounds are its own.
//!
//! It uses the model's mock server and the sandbox's store, and is listed
//! after them; a crate below it in the workspace keeps its own test helpers.

pub mod guests;
pub mod measure;
/// The scripted OpenAI-compatible server; it lives in `ecdysis-model`,
/// where `bench --proxy` uses it too.
pub use ecdysis_model::mock;

pub use guests::{
    NoPythonTool, guest, load, python_guests_available, python_tool, repo_root, shared_store,
};
