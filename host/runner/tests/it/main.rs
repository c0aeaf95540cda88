//! Integration tests of the runner layer (one test binary): the sandbox
//! with real guests, the starting harness on every gold trajectory, and
//! the τ² conformance vectors, and τ² telecom's dual control.

mod adaptive;
mod agentbench_os;
mod conformance;
mod python;
mod sandbox;
mod telecom;
mod template;
