//! `run` and `show`: the evaluation runner from the command line.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;

use ecdysis_host::agent::{Entry, EpisodeRecord};
use ecdysis_host::eval::participants::{AgentSide, StandardParticipants, UserSide};
use ecdysis_host::eval::{self, RunConfig, RunOptions, RunSummary, report, rundir};
use ecdysis_host::model::{
    CachePolicy, ModelFlags, ModelHub, PriceTable, ResponseCache, SamplingArgs, SimProfile,
    UsageLedger,
};
use ecdysis_host::sandbox::{FailurePolicy, Sandbox, WORLD_VERSION};
use ecdysis_host::store::ComponentStore;

use super::env::DataArgs;
use super::limits::LimitArgs;

/// Flags of `run`.
#[derive(Args)]
pub struct RunArgs {
    /// The harness: a guest crate directory (built now), a .wasm file, a
    /// stored hash, or `none` for the Direct baseline (same loop, no hooks).
    #[arg(long, default_value = "harness-template")]
    pub harness: String,
    /// Benchmark domain: tau2/retail, tau2/airline or agentbench/dbbench.
    #[arg(long, default_value = "tau2/retail")]
    pub domain: String,
    /// Task split: train, test or base (`all` for every task).
    #[arg(long, default_value = "test")]
    pub split: String,
    /// Only these task ids (comma-separated), in this order.
    #[arg(long, value_delimiter = ',')]
    pub tasks: Vec<String>,
    /// Trials per task (pass^k is reported for k up to this).
    #[arg(long, default_value_t = 1)]
    pub trials: u32,
    /// The agent model: an endpoint's model name, or a simulated testbed
    /// agent `sim:<profile>` (offline; follows the gold plan with injected
    /// quirks, never a benchmark result). Profiles:
    /// sim:oracle, sim:clumsy, sim:careless, sim:mixed, sim:texter.
    #[arg(long, default_value = "sim:mixed")]
    pub agent_model: String,
    /// Base URL of the agent's OpenAI-compatible endpoint (default
    /// $OPENAI_BASE_URL).
    #[arg(long)]
    pub agent_base_url: Option<String>,
    /// Environment variable holding the agent endpoint's API key (default
    /// OPENAI_API_KEY; empty for none).
    #[arg(long)]
    pub agent_api_key_env: Option<String>,
    /// Extra JSON object merged into every agent request body.
    #[arg(long)]
    pub agent_extra_args: Option<String>,
    /// Added latency per call of a simulated (`sim:`) agent, in
    /// milliseconds: models an endpoint's response time offline.
    #[arg(long, default_value_t = 0)]
    pub sim_latency_ms: u64,
    /// The user simulator: `scripted` (offline, deterministic, driven by the
    /// task's instructions) or an endpoint's model name.
    #[arg(long, default_value = "scripted")]
    pub user_model: String,
    /// Base URL of the user simulator's endpoint (default: the agent's).
    #[arg(long)]
    pub user_base_url: Option<String>,
    /// Episodes run at once.
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// Run seed; every episode's seed derives from it, the task and the trial.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Sampling temperature of the agent (default: the endpoint's).
    #[arg(long)]
    pub temperature: Option<f64>,
    /// Nucleus-sampling cut-off of the agent (default: the endpoint's).
    #[arg(long)]
    pub top_p: Option<f64>,
    /// Most tokens per agent reply (default: the endpoint's; small local
    /// models may otherwise ramble to the end of their context).
    #[arg(long)]
    pub max_tokens: Option<u32>,
    /// Result directory (default runs/<domain>-<split>-<harness>-<agent>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Start over when the result directory holds a run with another
    /// configuration (the old run is moved aside, not deleted).
    #[arg(long)]
    pub force_new: bool,
    /// Step cap per episode (message hops).
    #[arg(long, default_value_t = ecdysis_host::env::DEFAULT_MAX_STEPS)]
    pub max_steps: u32,
    /// Tool-error cap per episode.
    #[arg(long, default_value_t = ecdysis_host::env::DEFAULT_MAX_ERRORS)]
    pub max_errors: u32,
    /// What a failing hook does: fail-closed (the episode ends as
    /// harness_error) or fail-open (proceed as if it answered neutrally).
    #[arg(long, default_value = "fail-closed")]
    pub policy: FailurePolicy,
    #[command(flatten)]
    pub limits: LimitArgs,
    /// Response cache policy: read-write, read-only or off.
    #[arg(long, default_value = "read-write")]
    pub cache: String,
    /// Response cache directory.
    #[arg(long, default_value = ".ecdysis/cache")]
    pub cache_dir: PathBuf,
    /// A JSON price table (USD per million tokens per model) for the cost
    /// ledger.
    #[arg(long)]
    pub prices: Option<PathBuf>,
    /// Extra attempts for an episode whose endpoint kept failing.
    #[arg(long, default_value_t = 2)]
    pub max_requeues: u32,
}

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

