//! `ecdysis-host bench`: what the sandbox costs. Every number is printed next
//! to a baseline measured in the same run (machines here are noisy, so only
//! side-by-side ratios mean anything).

use std::hint::black_box;
use std::time::{Duration, Instant};

use wasmtime::component::Component;

use crate::doctor::sample_tools;
use crate::sandbox::{
    ActionDecision, AgentAction, EpisodeInfo, LoadedHarness, Sandbox, SandboxError, StaticEnv,
    ToolCall,
};

/// Measured numbers of one bench run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BenchReport {
    pub hook_calls: u64,
    /// Median time of one `realize` call through the sandbox (fuel and
    /// deadline re-armed per call), in nanoseconds.
    pub hook_call_ns: f64,
    /// Median time of the same pass-through logic called natively.
    pub native_call_ns: f64,
    pub episodes: u64,
    /// Median time of `Store::new` + `InstancePre::instantiate`.
    pub instantiate_only_us: f64,
    /// Median time to start an episode: new store, instantiate via
    /// `InstancePre`, run the constructor.
    pub instantiate_us: f64,
    /// Median time to compile the component from its bytes.
    pub compile_ms: f64,
    /// Median time to load the precompiled artifact from disk.
    pub precompiled_load_us: f64,
}

impl BenchReport {
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
            "instantiate (Store + InstancePre)  {:>10.2} us   ({} episodes, median)\n",
            self.instantiate_only_us, self.episodes
        );
        s += &format!(
            "episode start (+ constructor)      {:>10.2} us\n",
            self.instantiate_us
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

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

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

/// Run the bench on a pass-through component given by its bytes.
pub fn run(
    sandbox: &Sandbox,
    bytes: &[u8],
    opts: &BenchOptions,
) -> Result<BenchReport, SandboxError> {
    const BATCH: u64 = 100;
    let harness: LoadedHarness = sandbox.load_bytes(bytes)?;
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

    let mut inst = Vec::with_capacity(opts.episodes as usize);
    for _ in 0..opts.episodes {
        let t = Instant::now();
        let ep = harness.start_episode(&info, &tools, Box::new(StaticEnv::default()))?;
        inst.push(t.elapsed().as_nanos() as f64 / 1000.0);
        drop(black_box(ep));
    }

    let mut bare = Vec::with_capacity(opts.episodes as usize);
    for _ in 0..opts.episodes {
        let t = Instant::now();
        harness.instantiate_only()?;
        bare.push(t.elapsed().as_nanos() as f64 / 1000.0);
    }

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

    Ok(BenchReport {
        hook_calls: batches * BATCH,
        hook_call_ns: median(wasm),
        native_call_ns: median(native),
        episodes: opts.episodes,
        instantiate_only_us: median(bare),
        instantiate_us: median(inst),
        compile_ms: median(compile),
        precompiled_load_us: median(load),
    })
}

/// Elapsed as fractional milliseconds, for progress output.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
