//! The one wasmtime engine of a host process, its linker, and the loaded
//! (pre-instantiated) harness components.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use super::bindings::HarnessPre;
use super::error::SandboxError;
use super::host_state::HostState;
use super::limits::Limits;
use super::recorder::HookRecorder;
use super::virtual_wasi::WasiProfile;

/// Granularity of the wall-clock deadline: one epoch tick.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(1);

/// Increments the engine's epoch every tick so per-call deadlines fire even
/// when a guest burns no fuel. It ticks only while guest code may run (a
/// hook call or an instantiation is in flight) and sleeps otherwise: an
/// evaluation spends almost all its time awaiting the model, and waking
/// every millisecond for nothing was a measurable share of the host's CPU.
///
/// Starting a call does not wake it either, unless the call's deadline is
/// short or the ticker has been idle for long: a hook takes microseconds, and
/// waking a thread for each of an episode's dozen hooks cost a futex wake
/// and a context switch on a cold core each (`bench --runner` with a
/// pass-through guest: 14 context switches per episode, 9 without these).
/// Instead, while calls keep coming, the ticker looks every [`WATCH`] (20
/// wake-ups a second); a call still running then is ticked from that
/// moment, so a deadline of at least [`PRECISE_FROM`] (the default's) fires
/// at most `WATCH` late, 2.5% of it. Shorter deadlines wake the ticker at
/// once and are exact to a tick.
/// Stops when the last holder is dropped.
pub(crate) struct EpochTicker {
    stop: Arc<AtomicBool>,
    /// Guest calls in flight.
    active: Arc<AtomicUsize>,
    /// Whether the ticker sleeps until woken (no call for [`DEEP_IDLE_AFTER`]):
    /// then every call start wakes it.
    parked_deep: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// How often a watching ticker looks for calls in flight.
const WATCH: Duration = Duration::from_millis(50);

/// Calls whose deadline is shorter wake the ticker when they start.
pub(crate) const PRECISE_FROM: Duration = Duration::from_millis(2_000);

/// Idle time after which the ticker stops watching and sleeps until a call
/// wakes it: a host between runs (or a service with no work) costs nothing.
const DEEP_IDLE_AFTER: Duration = Duration::from_millis(2_000);

impl EpochTicker {
    fn start(engine: Engine) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let active = Arc::new(AtomicUsize::new(0));
        let parked_deep = Arc::new(AtomicBool::new(false));
        let (flag, busy, deep) = (stop.clone(), active.clone(), parked_deep.clone());
        let thread = std::thread::Builder::new()
            .name("ecdysis-epoch".into())
            .spawn(move || {
                let idle_rounds = DEEP_IDLE_AFTER.as_millis() / WATCH.as_millis();
                let mut idle = 0;
                while !flag.load(Ordering::Relaxed) {
                    if busy.load(Ordering::SeqCst) > 0 {
                        idle = 0;
                        std::thread::sleep(EPOCH_TICK);
                        engine.increment_epoch();
                    } else if idle < idle_rounds {
                        idle += 1;
                        std::thread::park_timeout(WATCH);
                    } else {
                        // Announce the deep sleep before looking at `busy`
                        // once more; a call that starts after the store sees
                        // it and unparks (both sides SeqCst, so at least one
                        // sees the other's write). The timeout only bounds
                        // a lost wake-up; it is not needed for correctness.
                        deep.store(true, Ordering::SeqCst);
                        if busy.load(Ordering::SeqCst) == 0 && !flag.load(Ordering::Relaxed) {
                            std::thread::park_timeout(DEEP_IDLE_AFTER * 60);
                        }
                        deep.store(false, Ordering::SeqCst);
                        idle = 0;
                    }
                }
            })
            .ok();
        EpochTicker {
            stop,
            active,
            parked_deep,
            thread,
        }
    }

    /// Mark guest code as running, under a deadline of `deadline`, until the
    /// guard drops (the ticker ticks while any guard lives).
    pub(crate) fn running(&self, deadline: Duration) -> Running<'_> {
        let first = self.active.fetch_add(1, Ordering::SeqCst) == 0;
        if first
            && (deadline < PRECISE_FROM || self.parked_deep.load(Ordering::SeqCst))
            && let Some(t) = &self.thread
        {
            t.thread().unpark();
        }
        Running(self)
    }
}