pub async fn run(
    args: RunArgs,
    store: &ComponentStore,
    data: &DataArgs,
    quiet: bool,
) -> Result<RunSummary> {
    let domain = data.open(&args.domain)?;
    let split = (args.split != "all").then(|| args.split.clone());
    let visible = domain.tasks(split.as_deref())?;
    let tasks: Vec<String> = if args.tasks.is_empty() {
        visible.iter().map(|t| t.id.clone()).collect()
    } else {
        for t in &args.tasks {
            if !visible.iter().any(|v| &v.id == t) {
                bail!(
                    "task `{t}` is not in {} split {}",
                    args.domain,
                    split.as_deref().unwrap_or("all")
                );
            }
        }
        let mut seen = std::collections::BTreeSet::new();
        args.tasks
            .iter()
            .filter(|t| seen.insert(*t))
            .cloned()
            .collect()
    };
    if args.trials == 0 {
        bail!("--trials must be at least 1");
    }

    let limits = args.limits.limits()?;
    let (harness_hash, harness) = if args.harness == "none" {
        (None, None)
    } else {
        let manifest = store
            .obtain(&args.harness, quiet)
            .with_context(|| format!("loading harness `{}`", args.harness))?;
        let sandbox = Sandbox::pooled(limits.clone(), args.concurrency)?;
        let (loaded, _) = store.load(&sandbox, &manifest.hash)?;
        (Some(manifest.hash.to_string()), Some(loaded))
    };

    let (participants, ledger) = build_participants(&args, &*domain)?;

    let config = RunConfig {
        world: WORLD_VERSION.to_string(),
        harness: harness_hash.clone(),
        domain: args.domain.clone(),
        split: split.clone(),
        tasks,
        trials: args.trials,
        agent_model: args.agent_model.clone(),
        agent_base_url: args.agent_base_url.clone(),
        user_model: args.user_model.clone(),
        user_base_url: args.user_base_url.clone(),
        seed: args.seed,
        max_steps: args.max_steps,
        max_errors: args.max_errors,
        policy: args.policy,
        limits,
        sampling: SamplingArgs {
            temperature: args.temperature,
            top_p: args.top_p,
            max_tokens: args.max_tokens,
            ..SamplingArgs::default()
        },
    };
    let out = args.out.clone().unwrap_or_else(|| {
        let h = harness_hash
            .as_deref()
            .map(|h| &h[..12])
            .unwrap_or("direct");
        PathBuf::from("runs").join(slug(&format!(
            "{}-{}-{}-{}",
            args.domain,
            split.as_deref().unwrap_or("all"),
            h,
            args.agent_model
        )))
    });
    if !quiet {
        eprintln!(
            "running {} episodes into {}",
            config.tasks.len() as u64 * u64::from(config.trials),
            out.display()
        );
    }
    let options = RunOptions {
        out,
        concurrency: args.concurrency,
        force_new: args.force_new,
        quiet,
        silent: false,
        max_requeues: args.max_requeues,
    };
    Ok(eval::run(config, options, domain, harness, participants, Some(ledger)).await?)
}

