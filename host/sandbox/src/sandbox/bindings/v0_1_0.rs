//! Host-side bindings of `ecdysis:harness@0.1.0`, generated from `wit/`.
//!
//! The generated types are used directly as the host's hook types (with serde
//! derives added) instead of mirrored by hand: one definition, in the WIT file,
//! that harness authors and the host share.

// The WIT file documents the generated items (bindgen copies its doc
// comments into them). The few cases the WIT leaves undocumented
// (`host-log.level`'s `debug`, `info`, `warn`) would warn here, in code no
// one edits; an attribute on the macro call itself is ignored, so the allow
// covers this file, which holds nothing but the bindings.
#![allow(missing_docs)]

wasmtime::component::bindgen!({
    world: "harness",
    path: "../../wit",
    // A mutating call through the env view and an over-quota caller end the
    // hook with a trap, so those imports may trap.
    imports: {
        "ecdysis:harness/env-view.call-read-only": trappable,
        "ecdysis:harness/host-log.log": trappable,
    },
    additional_derives: [serde::Serialize, serde::Deserialize, PartialEq],
});

pub use ecdysis::harness::env_view::ViewError;
pub use ecdysis::harness::host_log::Level as LogLevel;
pub use ecdysis::harness::types::{
    ActionDecision, AgentAction, ContractInput, ContractOutput, EpisodeInfo, Guidance, Regulation,
    StepKind, StepReport, TaskView, ToolCall, ToolDescription, ToolOutcome, ToolSpec,
};

/// The world these bindings implement.
pub const WORLD: &str = "ecdysis:harness/harness@0.1.0";