/// A guest call in flight (see [`EpochTicker::running`]).
pub(crate) struct Running<'a>(&'a EpochTicker);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

/// How a sandbox gives episodes their instance memory.
///
/// `OnDemand` maps a fresh linear memory per episode (an `mmap` and an
/// `munmap` each time): right for one-off tools (`check`, `inspect`) and for
/// tests that create many engines. `Pooled` reserves every slot once when the
/// engine is built and recycles it (a `madvise` reset instead of a new
/// mapping), which is what wasmtime recommends for servers that instantiate
/// per request and what Spin and wasmtime-serve do; the runner and the trainer
/// use it, sized to their concurrency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allocation {
    /// A fresh linear memory mapped per episode (no reservation up front).
    OnDemand,
    /// Room for this many live episodes at once. Starting one more fails
    /// with [`SandboxError::PoolExhausted`] (never a harness error).
    Pooled {
        /// The number of pool slots.
        episodes: u32,
    },
}

impl Allocation {
    /// A pool for a runner that keeps `concurrency` episodes in flight, with
    /// headroom for the gate's `check` and screen episodes running beside
    /// them.
    pub fn for_concurrency(concurrency: usize) -> Allocation {
        let episodes = u32::try_from(concurrency.max(1))
            .unwrap_or(u32::MAX / 4)
            .saturating_mul(2)
            .saturating_add(8);
        Allocation::Pooled { episodes }
    }
}

/// Core instances, memories and tables one harness component may hold in a
/// pool slot. A Rust `wasm32-wasip2` guest has one main module plus a few
/// small adapter/shim modules; these bounds leave room for larger guests
/// while keeping the pool's reservation predictable.
const POOL_CORE_INSTANCES_PER_COMPONENT: u32 = 16;
const POOL_MEMORIES_PER_COMPONENT: u32 = 2;
const POOL_TABLES_PER_COMPONENT: u32 = 4;

fn pooling_config(limits: &Limits, episodes: u32) -> PoolingAllocationConfig {
    let mut pool = PoolingAllocationConfig::new();
    let wasm_page = 64 << 10;
    // The pool's memory cap is the episode limit rounded up to whole wasm
    // pages; the store limiter still enforces (and flags) the exact limit.
    let max_memory = limits.memory_bytes.div_ceil(wasm_page).max(1) * wasm_page;
    pool.total_component_instances(episodes)
        .total_core_instances(episodes.saturating_mul(POOL_CORE_INSTANCES_PER_COMPONENT))
        .total_memories(episodes.saturating_mul(POOL_MEMORIES_PER_COMPONENT))
        .total_tables(episodes.saturating_mul(POOL_TABLES_PER_COMPONENT))
        .max_core_instances_per_component(POOL_CORE_INSTANCES_PER_COMPONENT)
        .max_memories_per_component(POOL_MEMORIES_PER_COMPONENT)
        .max_tables_per_component(POOL_TABLES_PER_COMPONENT)
        .max_memory_size(max_memory)
        .table_elements(limits.table_elements)
        // Resetting a small resident prefix with memset is cheaper than a
        // page fault on every reuse; a Rust guest touches its first pages
        // (stack, data) in every episode.
        .linear_memory_keep_resident(64 << 10)
        .table_keep_resident(64 << 10);
    pool
}

