//! Typed errors of the sandbox.

use std::path::PathBuf;

/// A way a harness broke the runtime contract without trapping.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Violation {
    /// A call the harness made up names a tool the episode does not have.
    #[error("call names unknown tool `{tool}`")]
    UnknownTool {
        /// The name used.
        tool: String,
    },
    /// A call the harness made up has arguments that are not a JSON object.
    #[error("arguments of `{tool}` are not a JSON object: {reason}")]
    ArgumentsNotObject {
        /// The tool called.
        tool: String,
        /// The parse error, or what JSON value it was instead.
        reason: String,
    },
    /// A call the harness made up has an empty id.
    #[error("call id is empty")]
    EmptyCallId,
    /// A call's arguments are over [`super::MAX_TOOL_ARGUMENT_BYTES`]
    /// (it would run after the hook, outside its deadline).
    #[error("arguments of `{tool}` are {bytes} bytes, over the cap of {cap}")]
    ArgumentsTooLarge {
        /// The tool it names.
        tool: String,
        /// The arguments' size.
        bytes: usize,
        /// The cap.
        cap: usize,
    },
    /// The episode's hook answers have put more text in front of the model
    /// than `max_added_bytes` allows (this answer crossed it).
    #[error(
        "the harness has added {added} bytes of text to the model's input this episode, over the budget of {limit}"
    )]
    AddedTextOverBudget {
        /// Bytes added this episode, this answer included.
        added: u64,
        /// The budget.
        limit: u64,
    },
    /// The answer's text is over `max_output_bytes`.
    #[error("hook returned {bytes} bytes of text, over the cap of {cap}")]
    OutputTooLarge {
        /// Bytes of text returned.
        bytes: usize,
        /// The cap, in bytes.
        cap: usize,
    },
    /// `contract` rewrote the description of a tool the episode does not
    /// have.
    #[error("contract rewrites unknown tool `{tool}`")]
    UnknownToolDescription {
        /// The name used.
        tool: String,
    },
    /// `realize` answered `execute` to a text action or `realize` to a call.
    #[error("`{decision}` is not a valid answer to a {action} action")]
    DecisionForWrongAction {
        /// The decision given (`execute`, `realize`).
        decision: &'static str,
        /// The action it answered (`text`, `call`).
        action: &'static str,
    },
    /// The hook asked the read-only env view to run a state-changing tool.
    #[error("tried to call mutating tool `{tool}` through the read-only env view")]
    MutatingViaEnvView {
        /// The tool asked for.
        tool: String,
    },
    /// The hook made more env-view calls than `env_view_calls_per_hook`.
    #[error("made more than {quota} env-view calls in one hook")]
    EnvViewQuota {
        /// The per-hook quota.
        quota: u32,
    },
    /// `realize` turned a text action into an empty list of calls.
    #[error("realize returned no calls")]
    EmptyRealization,
    /// A list in the answer is longer than
    /// [`MAX_LIST_ITEMS`](super::contract::MAX_LIST_ITEMS).
    #[error("hook returned {items} list items, over the cap of {cap}")]
    TooManyItems {
        /// Items returned.
        items: usize,
        /// The cap.
        cap: usize,
    },
}

/// Why a hook call or a component load failed.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The hook burnt its whole fuel budget.
    #[error("hook `{hook}` ran out of fuel (budget {budget})")]
    OutOfFuel {
        /// The hook that was running (`constructor`, `contract`, `skills`,
        /// `realize` or `regulate`).
        hook: &'static str,
        /// The per-hook fuel budget.
        budget: u64,
    },
    /// The hook ran past its wall-clock deadline (epoch interruption).
    #[error("hook `{hook}` passed its deadline of {deadline_ms} ms")]
    Deadline {
        /// The hook that was running (`constructor`, `contract`, `skills`,
        /// `realize` or `regulate`).
        hook: &'static str,
        /// The deadline, in milliseconds.
        deadline_ms: u64,
    },
    /// The guest tried to grow its memory past the limit.
    #[error("hook `{hook}` hit the memory limit of {limit_bytes} bytes")]
    MemoryLimit {
        /// The hook that was running (`constructor`, `contract`, `skills`,
        /// `realize` or `regulate`).
        hook: &'static str,
        /// The limit, in bytes.
        limit_bytes: usize,
    },
    /// The guest overflowed the engine's wasm stack cap.
    #[error("hook `{hook}` overflowed the wasm stack")]
    StackOverflow {
        /// The hook that was running (`constructor`, `contract`, `skills`,
        /// `realize` or `regulate`).
        hook: &'static str,
    },
    /// The guest trapped (a panic, `unreachable`, an out-of-bounds access).
    #[error("hook `{hook}` trapped: {message}")]
    Trap {
        /// The hook that was running (`constructor`, `contract`, `skills`,
        /// `realize` or `regulate`).
        hook: &'static str,
        /// wasmtime's description of the trap.
        message: String,
    },
    /// The hook answered, or called the host, against the runtime contract.
    #[error("hook `{hook}` broke the contract: {violation}")]
    Contract {
        /// The hook that was running (`constructor`, `contract`, `skills`,
        /// `realize` or `regulate`).
        hook: &'static str,
        /// What it did wrong.
        violation: Violation,
    },
    /// A hook of this episode failed before: the instance may hold broken
    /// state, so it is never called again.
    #[error("the episode's harness instance already failed and cannot be called again")]
    Poisoned,
    /// The component file could not be read.
    #[error("cannot read component {path}: {source}")]
    Read {
        /// The component file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The bytes are not a valid component for this engine (wasmtime's
    /// message).
    #[error("cannot compile component: {0}")]
    Compile(String),
    /// The component imports something the host does not grant, or does not
    /// export the harness world.
    #[error("cannot link component (does it import something not granted?): {0}")]
    Link(String),
    /// The component could not be instantiated (wasmtime's message).
    #[error("cannot instantiate component: {0}")]
    Instantiate(String),
    /// The host's own machinery failed (engine or linker setup, arming fuel,
    /// a hook thread that died).
    #[error("engine setup failed: {0}")]
    Engine(String),
    /// The limits cannot work (see
    /// [`LimitsError`](super::limits::LimitsError)).
    #[error(transparent)]
    Limits(#[from] super::limits::LimitsError),
    /// Every pre-allocated episode slot of a pooled sandbox is in use: the
    /// host's capacity, not the harness's fault (the runner must not score
    /// it as a harness error).
    #[error(
        "every pooled episode slot is in use ({detail}); run fewer episodes at once or size the pool larger"
    )]
    PoolExhausted {
        /// wasmtime's message about the pool.
        detail: String,
    },
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
