//! `ecdysis-host`: the command-line face of the library. Every subcommand is
//! a thin layer over a library call; errors become `anyhow` only here.

/// mimalloc instead of glibc's malloc (a common choice for Rust servers with
/// many short-lived allocations): an evaluation allocates and frees an
/// episode's transcript, record and state every few milliseconds from
/// several threads, where glibc's allocator showed up under `perf` (the
/// measurement is in CHANGELOG.md). mimalloc 3 gives freed memory back only
/// after a second of disuse, so the next episode reuses an episode's pages.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};

mod cli;

use cli::limits::LimitArgs;

use ecdysis_sandbox::doctor;
use ecdysis_sandbox::sandbox::{Limits, Sandbox};
use ecdysis_sandbox::store::{BuildOptions, ComponentHash, ComponentStore};

/// Train, check and run sandboxed WebAssembly runtime harnesses for LLM agents.
///
/// A harness is a WebAssembly component of the `ecdysis:harness@0.1.0` world
/// (see wit/harness.wit). Components are stored by the blake3 hash of their
/// bytes; anywhere a harness is expected you may pass a guest crate directory
/// (one holding a Cargo.toml, built on the spot), a .wasm file, or a stored
/// hash: a unique prefix of at least 12 hex digits, or of 6 when typed at a
/// terminal (stdin is a TTY; scripts and pipes need 12). A name that is both
/// an existing path and a stored hash prefix is refused: write ./NAME for
/// the path.
#[derive(Parser)]
#[command(name = "ecdysis-host", version, propagate_version = true)]
struct Cli {
    /// The component store directory.
    #[arg(
        long,
        global = true,
        env = "ECDYSIS_STORE",
        default_value = ".ecdysis/store"
    )]
    store: PathBuf,
    /// More log output (repeat for more); logs go to stderr.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// No progress output; results only.
    #[arg(short, long, global = true)]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

/// The flag of commands that accept components. Each command flattens only
/// the flag groups it uses, so its `--help` lists only flags that apply
/// (as cargo does per subcommand), while `--store`, `-v` and `-q` stay global.
#[derive(Args)]
struct ComponentArgs {
    /// Largest component (.wasm) accepted, in MiB.
    #[arg(long, default_value_t = 32)]
    max_component_mib: usize,
    /// Keep compiled native code (precompiled/ and fncache/) in this
    /// directory instead of the store's, so stores that name the same one
    /// compile each component once between them; Rust harness builds are
    /// kept there too (builds/), so a source another store built (with a
    /// Cargo.lock, the same compiler, profile and features) is not
    /// compiled again. Entries are checked against this user's artifact
    /// key before they are used, as the store's own are.
    #[arg(long, env = ecdysis_sandbox::store::NATIVE_CACHE_ENV, value_name = "DIR")]
    native_cache: Option<PathBuf>,
}

/// The flag of commands that run episodes.
#[derive(Args)]
struct RuntimeArgs {
    /// Threads of the async runtime that runs episodes (hooks and tool calls
    /// run on them too). Default: one for `run` and `bench --runner` when
    /// the agent waits on a model (an endpoint, or `sim:` with a latency):
    /// an episode's work between two replies is short, and a second thread
    /// would cost a cross-CPU wake-up per reply. One per core otherwise: a
    /// zero-latency `sim:` run is bound by the host's own work, and the
    /// other commands keep Tokio's default.
    #[arg(long, env = "ECDYSIS_THREADS", value_parser = clap::value_parser!(u16).range(1..=1024))]
    threads: Option<u16>,
}

/// A command that evaluates harnesses on a domain: its own flags, then the
/// component, data and runtime flags.
#[derive(Args)]
struct Episodes<T: Args> {
    #[command(flatten)]
    args: T,
    #[command(flatten)]
    components: ComponentArgs,
    #[command(flatten)]
    data: cli::env::DataArgs,
    #[command(flatten)]
    runtime: RuntimeArgs,
}

