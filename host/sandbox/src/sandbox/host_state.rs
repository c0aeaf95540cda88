//! The per-episode store data: what the host keeps for one harness instance,
//! and the host side of the `env-view` and `host-log` imports.

use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, StoreLimits};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::bindings::ecdysis::harness::{env_view, host_log, types};
use super::bindings::{LogLevel, ViewError};
use super::env_view::ReadOnlyEnv;
use super::error::Violation;
use super::limits::Limits;
use super::recorder::{self, RecordedViewCall};

/// One line a harness logged during a hook.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LogLine {
    /// `debug`, `info` or `warn`.
    pub level: String,
    /// The message; one over 4 KiB is cut there and ends in `…`.
    pub message: String,
}

/// Bookkeeping of the hook call in progress, reset before every call.
#[derive(Debug, Default)]
pub(crate) struct HookScratch {
    pub env_view_calls: u32,
    pub logs: Vec<LogLine>,
    pub dropped_logs: u32,
    pub violation: Option<Violation>,
    /// When the hook call started (its wall-clock deadline counts from
    /// here, also across host calls it makes).
    pub started: Option<std::time::Instant>,
}

/// A host call found the hook past its deadline: the epoch deadline only
/// interrupts wasm code, so time spent in the host on the guest's behalf
/// (an env-view call) is checked when that call starts and returns.
#[derive(Debug, thiserror::Error)]
#[error("the hook passed its deadline during a host call")]
pub(crate) struct HostDeadline;

/// Store limits that also remember whether a limit was hit: a Rust guest whose
/// allocation fails aborts with a bare `unreachable`, so without this flag an
/// out-of-memory would look like any other trap.
pub(crate) struct FlaggingLimiter {
    inner: StoreLimits,
    pub hit: bool,
}

impl FlaggingLimiter {
    pub fn new(limits: &Limits) -> Self {
        let inner = wasmtime::StoreLimitsBuilder::new()
            .memory_size(limits.memory_bytes)
            .table_elements(limits.table_elements)
            .instances(limits.instances)
            .tables(limits.instances)
            .memories(limits.instances)
            .build();
        FlaggingLimiter { inner, hit: false }
    }
}

impl ResourceLimiter for FlaggingLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let ok = self.inner.memory_growing(current, desired, maximum)?;
        self.hit |= !ok;
        Ok(ok)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let ok = self.inner.table_growing(current, desired, maximum)?;
        self.hit |= !ok;
        Ok(ok)
    }

    fn instances(&self) -> usize {
        self.inner.instances()
    }
    fn tables(&self) -> usize {
        self.inner.tables()
    }
    fn memories(&self) -> usize {
        self.inner.memories()
    }
}

/// A trap raised by the host on the guest's behalf; the violation is also
/// kept in [`HookScratch`] so classification does not depend on downcasting.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct ViolationTrap(pub Violation);

/// Store data of one episode's harness instance.
pub struct HostState {
    wasi: WasiCtx,
    pub(crate) virt: super::virtual_wasi::VirtualWasi,
    table: ResourceTable,
    pub(crate) limiter: FlaggingLimiter,
    pub(crate) env: Box<dyn ReadOnlyEnv>,
    pub(crate) scratch: HookScratch,
    pub(crate) stderr: MemoryOutputPipe,
    /// Env-view calls of the hook in progress with their answers; `Some`
    /// only while a recorder is attached (see `recorder.rs`).
    pub(crate) view_log: Option<Vec<RecordedViewCall>>,
    env_view_quota: u32,
    log_quota: u32,
    max_log_bytes: usize,
    deadline: std::time::Duration,
}

impl HostState {
    pub(crate) fn new(limits: &Limits, env: Box<dyn ReadOnlyEnv>) -> Self {
        let stderr = MemoryOutputPipe::new(limits.stdio_bytes);
        // Deny by default: no args, no env vars, no preopened dirs, no network,
        // and stdout is discarded; stderr is captured so a panic message can
        // be reported with the trap.
        // Sockets are refused by `virtual_wasi` before wasmtime-wasi sees
        // them; these are the second lock.
        let wasi = WasiCtx::builder()
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        HostState {
            wasi,
            virt: super::virtual_wasi::VirtualWasi::new(0),
            table: ResourceTable::new(),
            limiter: FlaggingLimiter::new(limits),
            env,
            scratch: HookScratch::default(),
            stderr,
            view_log: None,
            env_view_quota: limits.env_view_calls_per_hook,
            log_quota: limits.log_lines_per_hook,
            max_log_bytes: 4096,
            deadline: limits.deadline,
        }
    }

