//! Where harness code runs: the wasmtime host of the `ecdysis:harness`
//! world, the store its builds are kept in, and the doctor that tries them.
//!
//! - [`sandbox`]: one engine per process, one bindings module per world
//!   version, fuel, epoch deadlines, memory and output caps, the answer
//!   checks, the read-only env view.
//! - [`store`]: the content-addressed component store: the one guest-build
//!   path (scanned and jailed for untrusted source), manifests with lineage,
//!   verified precompiled artifacts, `inspect`, `export`.
//! - [`doctor`]: `check`, every hook called with representative inputs.
//!
//! It knows nothing of benchmarks or models: a harness sees tasks and tools
//! only through the types of the world.

pub mod doctor;
pub mod sandbox;
pub mod store;
