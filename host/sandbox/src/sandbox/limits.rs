//! Resource limits applied to every harness hook call, and the failure policy.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::virtual_wasi::WasiProfile;

/// Largest arguments (the JSON object's text, in bytes) of one tool call
/// a harness makes through the sandbox's env view; the sandbox refuses a
/// larger call before parsing it.
///
/// Why 64 KiB: the largest arguments of any τ² call we know (gold actions,
/// fuzzed and perturbed calls in the conformance vectors) are under a
/// kilobyte, so no real call comes near it; and it keeps an env-view call
/// short: the other tools do work roughly proportional to their arguments,
/// and `calculate` parses in linear time and is held to its work budget
/// (`bench --calc` times the worst input of this size). Every call whose
/// arguments a harness wrote is held to it, including a call a harness
/// rewrote for the agent loop to run.
///
/// Calls the model makes (`Environment::call` from the agent loop) are
/// deliberately not capped: τ² has no such cap, so a cap could only change
/// the result of a call the reference would answer; a real model's call is
/// bounded by its output-token limit anyway, and its cost by the same
/// work budget (an expression of several megabytes would exhaust it).
pub const MAX_TOOL_ARGUMENT_BYTES: usize = 64 * 1024;

/// Limits for one harness. Every hook call gets a fresh fuel budget and a
/// fresh deadline; memory and table limits hold for the whole episode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Fuel (roughly, wasm instructions) one hook call may burn.
    pub fuel_per_hook: u64,
    /// Wall-clock backstop per hook call, independent of fuel (a guest blocked
    /// in a host call burns no fuel).
    pub deadline: Duration,
    /// Linear memory the guest may grow to, in bytes.
    pub memory_bytes: usize,
    /// Table elements per table.
    pub table_elements: usize,
    /// Instances, tables and memories a component may create.
    pub instances: usize,
    /// Maximum wasm stack, in bytes.
    pub max_wasm_stack: usize,
    /// Cap on the total bytes of text a single hook may return.
    pub max_output_bytes: usize,
    /// Read-only env-view calls one hook call may make.
    pub env_view_calls_per_hook: u32,
    /// Log lines one hook call may write (further lines are dropped, counted).
    pub log_lines_per_hook: u32,
    /// Bytes of guest stdout/stderr kept (for panic messages).
    pub stdio_bytes: usize,
    /// Bytes of text the hooks of one episode may add to the model's input
    /// in all (prompt and description growth, guidance, notes, block
    /// feedback, calls the harness writes; see [`super::added`]). Each hook
    /// answer is also capped by `max_output_bytes`; this bounds their sum,
    /// so a harness cannot multiply what the model is sent.
    #[serde(default = "default_max_added_bytes")]
    pub max_added_bytes: u64,
    /// Which WASI beyond `wasi:io` and `wasi:cli` a harness may import (see
    /// [`WasiProfile`]); checked when a component is linked.
    #[serde(default)]
    pub wasi: WasiProfile,
}

/// The default [`Limits::max_added_bytes`]: a small multiple of what the
/// starting harness adds on the longest episodes (the docs' limits page
/// has the measurements).
pub const DEFAULT_MAX_ADDED_BYTES: u64 = 64 << 10;

fn default_max_added_bytes() -> u64 {
    DEFAULT_MAX_ADDED_BYTES
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            // Generous for rule tables, a hard stop for a loop.
            fuel_per_hook: 20_000_000,
            deadline: Duration::from_millis(2_000),
            memory_bytes: 64 << 20,
            table_elements: 20_000,
            instances: 16,
            max_wasm_stack: 512 << 10,
            max_output_bytes: 256 << 10,
            env_view_calls_per_hook: 64,
            log_lines_per_hook: 64,
            stdio_bytes: 64 << 10,
            max_added_bytes: DEFAULT_MAX_ADDED_BYTES,
            wasi: WasiProfile::default(),
        }
    }
}

/// A limit that cannot work, named by its field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("limit `{field}` = {value} cannot work: {reason}")]
pub struct LimitsError {
    /// The [`Limits`] field.
    pub field: &'static str,
    /// Its value, as text.
    pub value: String,
    /// Why it cannot work.
    pub reason: &'static str,
}

impl Limits {
    /// Most linear memory a wasm32 guest can address.
    pub const MAX_MEMORY_BYTES: usize = 4 << 30;

    /// Refuse limits no hook could run under (a library caller can build
    /// any value; the CLI's flags are checked here too, not only there).
    pub fn validate(&self) -> Result<(), LimitsError> {
        let bad = |field, value: String, reason| {
            Err(LimitsError {
                field,
                value,
                reason,
            })
        };
        if self.fuel_per_hook == 0 {
            return bad(
                "fuel_per_hook",
                "0".into(),
                "a hook with no fuel cannot run at all",
            );
        }
        if self.deadline.is_zero() {
            return bad("deadline", "0 ms".into(), "every hook would stop at once");
        }
        if self.memory_bytes < 64 << 10 || self.memory_bytes > Self::MAX_MEMORY_BYTES {
            return bad(
                "memory_bytes",
                self.memory_bytes.to_string(),
                "must be between one wasm page (64 KiB) and 4 GiB",
            );
        }
        if self.max_wasm_stack < 4 << 10 {
            return bad(
                "max_wasm_stack",
                self.max_wasm_stack.to_string(),
                "a guest needs at least 4 KiB of stack",
            );
        }
        if self.max_output_bytes == 0 {
            return bad("max_output_bytes", "0".into(), "no hook could answer");
        }
        if self.instances == 0 || self.table_elements == 0 {
            return bad(
                if self.instances == 0 {
                    "instances"
                } else {
                    "table_elements"
                },
                "0".into(),
                "no component could be instantiated",
            );
        }
        Ok(())
    }
}

/// What happens when a hook fails (trap, out of fuel, deadline, contract
/// violation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum FailurePolicy {
    /// The episode ends with termination reason `harness_error` (recorded).
    /// The default: a broken harness must not silently look like Direct.
    #[default]
    FailClosed,
    /// The step proceeds as if the hook had returned its neutral answer
    /// (recorded).
    FailOpen,
}

impl std::str::FromStr for FailurePolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "fail-closed" => Ok(FailurePolicy::FailClosed),
            "fail-open" => Ok(FailurePolicy::FailOpen),
            other => Err(format!(
                "unknown failure policy `{other}` (expected fail-closed or fail-open)"
            )),
        }
    }
}