/// The agent and user sides of a run from the flags, with the run's ledger.
pub fn build_participants(
    args: &RunArgs,
    domain: &dyn ecdysis_host::env::Domain,
) -> Result<(Arc<StandardParticipants>, Arc<UsageLedger>)> {
    let hub = build_hub(&args.cache, &args.cache_dir, args.prices.as_deref())?;
    let ledger = hub.ledger().clone();
    Ok((participants_on(args, domain, hub)?, ledger))
}

/// The run's shared model services: the usage ledger (with the embedded
/// price table plus `prices`), the response cache and the endpoint limiter.
pub fn build_hub(cache: &str, cache_dir: &Path, prices: Option<&Path>) -> Result<ModelHub> {
    let policy: CachePolicy = cache.parse().map_err(|e| anyhow::anyhow!("--cache: {e}"))?;
    let mut table = PriceTable::embedded_default();
    if let Some(p) = prices {
        table =
            table.merged(PriceTable::load(p).with_context(|| format!("--prices {}", p.display()))?);
    }
    let ledger = Arc::new(UsageLedger::new(table));
    let cache = Arc::new(ResponseCache::new(cache_dir, policy));
    Ok(ModelHub::new(ledger, cache))
}

/// The agent and user of a run, metered and cached through `hub`.
pub fn participants_on(
    args: &RunArgs,
    domain: &dyn ecdysis_host::env::Domain,
    hub: ModelHub,
) -> Result<Arc<StandardParticipants>> {
    let agent_flags = ModelFlags {
        model: Some(args.agent_model.clone()),
        base_url: args.agent_base_url.clone(),
        api_key_env: args.agent_api_key_env.clone(),
        extra_args: args.agent_extra_args.clone(),
        ..ModelFlags::default()
    };
    let agent = if args.agent_model.starts_with("sim:") {
        AgentSide::Sim(
            SimProfile::parse(&args.agent_model)
                .map_err(|e| anyhow::anyhow!("--agent-model: {e}\n{}", SimProfile::help_text()))?,
        )
    } else {
        AgentSide::Model(hub.http_model("agent", agent_flags.clone().resolve(None)?)?)
    };
    let user = if args.user_model == "scripted" {
        UserSide::Scripted
    } else {
        let flags = ModelFlags {
            model: Some(args.user_model.clone()),
            base_url: args.user_base_url.clone(),
            ..ModelFlags::default()
        }
        .or(&agent_flags);
        UserSide::Model(hub.http_model("user", flags.resolve(None)?)?)
    };
    let participants = Arc::new(StandardParticipants {
        agent,
        user,
        hub: Some(hub),
        sim_latency: Duration::from_millis(args.sim_latency_ms),
        base_prompt: domain.system_prompt(),
    });
    Ok(participants)
}

