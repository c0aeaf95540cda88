//! `train`: evolve a harness on the training split.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;

use ecdysis_host::eval::RunConfig;
use ecdysis_host::evolve::train::{self, Method, TrainConfig, TrainContext, TrainSummary};
use ecdysis_host::model::SamplingArgs;
use ecdysis_host::sandbox::{FailurePolicy, WORLD_VERSION};
use ecdysis_host::store::ComponentStore;

use super::env::DataArgs;
use super::run::{RunArgs, build_participants};

#[derive(Args)]
pub struct TrainArgs {
    /// Evolution method: ecdysis (aggregation + FDCR), ecdysis-nofdcr
    /// (aggregation, spec straight from the groups) or self-evolution (one
    /// edit per failure, the baseline).
    #[arg(long, value_enum, default_value = "ecdysis")]
    pub method: Method,
    /// The harness source crate to start from (copied, never edited).
    #[arg(long, default_value = "harness-template")]
    pub source: PathBuf,
    /// Rounds at most.
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// Episodes with reward below this are failures.
    #[arg(long, default_value_t = 1.0)]
    pub lambda: f64,
    /// Stop after this many rounds in a row without an accepted candidate.
    #[arg(long, default_value_t = 2)]
    pub plateau: u32,
    /// Budget: coder calls in all.
    #[arg(long)]
    pub max_coder_calls: Option<u32>,
    /// Budget: episodes in all (every evaluation counts).
    #[arg(long)]
    pub max_episodes: Option<u64>,
    /// Training split.
    #[arg(long, default_value = "train")]
    pub train_split: String,
    /// Held-out split evaluated once at the end (`none` to skip).
    #[arg(long, default_value = "test")]
    pub test_split: String,
    /// Start from the source's rule engine with its rule tables emptied
    /// (an evolution experiment's starting point).
    #[arg(long)]
    pub start_blank: bool,
    /// Simulated latency per coder call, in milliseconds (offline
    /// experiments).
    #[arg(long, default_value_t = 0)]
    pub coder_latency_ms: u64,
    /// Cargo target dir shared by candidate builds (default
    /// <store>/cargo-target).
    #[arg(long)]
    pub cargo_target_dir: Option<PathBuf>,
    /// Training run directory (default runs/train-<method>-<domain>-<agent>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub run: TrainRunArgs,
}