/// The service's commands: their own flags, the data and runtime flags.
#[derive(Args)]
struct Service<T: Args> {
    #[command(flatten)]
    args: T,
    #[command(flatten)]
    data: cli::env::DataArgs,
    #[command(flatten)]
    runtime: RuntimeArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Build a guest crate to a component and add it to the store.
    ///
    /// Runs `cargo build --target wasm32-wasip2 --release` for the crate,
    /// hashes the component with blake3 and stores it with a manifest (world
    /// version, size, parent, source-tree hash, toolchain, time). Prints the
    /// hash on stdout.
    Build {
        #[command(flatten)]
        args: BuildArgs,
        #[command(flatten)]
        components: ComponentArgs,
    },
    /// Show a component's world version, imports, exports, hash, size and
    /// manifest.
    Inspect {
        /// A .wasm file, a stored hash or a guest crate directory.
        harness: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        components: ComponentArgs,
    },
    /// The doctor: instantiate a harness and call every hook with
    /// representative inputs, printing fuel, time and any contract violation
    /// per hook. Exits non-zero if any hook fails.
    Check {
        /// A .wasm file, a stored hash or a guest crate directory.
        harness: String,
        #[command(flatten)]
        limits: LimitArgs,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        components: ComponentArgs,
    },
    /// Measure the sandbox's overhead: per-hook call time, episode
    /// instantiation, compile vs precompiled load, each against a native
    /// baseline measured in the same run (or, with a flag, the runner, the
    /// environments, `calculate`, coder replies, the racing gate, or what
    /// the proxy adds to a request).
    Bench(Box<Episodes<cli::bench::BenchArgs>>),
    /// Run tool calls on the native τ² environments, or replay gold actions.
    Env {
        #[command(subcommand)]
        command: cli::env::EnvCommand,
        #[command(flatten)]
        data: cli::env::DataArgs,
    },
    /// List a domain's tasks (the part the agent may see).
    Tasks {
        /// Domain, e.g. tau2/retail.
        #[arg(long)]
        domain: String,
        /// Split: train, test or base (default: all tasks).
        #[arg(long)]
        split: Option<String>,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        data: cli::env::DataArgs,
    },
    /// Run an agent with a harness on benchmark tasks and score it.
    ///
    /// Writes config.json, trajectories.jsonl (one finished episode per
    /// line) and summary.json to the result directory and prints the metrics
    /// table. Re-running the same command resumes: finished episodes are not
    /// run again. The defaults run offline: the starting harness, a simulated
    /// testbed agent (sim:mixed) and the scripted user on tau2/retail test.
    Run(Box<Episodes<WithReport<cli::run::RunArgs>>>),
    /// Evolve a harness on the training split: evaluate, aggregate failures
    /// across tasks, diagnose, edit the harness source once per round, build,
    /// gate, and keep a candidate only if it strictly beats the incumbent.
    /// Without role flags it runs offline: the heuristic diagnoser and the
    /// rule coder. With --fdcr-model (or --analyst-model ...) the FDCR roles
    /// diagnose, and --coder-model (built-in editor) or --coder-command (an
    /// external coding agent) edits. Re-running the same command resumes;
    /// ledger.json and summary.json report tokens and dollars per role.
    Train(Box<Episodes<WithReport<cli::train::TrainArgs>>>),
    /// Run the three evolution methods from the same starting harness on
    /// the offline testbed and print the comparison: training wall time,
    /// coder calls, train and test accuracy, the accommodation rate (accepted
    /// edits that only answer model-specific quirks, from the testbed's
    /// ground truth), and cross-model transfer.
    Experiment(Box<Episodes<WithReport<cli::experiment::ExperimentArgs>>>),
    /// Which of a harness's layers help: each switched off in turn, and the
    /// subset the data favours.
    ///
    /// Evaluates the harness with each of its four layers (contract,
    /// skills, realize, regulate) switched off in turn, compares
    /// each variant with the full harness on the same tasks and trials
    /// (difference with its 95% interval, paired sign-flip p), and chooses
    /// the subset the data favours: a layer is dropped when the harness
    /// scored strictly higher without it. Writes one run directory per
    /// variant and ablation.json; `export --layers` carries a choice to
    /// other runtimes. Re-running resumes.
    Ablate(Box<Episodes<cli::ablate::AblateArgs>>),
    /// Write one self-contained HTML page (works offline, charts inline)
    /// for run, training or experiment directories: scores with 95%
    /// intervals, the reward grid, interventions, fuel and time, the
    /// trajectory viewer with filters; rounds, lineage, diffs and the FDCR
    /// discussion of training; methods side by side for an experiment.
    /// Several directories are compared side by side.
    Report(cli::report::ReportArgs),
    /// The failures of run, training or experiment directories, grouped
    /// by mechanism: how each failing episode finished relative to its
    /// last calls (in the same reply as a query whose result it never saw,
    /// right after an error, after reading results, never, without any
    /// call), then by the class of its last result with the domain's codes
    /// kept (MySQL's `1064`, an OS command's limit). Each group has a label
    /// naming the harness layer a fix would live in (a rule missing, wrong
    /// or ignored in contract, skills, realize or regulate), its tasks and
    /// one excerpt, reply by reply. Recurring groups (two or more tasks)
    /// come first. A damaged trajectories line is named (file and line) and
    /// skipped (past ten in a file, the rest are counted), and the status is
    /// then non-zero; the rest is still shown.
    Failures(cli::failures::FailuresArgs),
    /// Experiment tracking in MLflow: `mlflow sync DIR...` sends what the
    /// server lacks of result directories (see --mlflow of run, train and
    /// experiment).
    Mlflow {
        #[command(subcommand)]
        command: cli::track::MlflowCommand,
    },
    /// Export a harness for another runtime (Python, JavaScript): writes
    /// harness.wasm and harness.json (blake3 hash, world version, lineage,
    /// limits, training scores when --train-run is given), and optionally an
    /// OCI image layout with the Wasm component media types.
    Export {
        #[command(flatten)]
        args: Box<cli::export::ExportArgs>,
        #[command(flatten)]
        components: ComponentArgs,
    },
    /// Record conformance vectors: re-run a run directory's configuration
    /// (a `sim:` agent and the scripted user, so it is deterministic) with a
    /// recorder on the harness, and write every hook call (input, env-view
    /// calls with their answers, output, in canonical JSON) as JSON lines.
    /// Other runtimes replay the file and must answer byte for byte alike.
    /// With the run's own harness it also checks that the re-run reproduces
    /// the recorded trajectories.
    Vectors(Box<Episodes<cli::vectors::VectorsArgs>>),
    /// The multi-tenant evaluation service: tenants upload harness
    /// components and evaluate them over HTTP + JSON (OpenAPI at
    /// /v1/openapi.json), isolated in worker processes, metered by quotas
    /// and audited. SQLite by default; Postgres for several machines.
    Serve(Box<Service<cli::serve::ServeArgs>>),
    /// A harness in front of any agent's model: an OpenAI-compatible
    /// endpoint (POST /v1/chat/completions, GET /v1/models) that runs the
    /// harness between the client and --upstream. Point an agent's base URL
    /// at it. One harness episode per conversation (its system prompt and
    /// first user message, or the x-ecdysis-conversation header), rebuilt by
    /// replaying the hooks over the request's history when it is not warm:
    /// the contract's prompt and tool descriptions, skills and regulation's
    /// notes go to the upstream only, never into the client's history; every
    /// reply goes through realize (blocked: asked again upstream, at most
    /// --max-retries times; a call written as text: returned as a structured
    /// call). With "stream": true the upstream is asked without streaming,
    /// and the whole realized reply is sent as server-sent events once it is
    /// complete. No environment is attached (the harness's env view answers
    /// that none is) unless --env-mirror grants a mirror of --domain's.
    /// Every upstream completion goes into a usage ledger (GET
    /// /ecdysis/usage), priced with --prices, under --max-usd. Errors are
    /// OpenAI-style JSON: 400 naming the field, 413 too large, 429 busy or
    /// over the spending limit, 502/504 for the upstream.
    Proxy {
        #[command(flatten)]
        args: Box<cli::proxy::ProxyArgs>,
        #[command(flatten)]
        components: ComponentArgs,
    },
    /// Claim and run the service's episodes from its shared database (for
    /// more machines: `worker --database postgres://…`).
    Worker(Box<Service<cli::serve::WorkerArgs>>),
    /// The service's tenants: add (prints the token once), list,
    /// set-quota, revoke.
    #[command(subcommand)]
    Tenant(cli::serve::TenantCommand),
    /// The service's audit log: verify the hash chain, or show it.
    #[command(subcommand)]
    Audit(cli::serve::AuditCommand),
    /// A worker process of `--isolate process` (internal: started by
    /// `run`, `train` and `serve`, it speaks JSON lines on stdin/stdout).
    #[command(name = "episode-worker", hide = true)]
    EpisodeWorker,
    /// (Internal) compile one component to native code for the parent
    /// process, which runs this under time and memory limits so untrusted
    /// bytes never compile inside the serving process.
    #[command(hide = true)]
    CompileComponent {
        /// The component file.
        #[arg(long)]
        input: PathBuf,
        /// Where to write the native code.
        #[arg(long)]
        output: PathBuf,
        /// The engine's limits, as JSON.
        #[arg(long)]
        limits: String,
        /// The per-function compilation cache directory (with --key-file).
        #[arg(long, requires = "key_file")]
        fn_cache: Option<PathBuf>,
        /// The artifact key file the cache entries' MACs derive from.
        #[arg(long, requires = "fn_cache")]
        key_file: Option<PathBuf>,
    },
    /// Show a run: its summary and episodes, or one trajectory with the
    /// harness interventions marked `>>`. Also a proxy's records directory
    /// (`proxy --records DIR`): its conversations, or one conversation's
    /// requests and hook calls.
    Show {
        /// The result directory (a run, or a proxy's records).
        dir: PathBuf,
        /// Show this task's trajectory (in a proxy's records: the
        /// conversation with this id, or a unique prefix of it).
        #[arg(long)]
        task: Option<String>,
        /// The trial to show (default 0).
        #[arg(long)]
        trial: Option<u32>,
    },
}

