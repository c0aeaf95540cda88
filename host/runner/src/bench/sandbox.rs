//! `ecdysis-host bench`: what the sandbox costs. Every number is printed next
//! to a baseline measured in the same run (machines here are noisy, so only
//! side-by-side ratios mean anything).

use std::hint::black_box;
use std::time::{Duration, Instant};

use wasmtime::component::Component;

use ecdysis_sandbox::doctor::sample_tools;
use ecdysis_sandbox::sandbox::{
    ActionDecision, AgentAction, EpisodeInfo, Limits, LoadedHarness, Sandbox, SandboxError,
    StaticEnv, ToolCall,
};

/// Measured numbers of one bench run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SandboxBenchReport {
    /// How many `realize` calls the hook-call medians were taken over.
    pub hook_calls: u64,
    /// Median time of one `realize` call through the sandbox (fuel and
    /// deadline re-armed per call), in nanoseconds.
    pub hook_call_ns: f64,
    /// Median time of the same pass-through logic called natively.
    pub native_call_ns: f64,
    /// How many episodes each instantiate and teardown median was taken over
    /// (pooled and on-demand alike).
    pub episodes: u64,
    /// Median time of `Store::new` + `InstancePre::instantiate` from the
    /// pooled engine the runner uses.
    pub instantiate_only_us: f64,
    /// Median time to start an episode (new store, instantiate via
    /// `InstancePre`, run the constructor) from the pooled engine.
    pub instantiate_us: f64,
    /// The same two numbers from an on-demand engine (an `mmap` per
    /// instance), measured interleaved with the pooled ones.
    pub on_demand_instantiate_only_us: f64,
    /// On-demand counterpart of `instantiate_us` (store, instantiate and
    /// constructor), in microseconds.
    pub on_demand_instantiate_us: f64,
    /// Median time to drop a finished episode (pooled: slot reset;
    /// on-demand: unmap), apart from the start.
    pub teardown_us: f64,
    /// On-demand counterpart of `teardown_us`, in microseconds.
    pub on_demand_teardown_us: f64,
    /// Median time to compile the component from its bytes.
    pub compile_ms: f64,
    /// Median time to load the precompiled artifact from disk.
    pub precompiled_load_us: f64,
}

impl SandboxBenchReport {
    /// The table `bench` prints: each number next to its baseline and their
    /// ratio.
    pub fn render(&self) -> String {
        let mut s = String::new();
        s += &format!(
            "hook call (realize, pass-through)  {:>10.0} ns   native {:>6.1} ns   ratio {:>8.1}x   ({} calls, median of batches)\n",
            self.hook_call_ns,
            self.native_call_ns,
            self.hook_call_ns / self.native_call_ns.max(0.01),
            self.hook_calls
        );
        s += &format!(
            "instantiate (Store + InstancePre)  {:>10.2} us   on-demand {:>7.2} us   ratio {:>5.2}x   ({} episodes each, median, pooled engine)\n",
            self.instantiate_only_us,
            self.on_demand_instantiate_only_us,
            self.on_demand_instantiate_only_us / self.instantiate_only_us.max(0.001),
            self.episodes
        );
        s += &format!(
            "episode start (+ constructor)      {:>10.2} us   on-demand {:>7.2} us   ratio {:>5.2}x\n",
            self.instantiate_us,
            self.on_demand_instantiate_us,
            self.on_demand_instantiate_us / self.instantiate_us.max(0.001)
        );
        s += &format!(
            "episode teardown (drop)            {:>10.2} us   on-demand {:>7.2} us   ratio {:>5.2}x\n",
            self.teardown_us,
            self.on_demand_teardown_us,
            self.on_demand_teardown_us / self.teardown_us.max(0.001)
        );
        s += &format!(
            "compile component                  {:>10.2} ms\nload precompiled artifact          {:>10.2} us   compile/load ratio {:.0}x\n",
            self.compile_ms,
            self.precompiled_load_us,
            self.compile_ms * 1000.0 / self.precompiled_load_us.max(0.001)
        );
        s
    }
}

#[derive(Default)]
struct Timings {
    start: Vec<f64>,
    teardown: Vec<f64>,
}

use ecdysis_sys::stats::median;

/// The native twin of the pass-through `realize`.
#[inline(never)]
fn native_realize(action: AgentAction) -> ActionDecision {
    match black_box(action) {
        AgentAction::Call(_) | AgentAction::Text(_) => ActionDecision::Proceed,
    }
}

/// Options of a bench run.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Hook calls to time (in batches of 100).
    pub hook_calls: u64,
    /// Episodes to instantiate.
    pub episodes: u64,
    /// Compilations to time.
    pub compiles: u32,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            hook_calls: 200_000,
            episodes: 5_000,
            compiles: 5,
        }
    }
}

