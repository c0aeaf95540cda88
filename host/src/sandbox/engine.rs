//! The one wasmtime engine of a host process, its linker, and the loaded
//! (pre-instantiated) harness components.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Config, Engine};

use super::bindings::HarnessPre;
use super::error::SandboxError;
use super::host_state::HostState;
use super::limits::Limits;

/// Granularity of the wall-clock deadline: one epoch tick.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(1);

/// Increments the engine's epoch every tick so per-call deadlines fire even
/// when a guest burns no fuel. Stops when the last holder is dropped.
struct EpochTicker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl EpochTicker {
    fn start(engine: Engine) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("ecdysis-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    engine.increment_epoch();
                }
            })
            .ok();
        EpochTicker { stop, thread }
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The sandbox: one engine and one linker for every harness of the process.
///
/// Cloning is cheap; clones share the engine, so a component compiled once
/// can be instantiated from any thread.
#[derive(Clone)]
pub struct Sandbox {
    engine: Engine,
    linker: Arc<Linker<HostState>>,
    limits: Limits,
    // Held only to keep the epoch thread alive as long as any clone lives.
    _ticker: Arc<EpochTicker>,
}

impl Sandbox {
    /// An engine with fuel metering, epoch deadlines and the stack cap of
    /// `limits`, and a linker that grants only what a Rust guest's `std`
    /// needs to print a panic (`wasi:io`, `wasi:cli`) plus the harness
    /// imports. A component that imports anything else (clocks, random,
    /// filesystem, sockets) fails to link with an error naming the import.
    pub fn new(limits: Limits) -> Result<Self, SandboxError> {
        let mut config = Config::new();
        config
            .wasm_component_model(true)
            .consume_fuel(true)
            .epoch_interruption(true)
            .max_wasm_stack(limits.max_wasm_stack);
        let engine = Engine::new(&config).map_err(|e| SandboxError::Engine(format!("{e:#}")))?;
        let mut linker = Linker::<HostState>::new(&engine);
        add_granted_wasi(&mut linker).map_err(|e| SandboxError::Engine(format!("{e:#}")))?;
        super::bindings::Harness::add_to_linker::<HostState, HasSelf<HostState>>(
            &mut linker,
            |s| s,
        )
        .map_err(|e| SandboxError::Engine(format!("{e:#}")))?;
        let ticker = Arc::new(EpochTicker::start(engine.clone()));
        Ok(Sandbox {
            engine,
            linker: Arc::new(linker),
            limits,
            _ticker: ticker,
        })
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Compile a component from its bytes (slow: tens of milliseconds; the
    /// store caches the result by hash).
    pub fn compile(&self, bytes: &[u8]) -> Result<Component, SandboxError> {
        Component::new(&self.engine, bytes).map_err(|e| SandboxError::Compile(format!("{e:#}")))
    }

    /// Link a compiled component once; episodes then instantiate it cheaply.
    pub fn prepare(&self, component: &Component) -> Result<LoadedHarness, SandboxError> {
        let pre = self
            .linker
            .instantiate_pre(component)
            .map_err(|e| SandboxError::Link(format!("{e:#}")))?;
        let pre = HarnessPre::new(pre).map_err(|e| SandboxError::Link(format!("{e:#}")))?;
        Ok(LoadedHarness {
            pre,
            limits: self.limits.clone(),
            sandbox: self.clone(),
        })
    }

    /// Compile and link in one go.
    pub fn load_bytes(&self, bytes: &[u8]) -> Result<LoadedHarness, SandboxError> {
        self.prepare(&self.compile(bytes)?)
    }
}

/// The WASI subset granted to every guest.
fn add_granted_wasi(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    use wasmtime_wasi::WasiView;
    use wasmtime_wasi::cli::{WasiCli, WasiCliView};
    use wasmtime_wasi::p2::bindings::{cli, sync};
    wasmtime_wasi::p2::bindings::io::error::add_to_linker::<HostState, HasIoTable>(linker, |t| {
        t.ctx().table
    })?;
    sync::io::poll::add_to_linker::<HostState, HasIoTable>(linker, |t| t.ctx().table)?;
    sync::io::streams::add_to_linker::<HostState, HasIoTable>(linker, |t| t.ctx().table)?;
    cli::exit::add_to_linker::<HostState, WasiCli>(linker, HostState::cli)?;
    cli::environment::add_to_linker::<HostState, WasiCli>(linker, HostState::cli)?;
    cli::stdin::add_to_linker::<HostState, WasiCli>(linker, HostState::cli)?;
    cli::stdout::add_to_linker::<HostState, WasiCli>(linker, HostState::cli)?;
    cli::stderr::add_to_linker::<HostState, WasiCli>(linker, HostState::cli)?;
    cli::terminal_input::add_to_linker::<HostState, WasiCli>(linker, HostState::cli)?;
    cli::terminal_output::add_to_linker::<HostState, WasiCli>(linker, HostState::cli)?;
    cli::terminal_stdin::add_to_linker::<HostState, WasiCli>(linker, HostState::cli)?;
    cli::terminal_stdout::add_to_linker::<HostState, WasiCli>(linker, HostState::cli)?;
    cli::terminal_stderr::add_to_linker::<HostState, WasiCli>(linker, HostState::cli)?;
    Ok(())
}

struct HasIoTable;
impl wasmtime::component::HasData for HasIoTable {
    type Data<'a> = &'a mut wasmtime::component::ResourceTable;
}

/// A harness component linked against the sandbox, ready to start episodes.
/// Cheap to clone and shareable across threads.
#[derive(Clone)]
pub struct LoadedHarness {
    pub(crate) pre: HarnessPre<HostState>,
    pub(crate) limits: Limits,
    pub(crate) sandbox: Sandbox,
}

impl LoadedHarness {
    pub fn sandbox(&self) -> &Sandbox {
        &self.sandbox
    }

    /// The limits episodes of this harness run under.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The same compiled harness under other per-call limits (fuel, deadline,
    /// memory, quotas), e.g. one tenant's. The wasm stack cap is the engine's
    /// and cannot change per harness.
    pub fn with_limits(&self, limits: Limits) -> LoadedHarness {
        LoadedHarness {
            pre: self.pre.clone(),
            limits: Limits {
                max_wasm_stack: self.sandbox.limits.max_wasm_stack,
                ..limits
            },
            sandbox: self.sandbox.clone(),
        }
    }
}