/// The settings every engine of the host shares: whatever decides whether
/// native code compiled by one engine may run in another (fuel, epochs, the
/// stack cap). The allocation strategy is not among them, so code compiled
/// by an on-demand engine (the compile child's) loads into a pooled one.
fn engine_config(limits: &Limits) -> Config {
    let mut config = Config::new();
    config
        .wasm_component_model(true)
        .consume_fuel(true)
        .epoch_interruption(true)
        .max_wasm_stack(limits.max_wasm_stack);
    config
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
    allocation: Allocation,
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
        Self::with_allocation(limits, Allocation::OnDemand)
    }

    /// A sandbox whose episodes come from a pre-reserved pool (see
    /// [`Allocation`]): the runner's and trainer's engine.
    pub fn pooled(limits: Limits, concurrency: usize) -> Result<Self, SandboxError> {
        Self::with_allocation(limits, Allocation::for_concurrency(concurrency))
    }

    /// A sandbox with an explicit allocation strategy.
    pub fn with_allocation(limits: Limits, allocation: Allocation) -> Result<Self, SandboxError> {
        limits.validate()?;
        let mut config = engine_config(&limits);
        if let Allocation::Pooled { episodes } = allocation {
            config.allocation_strategy(InstanceAllocationStrategy::Pooling(pooling_config(
                &limits, episodes,
            )));
        }
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
            allocation,
            _ticker: ticker,
        })
    }

    /// How this sandbox allocates episode instances.
    pub fn allocation(&self) -> Allocation {
        self.allocation
    }

    /// The wasmtime engine every component of this sandbox is compiled for.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The epoch ticker, for marking guest calls in flight.
    pub(crate) fn ticker(&self) -> &EpochTicker {
        &self._ticker
    }

    /// The limits the engine and pool were built for (the wasm stack cap,
    /// the pool's slot size); harnesses loaded here start with them and
    /// may narrow them with [`LoadedHarness::with_limits`].
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Native code for a component, as [`Engine::precompile_component`] of
    /// this sandbox's engine would write it, compiled by an engine of the
    /// same settings that looks every function up in `cache` first (keyed
    /// by the function's body and the compiler's settings) and stores the
    /// ones it compiles: a component that differs from an earlier one in a
    /// few functions recompiles only those.
    pub fn precompile_cached(
        &self,
        bytes: &[u8],
        cache: Arc<dyn wasmtime::CacheStore>,
    ) -> Result<Vec<u8>, SandboxError> {
        let mut config = engine_config(&self.limits);
        config
            .enable_incremental_compilation(cache)
            .map_err(|e| SandboxError::Engine(format!("{e:#}")))?;
        let engine = Engine::new(&config).map_err(|e| SandboxError::Engine(format!("{e:#}")))?;
        engine
            .precompile_component(bytes)
            .map_err(|e| SandboxError::Compile(format!("{e:#}")))
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
        let beyond_minimal = component
            .component_type()
            .imports(&self.engine)
            .map(|(name, _)| name.to_string())
            .find(|name| !WasiProfile::Minimal.grants(name));
        check_profile(self.limits.wasi, beyond_minimal.as_deref())?;
        Ok(LoadedHarness {
            pre,
            beyond_minimal,
            limits: self.limits.clone(),
            sandbox: self.clone(),
            recorder: None,
        })
    }

    /// Compile and link in one go.
    pub fn load_bytes(&self, bytes: &[u8]) -> Result<LoadedHarness, SandboxError> {
        self.prepare(&self.compile(bytes)?)
    }
}

/// Refuse a component under a profile that does not grant `import` (the
/// first import beyond the minimal profile), naming it.
fn check_profile(profile: WasiProfile, import: Option<&str>) -> Result<(), SandboxError> {
    match import {
        Some(name) if !profile.grants(name) => Err(SandboxError::Link(format!(
            "the component imports `{name}`, which the `{profile}` WASI profile does not grant \
             (the `virtual` profile grants frozen clocks, seeded randomness, an empty filesystem \
             and refused sockets)"
        ))),
        _ => Ok(()),
    }
}

/// The WASI subset granted to every guest.
fn add_granted_wasi(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    use super::sync_io::{HasSyncIo, SyncIo};
    use wasmtime_wasi::WasiView;
    use wasmtime_wasi::cli::{WasiCli, WasiCliView};
    use wasmtime_wasi::p2::bindings::{cli, sync};
    wasmtime_wasi::p2::bindings::io::error::add_to_linker::<HostState, HasIoTable>(linker, |t| {
        t.ctx().table
    })?;
    // Not wasmtime-wasi's sync io bindings: they block through
    // `in_tokio`, which panics on an async worker (see `sync_io`).
    sync::io::poll::add_to_linker::<HostState, HasSyncIo>(linker, |t| SyncIo(t.ctx().table))?;
    sync::io::streams::add_to_linker::<HostState, HasSyncIo>(linker, |t| SyncIo(t.ctx().table))?;
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
    add_virtual_wasi(linker)
}