/// Run the bench on a pass-through component given by its bytes. Hook calls
/// and compilation are measured on a pooled engine (the runner's); episode
/// starts on it and on an on-demand engine, in alternating batches so both
/// see the same machine noise.
pub fn run(
    limits: &Limits,
    bytes: &[u8],
    opts: &BenchOptions,
) -> Result<SandboxBenchReport, SandboxError> {
    const BATCH: u64 = 100;
    let sandbox = &Sandbox::pooled(limits.clone(), 1)?;
    let on_demand = Sandbox::new(limits.clone())?;
    let harness: LoadedHarness = sandbox.load_bytes(bytes)?;
    let harness_on_demand: LoadedHarness = on_demand.load_bytes(bytes)?;
    let tools = sample_tools();
    let info = EpisodeInfo {
        domain: "tau2/retail".into(),
        max_steps: 200,
        max_errors: 10,
    };
    let action = AgentAction::Call(ToolCall {
        id: "call_1".into(),
        name: "get_order_details".into(),
        arguments: r##"{"order_id":"#W0000001"}"##.into(),
    });

    let mut ep = harness.start_episode(&info, &tools, Box::new(StaticEnv::default()))?;
    let batches = (opts.hook_calls / BATCH).max(1);
    let mut wasm = Vec::with_capacity(batches as usize);
    let mut native = Vec::with_capacity(batches as usize);
    for _ in 0..batches {
        let t = Instant::now();
        for _ in 0..BATCH {
            black_box(ep.realize(black_box(&action))?);
        }
        wasm.push(t.elapsed().as_nanos() as f64 / BATCH as f64);
        let t = Instant::now();
        for _ in 0..BATCH {
            black_box(native_realize(black_box(action.clone())));
        }
        native.push(t.elapsed().as_nanos() as f64 / BATCH as f64);
    }
    drop(ep);

    // Start and teardown are timed apart: a pooled slot is reset when the
    // store drops, an on-demand memory is unmapped then.
    let start = |h: &LoadedHarness, out: &mut Timings| -> Result<(), SandboxError> {
        for _ in 0..BATCH {
            let t = Instant::now();
            let ep = h.start_episode(&info, &tools, Box::new(StaticEnv::default()))?;
            out.start.push(t.elapsed().as_nanos() as f64 / 1000.0);
            let t = Instant::now();
            drop(black_box(ep));
            out.teardown.push(t.elapsed().as_nanos() as f64 / 1000.0);
        }
        Ok(())
    };
    let bare_start = |h: &LoadedHarness, out: &mut Timings| -> Result<(), SandboxError> {
        for _ in 0..BATCH {
            let t = Instant::now();
            let inst = h.instantiate_only()?;
            out.start.push(t.elapsed().as_nanos() as f64 / 1000.0);
            let t = Instant::now();
            drop(black_box(inst));
            out.teardown.push(t.elapsed().as_nanos() as f64 / 1000.0);
        }
        Ok(())
    };
    let rounds = opts.episodes.div_ceil(BATCH).max(1);
    let (mut inst, mut inst_od, mut bare, mut bare_od) = Default::default();
    for _ in 0..rounds {
        start(&harness, &mut inst)?;
        start(&harness_on_demand, &mut inst_od)?;
        bare_start(&harness, &mut bare)?;
        bare_start(&harness_on_demand, &mut bare_od)?;
    }
    let (inst, inst_od, bare, bare_od): (Timings, Timings, Timings, Timings) =
        (inst, inst_od, bare, bare_od);

    let mut compile = Vec::new();
    for _ in 0..opts.compiles.max(1) {
        let t = Instant::now();
        black_box(sandbox.compile(bytes)?);
        compile.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let native_code = sandbox
        .engine()
        .precompile_component(bytes)
        .map_err(|e| SandboxError::Compile(format!("{e:#}")))?;
    let dir = std::env::temp_dir().join(format!("ecdysis-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| SandboxError::Engine(e.to_string()))?;
    let path = dir.join("bench.cwasm");
    std::fs::write(&path, &native_code).map_err(|e| SandboxError::Engine(e.to_string()))?;
    let mut load = Vec::new();
    for _ in 0..50 {
        let t = Instant::now();
        // SAFETY: the file was written just above by this engine's
        // `precompile_component`.
        let c = unsafe { Component::deserialize_file(sandbox.engine(), &path) }
            .map_err(|e| SandboxError::Compile(format!("{e:#}")))?;
        load.push(t.elapsed().as_nanos() as f64 / 1000.0);
        drop(black_box(c));
    }
    let _ = std::fs::remove_dir_all(&dir);

    Ok(SandboxBenchReport {
        hook_calls: batches * BATCH,
        hook_call_ns: median(wasm),
        native_call_ns: median(native),
        episodes: rounds * BATCH,
        instantiate_only_us: median(bare.start),
        instantiate_us: median(inst.start),
        teardown_us: median(inst.teardown),
        on_demand_instantiate_only_us: median(bare_od.start),
        on_demand_instantiate_us: median(inst_od.start),
        on_demand_teardown_us: median(inst_od.teardown),
        compile_ms: median(compile),
        precompiled_load_us: median(load),
    })
}

/// Elapsed as fractional milliseconds, for progress output.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