/// The evaluation settings of training (a subset of `run`'s flags).
#[derive(Args)]
pub struct TrainRunArgs {
    #[arg(long, default_value = "tau2/retail")]
    pub domain: String,
    /// Only these training task ids.
    #[arg(long, value_delimiter = ',')]
    pub tasks: Vec<String>,
    #[arg(long, default_value_t = 1)]
    pub trials: u32,
    /// The agent model (`sim:<profile>` runs offline).
    #[arg(long, default_value = "sim:clumsy")]
    pub agent_model: String,
    #[arg(long)]
    pub agent_base_url: Option<String>,
    #[arg(long, default_value = "scripted")]
    pub user_model: String,
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

pub async fn train(
    args: TrainArgs,
    store: &ComponentStore,
    data: &DataArgs,
    quiet: bool,
) -> Result<TrainSummary> {
    let domain = data.open(&args.run.domain)?;
    let train_tasks: Vec<String> = if args.run.tasks.is_empty() {
        domain
            .tasks(Some(&args.train_split))?
            .into_iter()
            .map(|t| t.id)
            .collect()
    } else {
        args.run.tasks.clone()
    };
    if train_tasks.is_empty() {
        bail!("no training tasks");
    }
    let test_split = (args.test_split != "none").then(|| args.test_split.clone());
    let test_tasks: Vec<String> = match &test_split {
        Some(s) => domain.tasks(Some(s))?.into_iter().map(|t| t.id).collect(),
        None => vec![],
    };
    // Reuse the runner's participant wiring.
    let run_args = RunArgs {
        harness: "none".into(),
        domain: args.run.domain.clone(),
        split: args.train_split.clone(),
        tasks: vec![],
        trials: args.run.trials,
        agent_model: args.run.agent_model.clone(),
        agent_base_url: args.run.agent_base_url.clone(),
        agent_api_key_env: None,
        agent_extra_args: None,
        sim_latency_ms: 0,
        user_model: args.run.user_model.clone(),
        user_base_url: None,
        concurrency: args.run.concurrency,
        seed: args.run.seed,
        temperature: None,
        out: None,
        force_new: false,
        max_steps: ecdysis_host::env::DEFAULT_MAX_STEPS,
        max_errors: ecdysis_host::env::DEFAULT_MAX_ERRORS,
        policy: FailurePolicy::FailClosed,
        fuel: None,
        deadline_ms: None,
        memory_mib: None,
        cache: "read-write".into(),
        cache_dir: PathBuf::from(".ecdysis/cache"),
        prices: None,
        max_requeues: 2,
    };
    let (participants, _ledger) = build_participants(&run_args, &*domain)?;
    let limits = ecdysis_host::sandbox::Limits::default();
    let config = TrainConfig {
        method: args.method,
        rounds: args.rounds,
        lambda: args.lambda,
        train: RunConfig {
            world: WORLD_VERSION.to_string(),
            harness: None,
            domain: args.run.domain.clone(),
            split: Some(args.train_split.clone()),
            tasks: train_tasks,
            trials: args.run.trials,
            agent_model: args.run.agent_model.clone(),
            agent_base_url: args.run.agent_base_url.clone(),
            user_model: args.run.user_model.clone(),
            user_base_url: None,
            seed: args.run.seed,
            max_steps: ecdysis_host::env::DEFAULT_MAX_STEPS,
            max_errors: ecdysis_host::env::DEFAULT_MAX_ERRORS,
            policy: FailurePolicy::FailClosed,
            limits: limits.clone(),
            sampling: SamplingArgs::default(),
        },
        test_tasks,
        test_split,
        max_coder_calls: args.max_coder_calls,
        max_episodes: args.max_episodes,
        plateau: args.plateau,
        start_blank: args.start_blank,
        coder_latency_ms: args.coder_latency_ms,
    };
    let out = args.out.clone().unwrap_or_else(|| {
        PathBuf::from("runs").join(format!(
            "train-{}-{}-{}",
            args.method.as_str(),
            args.run.domain.replace('/', "-"),
            args.run.agent_model.replace(':', "-")
        ))
    });
    if !quiet {
        eprintln!("training ({}) into {}", args.method.as_str(), out.display());
    }
    let source = std::fs::canonicalize(&args.source)
        .with_context(|| format!("harness source {}", args.source.display()))?;
    let cx = TrainContext {
        store: store.clone(),
        domain,
        participants,
        limits,
        concurrency: args.run.concurrency,
        quiet,
        cargo_target: args
            .cargo_target_dir
            .clone()
            .unwrap_or_else(|| store.root().join("cargo-target")),
    };
    Ok(train::train(config, &source, &out, cx).await?)
}

pub fn render(s: &TrainSummary) -> String {
    let mut out = format!(
        "method {}: train {:.3} -> {:.3}{}; {} of {} rounds accepted; {} coder calls; {} episodes; {:.1}s\n",
        s.method.as_str(),
        s.initial_train_score,
        s.final_train_score,
        s.test_score
            .map(|t| format!(", test {t:.3}"))
            .unwrap_or_default(),
        s.accepted,
        s.rounds.len(),
        s.coder_calls,
        s.episodes,
        s.wall_seconds
    );
    for r in &s.rounds {
        out += &format!(
            "  round {}: {} failures, {} groups ({} recurring), {} coder calls: {}\n",
            r.round, r.failures, r.groups, r.recurring_groups, r.coder_calls, r.decision
        );
    }
    out += &format!("incumbent {}\n", s.incumbent);
    out
}