/// The virtual clocks, randomness, filesystem and sockets (see
/// `virtual_wasi`). Whether a component may import them is the profile's
/// call at link time ([`Sandbox::prepare`]); linking them always keeps one
/// linker per engine.
fn add_virtual_wasi(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    use super::virtual_wasi::HasVirt;
    use wasmtime_wasi::filesystem::{WasiFilesystem, WasiFilesystemView};
    use wasmtime_wasi::p2::bindings::{clocks, filesystem, random, sockets, sync};
    use wasmtime_wasi::sockets::{WasiSockets, WasiSocketsView};
    clocks::wall_clock::add_to_linker::<HostState, HasVirt>(linker, HostState::virt)?;
    clocks::monotonic_clock::add_to_linker::<HostState, HasVirt>(linker, HostState::virt)?;
    random::random::add_to_linker::<HostState, HasVirt>(linker, HostState::virt)?;
    random::insecure::add_to_linker::<HostState, HasVirt>(linker, HostState::virt)?;
    random::insecure_seed::add_to_linker::<HostState, HasVirt>(linker, HostState::virt)?;
    filesystem::preopens::add_to_linker::<HostState, HasVirt>(linker, HostState::virt)?;
    sockets::tcp_create_socket::add_to_linker::<HostState, HasVirt>(linker, HostState::virt)?;
    sync::sockets::udp_create_socket::add_to_linker::<HostState, HasVirt>(linker, HostState::virt)?;
    sockets::ip_name_lookup::add_to_linker::<HostState, HasVirt>(linker, HostState::virt)?;
    // Resource methods only: with no preopen and no socket creation, no
    // descriptor or socket can exist for them to act on.
    sync::filesystem::types::add_to_linker::<HostState, WasiFilesystem>(
        linker,
        HostState::filesystem,
    )?;
    sync::sockets::tcp::add_to_linker::<HostState, WasiSockets>(linker, HostState::sockets)?;
    sync::sockets::udp::add_to_linker::<HostState, WasiSockets>(linker, HostState::sockets)?;
    sockets::instance_network::add_to_linker::<HostState, WasiSockets>(linker, HostState::sockets)?;
    sockets::network::add_to_linker::<HostState, WasiSockets>(
        linker,
        &Default::default(),
        HostState::sockets,
    )?;
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
    /// The first import the minimal WASI profile does not grant, if any.
    beyond_minimal: Option<String>,
    pub(crate) limits: Limits,
    pub(crate) sandbox: Sandbox,
    /// Sees every hook call of this harness's episodes (conformance
    /// vectors); `None` costs nothing.
    pub(crate) recorder: Option<Arc<dyn HookRecorder>>,
}

impl LoadedHarness {
    /// The sandbox (engine, pool, epoch ticker) the harness was loaded into.
    pub fn sandbox(&self) -> &Sandbox {
        &self.sandbox
    }

    /// The limits episodes of this harness run under.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The same compiled harness under other per-call limits (fuel, deadline,
    /// memory, quotas), e.g. one tenant's. The wasm stack cap is the engine's
    /// and cannot change per harness; in a pooled sandbox the memory limit
    /// cannot exceed the pool's slot size either (it is clamped to it).
    pub fn with_limits(&self, limits: Limits) -> Result<LoadedHarness, SandboxError> {
        limits.validate()?;
        check_profile(limits.wasi, self.beyond_minimal.as_deref())?;
        let memory_bytes = match self.sandbox.allocation {
            Allocation::OnDemand => limits.memory_bytes,
            Allocation::Pooled { .. } => limits.memory_bytes.min(self.sandbox.limits.memory_bytes),
        };
        Ok(LoadedHarness {
            pre: self.pre.clone(),
            beyond_minimal: self.beyond_minimal.clone(),
            limits: Limits {
                max_wasm_stack: self.sandbox.limits.max_wasm_stack,
                memory_bytes,
                ..limits
            },
            sandbox: self.sandbox.clone(),
            recorder: self.recorder.clone(),
        })
    }

    /// The same harness with every hook call of its episodes reported to
    /// `recorder` (input, env-view calls with answers, output).
    pub fn with_recorder(&self, recorder: Arc<dyn HookRecorder>) -> LoadedHarness {
        LoadedHarness {
            recorder: Some(recorder),
            ..self.clone()
        }
    }
}
