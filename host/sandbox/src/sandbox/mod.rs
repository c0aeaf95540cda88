//! The sandbox: runs harness components under wasmtime with fuel, deadline,
//! memory, stack and output limits, and checks every answer against the
//! runtime contract.
//!
//! Design follows wasmtime's own embedding examples (and Spin/Extism): one
//! `Engine` per process, an `InstancePre` per component so an episode
//! instantiates in microseconds, one `Store` per episode, dropped on any
//! failure, and fuel plus an epoch deadline re-armed before every call.

pub mod added;
mod bindings;
mod contract;
mod engine;
mod env_view;
mod episode;
mod error;
#[cfg(test)]
mod fuzz;
mod host_state;
pub mod layers;
mod limits;
pub mod recorder;
mod sync_io;
pub mod virtual_wasi;

pub use bindings::{
    ActionDecision, AgentAction, ContractInput, ContractOutput, EpisodeInfo, Guidance, LogLevel,
    Regulation, SUPPORTED_WORLDS, StepKind, StepReport, TaskView, ToolCall, ToolDescription,
    ToolOutcome, ToolSpec, UnparsableComponent, ViewError, WORLD_VERSION, world_of,
};
pub use contract::{MAX_LIST_ITEMS, ToolNames, check_call};
pub use engine::{Allocation, LoadedHarness, Sandbox};
pub use env_view::{ReadOnlyEnv, StaticEnv, ViewOutput};
pub use episode::{HarnessEpisode, Hooked};
pub use error::{SandboxError, Violation};
pub use host_state::LogLine;
pub use layers::{Layer, LayerSet, UnknownLayer};
pub use limits::{FailurePolicy, Limits, LimitsError, MAX_TOOL_ARGUMENT_BYTES};
pub use recorder::{HookRecorder, RecordedHook, RecordedViewCall};
pub use virtual_wasi::WasiProfile;
