//! `run` and `show`: the evaluation runner from the command line.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::Args;

use ecdysis_env::Domain;
use ecdysis_model::{ModelHub, ModelId};
use ecdysis_runner::agent::{Entry, EpisodeRecord};
use ecdysis_runner::eval::{self, RunHarness, RunOptions, RunSpec, RunSummary, report, rundir};
use ecdysis_runner::isolate::{EpisodeJob, ProcessExecutor};
use ecdysis_sandbox::sandbox::Sandbox;
use ecdysis_sandbox::store::{ComponentHash, ComponentStore};

use super::env::DataArgs;
use super::eval_args::EvalArgs;
use super::harness_arg::HarnessArg;

/// Flags of `run`.
#[derive(Args)]
pub struct RunArgs {
    /// The harness: a guest crate directory (built now), a .wasm file, a
    /// stored hash, or `none` for the Direct baseline (same loop, no hooks).
    #[arg(long, default_value = "harness-template")]
    pub harness: HarnessArg,
    /// Task split: train, test or base (`all` for every task).
    #[arg(long, default_value = "test")]
    pub split: String,
    /// Result directory (default runs/<domain>-<split>-<harness>-<agent>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Start over when the result directory holds a run with another
    /// configuration (the old run is moved aside, not deleted).
    #[arg(long)]
    pub force_new: bool,
    #[command(flatten)]
    pub eval: EvalArgs,
}

/// The default agent of `run`: the mixed-quirk testbed profile.
pub const DEFAULT_AGENT: &str = "sim:mixed";

