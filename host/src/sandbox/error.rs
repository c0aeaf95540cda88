//! Typed errors of the sandbox.

use std::path::PathBuf;

/// A way a harness broke the runtime contract without trapping.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Violation {
    #[error("call names unknown tool `{tool}`")]
    UnknownTool { tool: String },
    #[error("arguments of `{tool}` are not a JSON object: {reason}")]
    ArgumentsNotObject { tool: String, reason: String },
    #[error("call id is empty")]
    EmptyCallId,
    #[error("arguments of `{tool}` are {bytes} bytes, over the cap of {cap}")]
    ArgumentsTooLarge {
        tool: String,
        bytes: usize,
        cap: usize,
    },
    #[error("hook returned {bytes} bytes of text, over the cap of {cap}")]
    OutputTooLarge { bytes: usize, cap: usize },
    #[error("contract rewrites unknown tool `{tool}`")]
    UnknownToolDescription { tool: String },
    #[error("`{decision}` is not a valid answer to a {action} action")]
    DecisionForWrongAction {
        decision: &'static str,
        action: &'static str,
    },
    #[error("tried to call mutating tool `{tool}` through the read-only env view")]
    MutatingViaEnvView { tool: String },
    #[error("made more than {quota} env-view calls in one hook")]
    EnvViewQuota { quota: u32 },
    #[error("realize returned no calls")]
    EmptyRealization,
    #[error("hook returned {items} list items, over the cap of {cap}")]
    TooManyItems { items: usize, cap: usize },
}

/// Why a hook call or a component load failed.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("hook `{hook}` ran out of fuel (budget {budget})")]
    OutOfFuel { hook: &'static str, budget: u64 },
    #[error("hook `{hook}` passed its deadline of {deadline_ms} ms")]
    Deadline {
        hook: &'static str,
        deadline_ms: u64,
    },
    #[error("hook `{hook}` hit the memory limit of {limit_bytes} bytes")]
    MemoryLimit {
        hook: &'static str,
        limit_bytes: usize,
    },
    #[error("hook `{hook}` overflowed the wasm stack")]
    StackOverflow { hook: &'static str },
    #[error("hook `{hook}` trapped: {message}")]
    Trap { hook: &'static str, message: String },
    #[error("hook `{hook}` broke the contract: {violation}")]
    Contract {
        hook: &'static str,
        violation: Violation,
    },
    #[error("the episode's harness instance already failed and cannot be called again")]
    Poisoned,
    #[error("cannot read component {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot compile component: {0}")]
    Compile(String),
    #[error("cannot link component (does it import something not granted?): {0}")]
    Link(String),
    #[error("cannot instantiate component: {0}")]
    Instantiate(String),
    #[error("engine setup failed: {0}")]
    Engine(String),
    /// Every pre-allocated episode slot of a pooled sandbox is in use: the
    /// host's capacity, not the harness's fault (the runner must not score
    /// it as a harness error).
    #[error(transparent)]
    Limits(#[from] super::limits::LimitsError),
    #[error(
        "every pooled episode slot is in use ({detail}); run fewer episodes at once or size the pool larger"
    )]
    PoolExhausted { detail: String },
}

impl SandboxError {
    /// The name of this error's kind, as recorded in trajectories.
    pub fn kind(&self) -> &'static str {
        match self {
            SandboxError::OutOfFuel { .. } => "out_of_fuel",
            SandboxError::Deadline { .. } => "deadline",
            SandboxError::MemoryLimit { .. } => "memory_limit",
            SandboxError::StackOverflow { .. } => "stack_overflow",
            SandboxError::Trap { .. } => "trap",
            SandboxError::Contract { .. } => "contract_violation",
            SandboxError::Poisoned => "poisoned",
            SandboxError::Read { .. } => "read",
            SandboxError::Compile(_) => "compile",
            SandboxError::Link(_) => "link",
            SandboxError::Instantiate(_) => "instantiate",
            SandboxError::Engine(_) => "engine",
            SandboxError::PoolExhausted { .. } => "pool_exhausted",
            SandboxError::Limits(_) => "limits",
        }
    }
}