    /// The virtual clocks, randomness, filesystem and sockets.
    pub(crate) fn virt(&mut self) -> super::virtual_wasi::Virt<'_> {
        super::virtual_wasi::Virt {
            state: &mut self.virt,
            table: &mut self.table,
        }
    }

    /// Whether the hook in progress is past its wall-clock deadline.
    fn past_deadline(&self) -> bool {
        self.scratch
            .started
            .is_some_and(|t| t.elapsed() > self.deadline)
    }

    fn violate(&mut self, violation: Violation) -> wasmtime::Error {
        self.scratch.violation = Some(violation.clone());
        wasmtime::Error::new(ViolationTrap(violation))
    }

    /// Guest stderr captured so far (a panic message, typically).
    pub(crate) fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr.contents())
            .trim()
            .to_string()
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl types::Host for HostState {}

impl env_view::Host for HostState {
    fn call_read_only(
        &mut self,
        name: String,
        arguments: String,
    ) -> wasmtime::Result<Result<String, ViewError>> {
        if self.view_log.is_none() {
            return self.answer_read_only(name, arguments);
        }
        let (logged_name, logged_arguments) =
            (name.clone(), recorder::logged_arguments(&arguments));
        let answer = self.answer_read_only(name, arguments)?;
        if let Some(log) = self.view_log.as_mut() {
            log.push(RecordedViewCall {
                name: logged_name,
                arguments: logged_arguments,
                answer: recorder::view_answer(&answer),
            });
        }
        Ok(answer)
    }
}

impl HostState {
    fn answer_read_only(
        &mut self,
        name: String,
        arguments: String,
    ) -> wasmtime::Result<Result<String, ViewError>> {
        self.scratch.env_view_calls += 1;
        if self.scratch.env_view_calls > self.env_view_quota {
            return Err(self.violate(Violation::EnvViewQuota {
                quota: self.env_view_quota,
            }));
        }
        if self.past_deadline() {
            return Err(wasmtime::Error::new(HostDeadline));
        }
        // Bound the host's work per call before parsing anything: no real
        // tool call comes near the cap (see `MAX_TOOL_ARGUMENT_BYTES`).
        let cap = super::MAX_TOOL_ARGUMENT_BYTES;
        if arguments.len() > cap {
            return Ok(Err(ViewError::InvalidArguments(format!(
                "arguments are {} bytes, over the env view's cap of {cap}",
                arguments.len()
            ))));
        }
        match self.env.tool_mutates(&name) {
            None => return Ok(Err(ViewError::UnknownTool(name))),
            Some(true) => return Err(self.violate(Violation::MutatingViaEnvView { tool: name })),
            Some(false) => {}
        }
        let args = match serde_json::from_str::<serde_json::Value>(&arguments) {
            Ok(serde_json::Value::Object(map)) => map,
            Ok(other) => {
                return Ok(Err(ViewError::InvalidArguments(format!(
                    "expected a JSON object, got {}",
                    json_kind(&other)
                ))));
            }
            Err(e) => return Ok(Err(ViewError::InvalidArguments(e.to_string()))),
        };
        let out = self.env.call_read_only(&name, &args);
        if self.past_deadline() {
            return Err(wasmtime::Error::new(HostDeadline));
        }
        Ok(if out.error {
            Err(ViewError::ToolError(out.content))
        } else {
            Ok(out.content)
        })
    }
}

impl host_log::Host for HostState {
    fn log(&mut self, level: LogLevel, message: String) -> wasmtime::Result<()> {
        if self.scratch.logs.len() as u32 >= self.log_quota {
            self.scratch.dropped_logs += 1;
            return Ok(());
        }
        let mut message = message;
        if message.len() > self.max_log_bytes {
            let mut cut = self.max_log_bytes;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
            message.push('…');
        }
        let level = match level {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
        };
        tracing::debug!(target: "harness", level, "{message}");
        self.scratch.logs.push(LogLine {
            level: level.to_string(),
            message,
        });
        Ok(())
    }
}

/// A JSON value's kind, for error messages.
pub(crate) fn json_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}