/// A command's flags plus `--report`.
#[derive(Args)]
struct WithReport<T: Args> {
    #[command(flatten)]
    args: T,
    /// At the end, also write the HTML report (as `ecdysis-host report`
    /// would) into the result directory and print its path.
    #[arg(long)]
    report: bool,
    #[command(flatten)]
    track: cli::track::TrackArgs,
}

/// Write `<dir>/report.html` when asked (or when it goes to MLflow) and
/// print its path; then send the directory to MLflow when asked.
fn at_end(
    rt: &tokio::runtime::Runtime,
    wanted: bool,
    track: &cli::track::TrackArgs,
    dir: PathBuf,
) -> Result<()> {
    // The page goes to MLflow too: written unless it is newer than the
    // summary (a run writes its own).
    let stale = || {
        let modified = |f: &str| {
            std::fs::metadata(dir.join(f))
                .and_then(|m| m.modified())
                .ok()
        };
        modified("report.html") < modified("summary.json")
    };
    if wanted || (track.mlflow.is_some() && stale()) {
        let path =
            cli::report::write_report(std::slice::from_ref(&dir), None, &Default::default())?;
        println!("report: {}", path.display());
    }
    rt.block_on(cli::track::track_at_end(track, &dir));
    Ok(())
}

#[derive(Args)]
struct BuildArgs {
    /// The guest crate directory (it must build a cdylib for wasm32-wasip2).
    crate_dir: PathBuf,
    /// Cargo features to enable (comma-separated or repeated).
    #[arg(long, value_delimiter = ',')]
    features: Vec<String>,
    /// The hash of the component this one derives from (recorded as parent).
    #[arg(long)]
    parent: Option<String>,
    /// Cargo target directory (default: $ECDYSIS_CARGO_TARGET_DIR if set,
    /// else the crate's own target/).
    #[arg(long)]
    target_dir: Option<PathBuf>,
}

