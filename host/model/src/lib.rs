//! The model layer: every role that talks to an LLM (the agent, the user
//! simulator, the evolution roles) goes through [`ChatModel`].
//!
//! Layers, from the wire up:
//! - [`HttpChatModel`] speaks OpenAI-compatible `/chat/completions` (vLLM,
//!   Ollama, llama.cpp server, OpenAI, DeepSeek, DashScope…) with timeouts,
//!   retries (exponential backoff + jitter, `Retry-After`) and a per-endpoint
//!   concurrency limit shared through an [`EndpointLimiter`].
//! - [`MeteredModel`] wraps any [`ChatModel`] (HTTP or simulated) with the
//!   on-disk [`ResponseCache`] and the [`UsageLedger`], so cache hits and fresh
//!   calls are accounted separately and identically for every backend.
//! - [`ModelHub`] owns the shared pieces (ledger, cache, limiter) for one run
//!   and builds metered models per role; it is what the CLI constructs.
//!
//! Beside the real clients:
//! - [`sim`]: simulated agent models `sim:<profile>` ([`SimAgent`]), the
//!   deterministic offline testbed with ground-truth quirks (testbed only,
//!   never a benchmark result);
//! - [`user`]: user simulators ([`LlmUser`], [`ScriptedUser`]).
//!
//! - [`mock`]: a scripted OpenAI-compatible server, in process, for tests
//!   that need a model endpoint (this crate's own tests use it here, the
//!   crates above through `ecdysis-testkit`, which re-exports it and comes
//!   after this crate) and as the upstream of `bench --proxy`.
//!
//! It uses the environment contract (tool specs and calls, and the gold
//! plan's last-output placeholder the OS testbed agent fills in) and
//! `ecdysis-sys`; never a benchmark crate, the sandbox, the runner or
//! anything above them: a model knows nothing of benchmarks, harnesses or
//! runs.

mod cache;
mod client;
mod config;
mod error;
mod hub;
mod ledger;
mod metered;
pub mod mock;
mod retry;
mod signals;
pub mod sim;
pub mod tokens;
mod types;
pub mod user;
mod wire;

pub use cache::{CacheKey, CachePolicy, CacheStats, ResponseCache, canonical_json};
pub use client::{EndpointLimiter, HttpChatModel};
pub use config::{
    BASE_URL_ENV, DEFAULT_API_KEY_ENV, DEFAULT_BASE_URL, ModelConfig, ModelFlags, ModelRole,
};
pub use ecdysis_sys::ids::{ModelId, ModelKind};
pub use error::{ErrorClass, ModelError};
pub use hub::ModelHub;
pub use ledger::{
    CallOutcome, CallRecord, LedgerSummary, ModelPrice, PriceTable, PriceTableError, SpendRefused,
    SpendReservation, TokenCounts, UsageLedger, UsageTotals,
};
pub use metered::{MeteredModel, UNCAPPED_REPLY_ESTIMATE};
pub use retry::RetryPolicy;
pub use signals::{CallSignals, SignalCounts};
pub use sim::{SimAgent, SimProfile, TestbedNote, TestbedPlan};
pub use types::{
    ChatMessage, ChatModel, ChatRequest, ChatResponse, CountFuture, FunctionTool, ModelFuture,
    SamplingArgs, ToolCall, ToolChoice, Usage, response_format_json_schema,
};
pub use user::{LlmUser, ScriptedUser, UserScript, UserSimulator, UserStop, UserTurn, Utterance};
pub use wire::{classify_status, error_message_from_body, parse_usage};
