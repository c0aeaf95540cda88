//! Integration tests of the runner layer (one test binary): the sandbox
//! with real guests, the starting harness on every gold trajectory, and
//! the τ² conformance vectors.

mod conformance;
mod sandbox;
mod template;