fn main() -> ExitCode {
    // Inside a coder's jail: forward its endpoints, run it (see `egress`).
    if let Some(code) = ecdysis_sys::egress::forwarder_main() {
        return code;
    }
    let cli = Cli::parse();
    if matches!(cli.command, Command::EpisodeWorker) {
        // Logs go to stderr, which the parent keeps the tail of; stdout is
        // the protocol.
        tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_env("ECDYSIS_LOG")
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
            )
            .with_writer(std::io::stderr)
            .init();
        return ExitCode::from(
            ecdysis_runner::isolate::child::serve(&ecdysis_domains::Registry) as u8,
        );
    }
    let level = match (cli.quiet, cli.verbose) {
        (true, _) => "error",
        (false, 0) => "warn",
        (false, 1) => "info",
        (false, _) => "debug",
    };
    cli::logging::init(cli.quiet, level);
    match dispatch(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", cli::error_text::render(&e));
            ExitCode::FAILURE
        }
    }
}

fn dispatch(cli: Cli) -> Result<ExitCode> {
    let quiet = cli.quiet;
    // Any component the CLI is handed may be untrusted: it is compiled by a
    // child process of this binary, under time and memory limits.
    let store = |c: &ComponentArgs| open_store(&cli.store, c);
    match cli.command {
        Command::CompileComponent {
            input,
            output,
            limits,
            fn_cache,
            key_file,
        } => compile_component(&input, &output, &limits, fn_cache, key_file),
        Command::Build { args, components } => build(&store(&components)?, args, quiet),
        Command::Inspect {
            harness,
            json,
            components,
        } => inspect(&store(&components)?, &harness, json, quiet),
        Command::Check {
            harness,
            limits,
            json,
            components,
        } => check(
            &store(&components)?,
            &harness,
            limits.limits()?,
            json,
            quiet,
        ),
        Command::Bench(cmd) => {
            let Episodes {
                args,
                components,
                data,
                runtime,
            } = *cmd;
            // The proxy bench's client, proxies and upstream share the
            // runtime: one worker per core, as `proxy` serves.
            let waits = args.latency_ms > 0 && !args.proxy;
            cli::bench::bench_command(args, &store(&components)?, &data, quiet, || {
                runtime_with(runtime.threads, waits)
            })
        }
        Command::Env { command, data } => {
            cli::env::env_command(command, &data)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Tasks {
            domain,
            split,
            json,
            data,
        } => {
            cli::env::tasks_command(&domain, split.as_deref(), json, &data)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Run(cmd) => run(*cmd, &cli.store, quiet),
        Command::Train(cmd) => train(*cmd, &cli.store, quiet),
        Command::Experiment(cmd) => experiment(*cmd, &cli.store),
        Command::Report(args) => {
            cli::report::report_command(args)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Failures(args) => Ok(if cli::failures::failures_command(args)? {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }),
        Command::Mlflow { command } => {
            let rt = runtime_with(None, false)?;
            Ok(if rt.block_on(cli::track::mlflow_command(command))? {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Export { args, components } => {
            cli::export::export(*args, &store(&components)?, quiet)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Ablate(cmd) => ablate(*cmd, &cli.store, quiet),
        Command::Vectors(cmd) => vectors(*cmd, &cli.store, quiet),
        Command::EpisodeWorker => unreachable!("handled before dispatch"),
        Command::Serve(cmd) => {
            let Service {
                args,
                data,
                runtime,
            } = *cmd;
            let rt = runtime_with(runtime.threads, false)?;
            rt.block_on(cli::serve::serve(args, &data, quiet))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Proxy { args, components } => {
            let rt = runtime_with(None, false)?;
            rt.block_on(cli::proxy::proxy(*args, &store(&components)?, quiet))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Worker(cmd) => {
            let Service {
                args,
                data,
                runtime,
            } = *cmd;
            let rt = runtime_with(runtime.threads, false)?;
            rt.block_on(cli::serve::worker(args, &data, quiet))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Tenant(cmd) => {
            let rt = runtime_with(None, false)?;
            rt.block_on(cli::serve::tenant(cmd))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Audit(cmd) => {
            let rt = runtime_with(None, false)?;
            let ok = rt.block_on(cli::serve::audit(cmd))?;
            Ok(if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Show { dir, task, trial } => {
            if ecdysis_proxy::records::is_records_dir(&dir) {
                cli::proxy::show_records(&dir, task.as_deref())?;
                return Ok(ExitCode::SUCCESS);
            }
            cli::run::show(&dir, task.as_deref(), trial)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `run`: the evaluation, its summary printed, then the report and the
/// tracking of its output directory.
fn run(
    cmd: Episodes<WithReport<cli::run::RunArgs>>,
    store_dir: &Path,
    quiet: bool,
) -> Result<ExitCode> {
    let Episodes {
        args: WithReport {
            args,
            report,
            track,
        },
        components,
        data,
        runtime,
    } = cmd;
    let out = args.out.clone();
    let waits = args.eval.waits_on_model();
    let rt = runtime_with(runtime.threads, waits)?;
    let store = open_store(store_dir, &components)?;
    let summary = rt.block_on(cli::run::run(args, &store, &data, quiet))?;
    print!("{}", ecdysis_runner::eval::report::render(&summary));
    let c = &summary.config;
    let out = out.unwrap_or_else(|| {
        cli::run::default_out(
            &c.settings.domain,
            c.settings.split.as_deref().unwrap_or("all"),
            c.harness.as_ref(),
            &c.agent_model,
        )
    });
    at_end(&rt, report, &track, out)?;
    Ok(ExitCode::SUCCESS)
}

/// `train`: the training run, synced live to the tracker, its summary
/// printed, then the report and the last sync.
fn train(
    cmd: Episodes<WithReport<cli::train::TrainArgs>>,
    store_dir: &Path,
    quiet: bool,
) -> Result<ExitCode> {
    let Episodes {
        args: WithReport {
            args,
            report,
            track,
        },
        components,
        data,
        runtime,
    } = cmd;
    let out = match &args.out {
        Some(o) => o.clone(),
        None => cli::train::default_out(&args.spec()?),
    };
    let rt = runtime_with(runtime.threads, false)?;
    let live = cli::track::LiveSync::start(&rt, &track, &out);
    let store = open_store(store_dir, &components)?;
    let summary = rt.block_on(cli::train::train(args, &store, &data, quiet));
    rt.block_on(live.finish());
    let summary = summary?;
    print!("{}", summary.render());
    at_end(&rt, report, &track, out)?;
    Ok(ExitCode::SUCCESS)
}

/// `experiment`: the experiment, synced live to the tracker, then the
/// report and the last sync.
fn experiment(
    cmd: Episodes<WithReport<cli::experiment::ExperimentArgs>>,
    store_dir: &Path,
) -> Result<ExitCode> {
    let Episodes {
        args: WithReport {
            args,
            report,
            track,
        },
        components,
        data,
        runtime,
    } = cmd;
    let out = args.out.clone();
    let rt = runtime_with(runtime.threads, false)?;
    let live = cli::track::LiveSync::start(&rt, &track, &out);
    let store = open_store(store_dir, &components)?;
    let done = rt.block_on(cli::experiment::experiment(args, &store, &data));
    rt.block_on(live.finish());
    done?;
    at_end(&rt, report, &track, out)?;
    Ok(ExitCode::SUCCESS)
}

/// `ablate`: the ablation, its table printed.
fn ablate(
    cmd: Episodes<cli::ablate::AblateArgs>,
    store_dir: &Path,
    quiet: bool,
) -> Result<ExitCode> {
    let Episodes {
        args,
        components,
        data,
        runtime,
    } = cmd;
    let rt = runtime_with(runtime.threads, args.eval.waits_on_model())?;
    let store = open_store(store_dir, &components)?;
    let file = rt.block_on(cli::ablate::ablate(args, &store, &data, quiet))?;
    print!("{}", file.render());
    Ok(ExitCode::SUCCESS)
}

/// `vectors`: the conformance vectors.
fn vectors(
    cmd: Episodes<cli::vectors::VectorsArgs>,
    store_dir: &Path,
    quiet: bool,
) -> Result<ExitCode> {
    let Episodes {
        args,
        components,
        data,
        runtime,
    } = cmd;
    let rt = runtime_with(runtime.threads, false)?;
    let store = open_store(store_dir, &components)?;
    rt.block_on(cli::vectors::vectors(args, &store, &data, quiet))?;
    Ok(ExitCode::SUCCESS)
}

/// The component store at `dir`, compiling untrusted bytes in a child of
/// this binary and refusing components over `--max-component-mib`.
fn open_store(dir: &Path, c: &ComponentArgs) -> Result<ComponentStore> {
    // Short hash prefixes only for a person at a terminal (see --help).
    let min_prefix = if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        ecdysis_sandbox::store::MIN_PREFIX_INTERACTIVE
    } else {
        ecdysis_sandbox::store::MIN_PREFIX
    };
    let mut store = ComponentStore::open(dir);
    if let Some(native) = &c.native_cache {
        store = store.with_native_cache(native);
    }
    Ok(store
        .with_compiler(
            ecdysis_sandbox::store::Compiler::child_of_current_exe()
                .context("locating this executable for the compiler process")?,
        )
        .with_max_component_bytes(c.max_component_mib.saturating_mul(1 << 20))
        .with_min_prefix(min_prefix))
}

/// The async runtime of a command that needs one: `threads` workers if
/// given, else one when the command's episodes wait on a model (see
/// `--threads`), else one per core (Tokio's default).
fn runtime_with(threads: Option<u16>, waits_on_model: bool) -> Result<tokio::runtime::Runtime> {
    let threads = match (threads, waits_on_model) {
        (Some(n), _) => Some(usize::from(n)),
        (None, true) => Some(1),
        (None, false) => None,
    };
    let mut builder = match threads {
        // One thread: the command's own (Tokio's current-thread runtime),
        // so a reply, the episode it wakes and the run loop that starts the
        // next episode never cross threads.
        Some(1) => tokio::runtime::Builder::new_current_thread(),
        Some(n) => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(n);
            b
        }
        None => tokio::runtime::Builder::new_multi_thread(),
    };
    builder.enable_all();
    builder.build().context("starting the async runtime")
}

/// `compile-component`: the compile child's side (see `store::Compiler`).
fn compile_component(
    input: &Path,
    output: &Path,
    limits: &str,
    fn_cache: Option<PathBuf>,
    key_file: Option<PathBuf>,
) -> Result<ExitCode> {
    let limits: Limits = serde_json::from_str(limits).context("--limits is not a limits object")?;
    let cache = fn_cache
        .zip(key_file)
        .map(|(dir, key_file)| ecdysis_sandbox::store::ChildCache { dir, key_file });
    let counts = ecdysis_sandbox::store::artifact::compile_component_command(
        input,
        output,
        limits,
        cache.as_ref(),
    )?;
    // The parent reads the cache counts from the last stdout line.
    println!("{}", serde_json::to_string(&counts)?);
    Ok(ExitCode::SUCCESS)
}

/// `build`: build a guest crate and store the component.
fn build(store: &ComponentStore, args: BuildArgs, quiet: bool) -> Result<ExitCode> {
    let parent = match &args.parent {
        Some(p) => Some(
            ComponentHash::parse(p)
                .or_else(|| store.resolve(p).ok().map(|m| m.hash))
                .with_context(|| format!("--parent `{p}` is not a known hash"))?,
        ),
        None => None,
    };
    let opts = BuildOptions {
        features: args.features,
        parent,
        target_dir: args.target_dir,
        quiet,
        ..BuildOptions::default()
    };
    let out = store
        .build(&args.crate_dir, &opts)
        .with_context(|| format!("building {}", args.crate_dir.display()))?;
    if !quiet {
        eprintln!(
            "stored {} ({} bytes{}) in {}",
            out.manifest.hash.short(),
            out.manifest.size,
            if out.cargo_fresh { ", up to date" } else { "" },
            store.component_path(&out.manifest.hash).display()
        );
    }
    println!("{}", out.manifest.hash);
    Ok(ExitCode::SUCCESS)
}

/// `check`: call every hook with representative inputs.
fn check(
    store: &ComponentStore,
    harness: &str,
    limits: Limits,
    json: bool,
    quiet: bool,
) -> Result<ExitCode> {
    let manifest = store.obtain(harness, quiet)?;
    let sandbox = Sandbox::new(limits)?;
    let (loaded, _) = store.load(&sandbox, &manifest.hash)?;
    let report = doctor::check(&loaded);
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("check {} ({})", manifest.hash.short(), manifest.origin);
        print!("{}", report.render());
    }
    Ok(if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn inspect(store: &ComponentStore, spec: &str, json: bool, quiet: bool) -> Result<ExitCode> {
    let manifest = store.obtain(spec, quiet)?;
    let sandbox = Sandbox::new(Limits::default())?;
    let inspection = store.inspect(&sandbox, &manifest.hash)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&inspection)?);
    } else {
        print!("{}", inspection.render());
    }
    Ok(ExitCode::SUCCESS)
}
