//! Ecdysis host: runs, evaluates and trains sandboxed WebAssembly runtime
//! harnesses for LLM agents.
//!
//! - [`sandbox`]: the wasmtime host of the `ecdysis:harness` world.
//! - [`store`]: the content-addressed component store (`build`, `inspect`).
//! - [`doctor`]: `check`, calling every hook with representative inputs.
//! - [`bench`]: the sandbox overhead benchmark.

pub mod agent;
pub mod bench;
pub mod doctor;
pub mod env;
pub mod eval;
pub mod evolve;
pub mod fsutil;
pub mod model;
pub mod process;
pub mod sandbox;
pub mod store;
