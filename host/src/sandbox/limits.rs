//! Resource limits applied to every harness hook call, and the failure policy.

use std::time::Duration;

use serde::{Deserialize, Serialize};

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
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            // ~10 ms of straight-line wasm; generous for rule tables, a hard
            // stop for a loop.
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
        }
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