fn slug(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// The default result directory: runs/<domain>-<split>-<harness>-<agent>.
pub fn default_out(
    domain: &str,
    split: &str,
    harness: Option<&ComponentHash>,
    agent: &ModelId,
) -> PathBuf {
    let h = harness.map(ComponentHash::short).unwrap_or("direct");
    PathBuf::from("runs").join(slug(&format!("{domain}-{split}-{h}-{agent}")))
}

/// `run`: parse the flags into a [`RunSpec`], load the harness into the
/// process's one pooled sandbox, and run the library's evaluation.
pub async fn run(
    args: RunArgs,
    store: &ComponentStore,
    data: &DataArgs,
    quiet: bool,
) -> Result<RunSummary> {
    let split = (args.split != "all").then(|| args.split.clone());
    let mut spec = args.eval.spec(split, DEFAULT_AGENT)?;
    let concurrency = args.eval.run_concurrency();
    EvalArgs::lift_endpoint_limit(&mut spec, concurrency);
    // An exported harness brings the layers it was exported with.
    let source = match args.harness.component() {
        Some(named) => Some(match super::export::exported(named)? {
            Some((wasm, manifest)) => {
                if args.eval.layers.is_none() {
                    spec.settings.layers = manifest.layers;
                }
                wasm.to_string_lossy().into_owned()
            }
            None => named.to_string(),
        }),
        None => None,
    };
    let spec = args.eval.with_endpoint_cap(spec).await;
    let domain = data.open(&spec.settings.domain)?;
    let harness = match source {
        None => None,
        Some(source) => {
            let manifest = store
                .obtain(&source, quiet)
                .with_context(|| format!("loading harness `{}`", args.harness))?;
            let sandbox = Sandbox::pooled(spec.settings.limits.clone(), concurrency.most())?;
            let (loaded, _) = store.load(&sandbox, &manifest.hash)?;
            Some((manifest.hash, loaded))
        }
    };
    let out = args.out.clone().unwrap_or_else(|| {
        default_out(
            &spec.settings.domain,
            spec.split_label(),
            harness.as_ref().map(|(h, _)| h),
            &spec.agent_model(),
        )
    });
    if !quiet {
        let episodes = spec.task_ids(&*domain)?.len() as u64 * u64::from(spec.settings.trials);
        eprintln!("running {episodes} episodes into {}", out.display());
        if harness.is_some() && !spec.settings.layers.is_all() {
            eprintln!(
                "layers: {} (the others are switched off)",
                spec.settings.layers
            );
        }
        if spec.is_simulated() {
            eprintln!("{}", eval::SIMULATED_LABEL);
        }
        if let Some(max) = concurrency.auto_max() {
            eprintln!(
                "concurrency: auto, 1 to {max} episodes as the endpoint's throughput rises (--concurrency N fixes it)"
            );
        }
    }
    let services = args.eval.services()?;
    let hub = services.hub()?;
    let options = RunOptions {
        out,
        concurrency: concurrency.most(),
        adaptive: EvalArgs::adaptive(concurrency, &hub),
        force_new: args.force_new,
        progress: super::progress_display(quiet),
        max_requeues: args.eval.max_requeues,
    };
    execute(
        &args.eval,
        &spec,
        harness,
        domain,
        (store, data),
        &hub,
        options,
    )
    .await
}

/// Run `spec`'s episodes of `harness` (Direct when `None`) into
/// `options.out`: in this process, or in worker processes under
/// `--isolate process` (they load the harness from the store by hash and
/// open the domain from the same data flags).
pub async fn execute(
    eval_args: &EvalArgs,
    spec: &RunSpec,
    harness: Option<RunHarness>,
    domain: Arc<dyn Domain>,
    (store, data): (&ComponentStore, &DataArgs),
    hub: &ModelHub,
    options: RunOptions,
) -> Result<RunSummary> {
    let Some(pool) = eval_args.isolate.pool(options.concurrency)? else {
        return Ok(eval::run_spec(spec, harness, domain, hub, options).await?);
    };
    let hash = harness.map(|(h, _)| h);
    let job = EpisodeJob {
        spec: spec.clone(),
        harness: hash.clone(),
        store: std::path::absolute(store.root())?,
        native_cache: store.native_cache().map(std::path::absolute).transpose()?,
        source: data.source()?,
        services: eval_args.services()?,
        prices: None,
    };
    let executor = Arc::new(ProcessExecutor {
        pool,
        job: Arc::new(job),
        domain: domain.clone(),
        ledger: Some(hub.ledger().clone()),
    });
    Ok(eval::run_spec_with(
        spec,
        hash,
        domain,
        executor,
        Some(hub.ledger().clone()),
        options,
    )
    .await?)
}

/// `show <run-dir>`: the summary and episode list, or one trajectory.
pub fn show(dir: &Path, task: Option<&str>, trial: Option<u32>) -> Result<()> {
    if !dir.is_dir() {
        bail!("{} is not a directory", dir.display());
    }
    // A run being written has its config first; a typo'd path or another
    // kind of result directory has none of the three.
    let run_files = [
        rundir::CONFIG_FILE,
        rundir::TRAJECTORIES_FILE,
        rundir::SUMMARY_FILE,
    ];
    if !run_files.iter().any(|f| dir.join(f).exists()) {
        bail!(
            "{} is not a run directory (no {}): for a training or experiment directory use `ecdysis-host report` or `ecdysis-host failures`",
            dir.display(),
            run_files.join(", ")
        );
    }
    if task.is_none() && trial.is_some() {
        bail!("--trial selects a trial of the task given with --task");
    }
    // Read as `failures` reads it: each line on its own, a damaged one named
    // and skipped, the rest shown (a run not started yet has no file).
    let path = dir.join(rundir::TRAJECTORIES_FILE);
    let (records, problems) = if std::fs::symlink_metadata(&path).is_ok() {
        ecdysis_report::failures::read_episodes(&path)
    } else {
        (Vec::new(), Vec::new())
    };
    let damaged = || -> Result<()> {
        for p in &problems {
            eprintln!("error: {p}");
        }
        if problems.is_empty() {
            Ok(())
        } else {
            bail!(
                "{} could not be read whole (above); what parsed is shown",
                path.display()
            )
        }
    };
    let Some(task) = task else {
        let summary_path = dir.join(rundir::SUMMARY_FILE);
        match ecdysis_sys::fsutil::read_regular(&summary_path) {
            Ok(bytes) => {
                let summary: RunSummary = serde_json::from_slice(&bytes)
                    .with_context(|| format!("{} is not a run summary", summary_path.display()))?;
                print!("{}", report::render(&summary));
                if summary.metrics.episodes != records.len() as u64 {
                    println!(
                        "note: the summary counts {} episodes, but {} were read from {} (damaged or edited after the run finished)",
                        summary.metrics.episodes,
                        records.len(),
                        rundir::TRAJECTORIES_FILE
                    );
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                println!("(no summary.json yet: the run has not finished)");
            }
            Err(e) => {
                return Err(e).with_context(|| format!("reading {}", summary_path.display()));
            }
        }
        println!("\ntask      trial  reward  end              steps  interventions");
        for r in &records {
            println!(
                "{:<9} {:>5}  {:>6.2}  {:<16} {:>5}  {:>13}",
                r.task_id,
                r.trial,
                r.reward,
                r.end.as_str(),
                r.steps,
                r.interventions().count()
            );
        }
        return damaged();
    };
    let trial = trial.unwrap_or(0);
    let Some(r) = records
        .iter()
        .find(|r| r.task_id == task && r.trial == trial)
    else {
        damaged()?;
        bail!(
            "no finished episode for task {task} trial {trial} in {}",
            dir.display()
        );
    };
    print!("{}", render_episode(r));
    damaged()
}

/// `s` on one line (`⏎` for each line break), cut to `n` characters.
pub(crate) fn clip(s: &str, n: usize) -> String {
    ecdysis_sys::text::clip(&s.replace('\n', " ⏎ "), n)
}

/// A trajectory, readably: `>>` marks harness interventions.
pub fn render_episode(r: &EpisodeRecord) -> String {
    let mut out = format!(
        "task {} trial {} ({}) seed {}: reward {:.2}, ended {}{}; {} steps, {} tool errors, {} ms\n",
        r.task_id,
        r.trial,
        r.domain,
        r.seed,
        r.reward,
        r.end.as_str(),
        r.end_detail
            .as_deref()
            .map(|d| format!(" ({d})"))
            .unwrap_or_default(),
        r.steps,
        r.tool_errors,
        r.wall_ms
    );
    for e in &r.transcript {
        match e {
            Entry::System { text } => out += &format!("   [system] {}\n", clip(text, 160)),
            Entry::Agent {
                step,
                text,
                tool_calls,
                testbed,
                withheld,
            } => {
                if let Some(t) = text {
                    out += &format!("{step:>3} agent: {}\n", clip(t, 300));
                }
                if let Some(w) = withheld {
                    out += &format!(
                        "    >> not said to the user: {}\n",
                        match w {
                            ecdysis_runner::agent::Withheld::Realized =>
                                "realized into calls by the harness",
                            ecdysis_runner::agent::Withheld::Blocked => "held back by the harness",
                        }
                    );
                }
                for c in tool_calls {
                    out += &format!(
                        "{step:>3} agent calls {}({})\n",
                        c.name,
                        clip(&c.arguments, 200)
                    );
                }
                if let Some(note) = testbed
                    .as_ref()
                    .filter(|n| !n.quirks.is_empty() || !n.corrected.is_empty())
                {
                    let fired: Vec<String> = note
                        .quirks
                        .iter()
                        .map(|q| q.name.as_str().to_string())
                        .collect();
                    let fixed: Vec<String> = note
                        .corrected
                        .iter()
                        .map(|q| q.name.as_str().to_string())
                        .collect();
                    out += &format!(
                        "    (testbed: quirks fired [{}], corrected [{}])\n",
                        fired.join(", "),
                        fixed.join(", ")
                    );
                }
            }
            Entry::User { step, text } => out += &format!("{step:>3} user:  {}\n", clip(text, 300)),
            Entry::Tool {
                step,
                name,
                arguments,
                proposed,
                content,
                error,
                blocked,
                source,
                ..
            } => {
                let mark = if *blocked
                    || proposed.is_some()
                    || !matches!(
                        source,
                        ecdysis_runner::agent::CallSource::Model
                            | ecdysis_runner::agent::CallSource::User
                    ) {
                    ">>"
                } else {
                    "  "
                };
                if let Some(p) = proposed {
                    out += &format!(
                        ">>  harness rewrote {}({}) ->\n",
                        p.name,
                        clip(&p.arguments, 160)
                    );
                }
                out += &format!(
                    "{mark}{step:>2} tool {}({}) [{}] -> {}{}\n",
                    name,
                    clip(arguments, 160),
                    serde_json::to_value(source)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default(),
                    if *blocked {
                        "BLOCKED: "
                    } else if *error {
                        "ERROR: "
                    } else {
                        ""
                    },
                    clip(content, 200)
                );
            }
            Entry::Harness { step, hook, text } => {
                out += &format!(">>{step:>2} harness {hook}: {}\n", clip(text, 300));
            }
        }
    }
    let failures: Vec<_> = r.hooks.iter().filter(|h| h.error.is_some()).collect();
    for h in failures {
        if let Some(e) = &h.error {
            out += &format!(
                ">> hook {} failed at step {} ({}): {}\n",
                h.hook, h.step, e.kind, e.message
            );
        }
    }
    out
}