/// `show <run-dir>`: the summary and episode list, or one trajectory.
pub fn show(dir: &Path, task: Option<&str>, trial: Option<u32>) -> Result<()> {
    let records = rundir::read_trajectories(&dir.join(rundir::TRAJECTORIES_FILE), false)
        .with_context(|| format!("reading run directory {}", dir.display()))?;
    let Some(task) = task else {
        let summary_path = dir.join(rundir::SUMMARY_FILE);
        if let Ok(bytes) = std::fs::read(&summary_path) {
            let summary: RunSummary = serde_json::from_slice(&bytes)
                .with_context(|| format!("{} is not a run summary", summary_path.display()))?;
            print!("{}", report::render(&summary));
        } else {
            println!("(no summary.json yet: the run has not finished)");
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
        return Ok(());
    };
    let trial = trial.unwrap_or(0);
    let Some(r) = records
        .iter()
        .find(|r| r.task_id == task && r.trial == trial)
    else {
        bail!(
            "no finished episode for task {task} trial {trial} in {}",
            dir.display()
        );
    };
    print!("{}", render_episode(r));
    Ok(())
}

fn clip(s: &str, n: usize) -> String {
    let one_line = s.replace('\n', " ⏎ ");
    if one_line.chars().count() <= n {
        one_line
    } else {
        format!("{}…", one_line.chars().take(n).collect::<String>())
    }
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
            } => {
                if let Some(t) = text {
                    out += &format!("{step:>3} agent: {}\n", clip(t, 300));
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
                    || !matches!(source, ecdysis_host::agent::CallSource::Model)
                {
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

/// `bench --runner`: the host's share of wall time on a full split.
pub async fn bench_runner(
    harness: &str,
    latency_ms: u64,
    concurrency: usize,
    trials: u32,
    store: &ComponentStore,
    data: &DataArgs,
) -> Result<()> {
    let tmp = std::env::temp_dir().join(format!("ecdysis-bench-run-{}", std::process::id()));
    let args = RunArgs {
        harness: harness.to_string(),
        domain: "tau2/retail".into(),
        split: "test".into(),
        tasks: vec![],
        trials,
        agent_model: "sim:mixed".into(),
        agent_base_url: None,
        agent_api_key_env: None,
        agent_extra_args: None,
        sim_latency_ms: latency_ms,
        user_model: "scripted".into(),
        user_base_url: None,
        concurrency,
        seed: 0,
        temperature: None,
        top_p: None,
        max_tokens: None,
        out: Some(tmp.clone()),
        force_new: true,
        max_steps: ecdysis_host::env::DEFAULT_MAX_STEPS,
        max_errors: ecdysis_host::env::DEFAULT_MAX_ERRORS,
        policy: FailurePolicy::FailClosed,
        limits: LimitArgs::default(),
        cache: "off".into(),
        cache_dir: tmp.join("cache"),
        prices: None,
        max_requeues: 0,
    };
    // Build and load the harness first so the timed run is the run.
    if harness != "none" {
        store.obtain(harness, true)?;
    }
    let cpu_before = process_cpu_seconds();
    let summary = run(args, store, data, true).await?;
    let cpu = process_cpu_seconds().zip(cpu_before).map(|(a, b)| a - b);
    let records = rundir::read_trajectories(&tmp.join(rundir::TRAJECTORIES_FILE), false)?;
    let calls: Vec<u64> = records.iter().map(|r| r.agent_usage.calls).collect();
    let bound = ecdysis_host::eval::metrics::zero_overhead_bound(
        &calls,
        latency_ms as f64 / 1000.0,
        concurrency,
    );
    let wall = summary.wall_seconds;
    let slack = (wall - bound).max(0.0) / wall * 100.0;
    println!(
        "runner bench: tau2/retail test, {} episodes, sim:mixed at {latency_ms} ms/call, concurrency {concurrency}, harness {harness}",
        records.len()
    );
    println!(
        "wall {wall:.3} s   lower bound with a free host {bound:.3} s (slack {slack:.1}%: scheduling, not only host work)"
    );
    let wall_sum: f64 = records.iter().map(|r| r.wall_ms as f64).sum();
    let wait_sum: f64 = records.iter().map(|r| r.model_wait_ms).sum();
    println!(
        "episode view: {:.2}% of episode wall time is host work (harness + env + bookkeeping), the rest awaits the model",
        (wall_sum - wait_sum).max(0.0) / wall_sum.max(1e-9) * 100.0
    );
    match cpu {
        Some(cpu) => println!(
            "host CPU {cpu:.3} s = {:.2}% of wall time (harness + env + bookkeeping, all threads; goal <= 1%)",
            cpu / wall * 100.0
        ),
        None => println!("host CPU time: not available on this platform"),
    }
    let _ = std::fs::remove_dir_all(&tmp);
    Ok(())
}

/// CPU seconds (user + system, all threads) this process has used so far,
/// from /proc/self/stat (Linux).
fn process_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may contain spaces) start at
    // field 3; utime and stime are fields 14 and 15, in clock ticks.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    // USER_HZ is 100 on every Linux we run on.
    Some((utime + stime) / 100.0)
}
