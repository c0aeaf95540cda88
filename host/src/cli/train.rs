//! `train`: evolve a harness on the training split.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;

use std::sync::Arc;

use ecdysis_host::eval::RunConfig;
use ecdysis_host::evolve::accept::AcceptRule;
use ecdysis_host::evolve::coder::{
    Coder, EditorCoder, EditorConfig, ExternalCoder, ExternalConfig,
};
use ecdysis_host::evolve::fdcr::{FdcrConfig, Roles};
use ecdysis_host::evolve::select::SelectStrategy;
use ecdysis_host::evolve::train::{
    self, CoderChoice, Diagnoser, Method, SelectConfig, TrainConfig, TrainContext, TrainSummary,
};
use ecdysis_host::model::{ChatModel, ModelFlags, ModelHub, SamplingArgs};
use ecdysis_host::sandbox::{FailurePolicy, WORLD_VERSION};
use ecdysis_host::store::ComponentStore;

use super::env::DataArgs;
use super::limits::LimitArgs;
use super::run::{RunArgs, build_hub, participants_on};

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
    pub roles: RoleArgs,
    #[command(flatten)]
    pub gate: GateArgs,
    #[command(flatten)]
    pub run: TrainRunArgs,
}

/// The evolution roles. Without any of these flags training runs offline:
/// the heuristic diagnoser and the rule coder.
#[derive(Args, Default)]
pub struct RoleArgs {
    /// One model for all four FDCR roles (Analyst, Critic, Engineer,
    /// Moderator); `--method ecdysis` only. Needs --coder-model or
    /// --coder-command (FDCR specs are prose).
    #[arg(long, help_heading = "Evolution roles")]
    pub fdcr_model: Option<String>,
    /// The Analyst's model (default --fdcr-model).
    #[arg(long, help_heading = "Evolution roles")]
    pub analyst_model: Option<String>,
    /// The Critic's model (default --fdcr-model).
    #[arg(long, help_heading = "Evolution roles")]
    pub critic_model: Option<String>,
    /// The Engineer's model (default --fdcr-model).
    #[arg(long, help_heading = "Evolution roles")]
    pub engineer_model: Option<String>,
    /// The Moderator's model, which writes the JSON spec (default
    /// --fdcr-model).
    #[arg(long, help_heading = "Evolution roles")]
    pub moderator_model: Option<String>,
    /// Analyst → Critic → Engineer rounds before the Moderator.
    #[arg(long, default_value_t = 2, help_heading = "Evolution roles")]
    pub fdcr_rounds: u32,
    /// The built-in coding agent: this model answers with search/replace
    /// edits to the harness's src/, compiler errors are fed back.
    #[arg(
        long,
        conflicts_with = "coder_command",
        help_heading = "Evolution roles"
    )]
    pub coder_model: Option<String>,
    /// An external coding agent instead, as a command template run in the
    /// staging crate: placeholders {prompt}, {prompt_file}, {dir}; e.g.
    /// "aider --yes --no-git --message-file {prompt_file}" or
    /// "codex exec --full-auto {prompt}". Edits outside src/ are undone.
    #[arg(long, help_heading = "Evolution roles")]
    pub coder_command: Option<String>,
    /// Wall-clock limit of one external coder run, in seconds.
    #[arg(long, default_value_t = 1800, help_heading = "Evolution roles")]
    pub coder_timeout_secs: u64,
    /// Follow-up turns of the built-in coder (compiler errors, edits that
    /// did not apply).
    #[arg(long, default_value_t = 3, help_heading = "Evolution roles")]
    pub coder_max_feedback: u32,
    /// Base URL of the roles' OpenAI-compatible endpoint (default: the
    /// agent's --agent-base-url, else $OPENAI_BASE_URL).
    #[arg(long, help_heading = "Evolution roles")]
    pub roles_base_url: Option<String>,
    /// Environment variable holding the roles' API key (default
    /// OPENAI_API_KEY; empty for none).
    #[arg(long, help_heading = "Evolution roles")]
    pub roles_api_key_env: Option<String>,
    /// Extra JSON object merged into every role request body (e.g.
    /// '{"max_tokens": 4096}').
    #[arg(long, help_heading = "Evolution roles")]
    pub roles_extra_args: Option<String>,
    /// The coder's endpoint when it differs from the roles' (default
    /// --roles-base-url).
    #[arg(long, help_heading = "Evolution roles")]
    pub coder_base_url: Option<String>,
    /// The coder endpoint's API-key variable (default --roles-api-key-env).
    #[arg(long, help_heading = "Evolution roles")]
    pub coder_api_key_env: Option<String>,
}

/// Acceptance, budgets and task selection.
#[derive(Args)]
pub struct GateArgs {
    /// Acceptance rule: `strict` (the candidate's training score must
    /// strictly exceed the incumbent's on the same tasks and trials) or
    /// `paired` (also a one-sided paired sign-flip test over tasks must give
    /// p <= --accept-alpha).
    #[arg(long, default_value = "strict", value_parser = ["strict", "paired"])]
    pub accept: String,
    /// Significance level of `--accept paired`.
    #[arg(long, default_value_t = 0.05)]
    pub accept_alpha: f64,
    /// Budget: dollars over every role (agent, user, FDCR roles, coder),
    /// priced by the embedded table plus --prices; counted across resumes.
    #[arg(long)]
    pub max_usd: Option<f64>,
    /// Train on --budget-tasks tasks of the training split, chosen by the
    /// failure signatures and execution paths of the starting harness
    /// (`failure-aware`) or at random with the seed (`random`).
    #[arg(long, value_enum)]
    pub select_train: Option<SelectStrategy>,
    /// How many training tasks --select-train keeps (alone, it implies
    /// --select-train failure-aware).
    #[arg(long)]
    pub budget_tasks: Option<usize>,
    /// Seed of `--select-train random` (default: --seed), so several draws
    /// can be compared on the same episodes.
    #[arg(long)]
    pub select_seed: Option<u64>,
}

impl Default for GateArgs {
    fn default() -> Self {
        GateArgs {
            accept: "strict".into(),
            accept_alpha: 0.05,
            max_usd: None,
            select_train: None,
            budget_tasks: None,
            select_seed: None,
        }
    }
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
    /// Environment variable holding the agent endpoint's API key (default
    /// OPENAI_API_KEY; empty for none).
    #[arg(long)]
    pub agent_api_key_env: Option<String>,
    /// `scripted` (offline) or an endpoint's model name.
    #[arg(long, default_value = "scripted")]
    pub user_model: String,
    /// Response cache for every role: read-write, read-only or off.
    #[arg(long, default_value = "read-write")]
    pub cache: String,
    #[arg(long, default_value = ".ecdysis/cache")]
    pub cache_dir: PathBuf,
    /// A price table (JSON, per model) merged over the embedded one.
    #[arg(long)]
    pub prices: Option<PathBuf>,
    /// Sandbox limits for every candidate harness.
    #[command(flatten)]
    pub limits: LimitArgs,
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
        agent_api_key_env: args.run.agent_api_key_env.clone(),
        agent_extra_args: None,
        sim_latency_ms: 0,
        user_model: args.run.user_model.clone(),
        user_base_url: None,
        concurrency: args.run.concurrency,
        seed: args.run.seed,
        temperature: None,
        top_p: None,
        max_tokens: None,
        out: None,
        force_new: false,
        max_steps: ecdysis_host::env::DEFAULT_MAX_STEPS,
        max_errors: ecdysis_host::env::DEFAULT_MAX_ERRORS,
        policy: FailurePolicy::FailClosed,
        limits: args.run.limits.clone(),
        cache: args.run.cache.clone(),
        cache_dir: args.run.cache_dir.clone(),
        prices: args.run.prices.clone(),
        max_requeues: 2,
    };
    let hub = build_hub(
        &args.run.cache,
        &args.run.cache_dir,
        args.run.prices.as_deref(),
    )?;
    let ledger = hub.ledger().clone();
    let participants = participants_on(&run_args, &*domain, hub.clone())?;
    let target = args
        .cargo_target_dir
        .clone()
        .unwrap_or_else(|| store.root().join("cargo-target"));
    let (diagnoser, coder) = roles(&args, &hub, &target)?;
    let accept = AcceptRule::parse(&args.gate.accept, args.gate.accept_alpha)
        .map_err(|e| anyhow::anyhow!("--accept: {e}"))?;
    let select = match (args.gate.select_train, args.gate.budget_tasks) {
        (_, Some(0)) => bail!("--budget-tasks must be at least 1"),
        (Some(strategy), Some(budget)) => Some(SelectConfig {
            strategy,
            budget,
            seed: args.gate.select_seed.unwrap_or(args.run.seed),
        }),
        (None, Some(budget)) => Some(SelectConfig {
            strategy: SelectStrategy::FailureAware,
            budget,
            seed: args.gate.select_seed.unwrap_or(args.run.seed),
        }),
        (Some(s), None) => bail!(
            "--select-train {} needs --budget-tasks N (how many training tasks to keep)",
            s.as_str()
        ),
        (None, None) => None,
    };
    if let Some(m) = args.gate.max_usd
        && !(m.is_finite() && m > 0.0)
    {
        bail!("--max-usd must be a positive number of dollars, got {m}");
    }
    let limits = args.run.limits.limits()?;
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
        diagnoser: match &diagnoser {
            Diagnoser::Heuristic => "heuristic".into(),
            Diagnoser::Fdcr { roles, config } => format!(
                "fdcr(k={}): analyst {}, critic {}, engineer {}, moderator {}",
                config.rounds,
                roles.analyst.name(),
                roles.critic.name(),
                roles.engineer.name(),
                roles.moderator.name()
            ),
        },
        coder: match &coder {
            CoderChoice::Rules => "rules".into(),
            CoderChoice::Agent(c) => c.name().to_string(),
        },
        accept,
        max_usd: args.gate.max_usd,
        select,
    };
    let out = out_dir(&args);
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
        cargo_target: target,
        diagnoser,
        coder,
        ledger,
    };
    Ok(train::train(config, &source, &out, cx).await?)
}

/// The training directory: --out, else runs/train-<method>-<domain>-<agent>.
pub fn out_dir(args: &TrainArgs) -> PathBuf {
    args.out.clone().unwrap_or_else(|| {
        PathBuf::from("runs").join(format!(
            "train-{}-{}-{}",
            args.method.as_str(),
            args.run.domain.replace('/', "-"),
            args.run.agent_model.replace(':', "-")
        ))
    })
}

/// The diagnoser and coder the flags ask for; offline defaults without any.
fn roles(
    args: &TrainArgs,
    hub: &ModelHub,
    target: &std::path::Path,
) -> Result<(Diagnoser, CoderChoice)> {
    let r = &args.roles;
    let base = ModelFlags {
        base_url: r
            .roles_base_url
            .clone()
            .or_else(|| args.run.agent_base_url.clone()),
        api_key_env: r
            .roles_api_key_env
            .clone()
            .or_else(|| args.run.agent_api_key_env.clone()),
        extra_args: r.roles_extra_args.clone(),
        ..ModelFlags::default()
    };
    let model = |role: &str, name: &str| -> Result<Arc<dyn ChatModel>> {
        let mut flags = ModelFlags {
            model: Some(name.to_string()),
            ..base.clone()
        };
        if role == "coder" {
            flags.base_url = r.coder_base_url.clone().or(flags.base_url);
            flags.api_key_env = r.coder_api_key_env.clone().or(flags.api_key_env);
        }
        let config = flags
            .resolve(None)
            .with_context(|| format!("--{role}-model {name}"))?;
        Ok(hub.http_model(role, config)?)
    };
    let per_role = [
        ("analyst", &r.analyst_model),
        ("critic", &r.critic_model),
        ("engineer", &r.engineer_model),
        ("moderator", &r.moderator_model),
    ];
    let any_fdcr = r.fdcr_model.is_some() || per_role.iter().any(|(_, m)| m.is_some());
    let coder: CoderChoice = if let Some(name) = &r.coder_model {
        let config = EditorConfig {
            max_feedback: r.coder_max_feedback,
            target_dir: Some(target.to_path_buf()),
            ..EditorConfig::default()
        };
        CoderChoice::Agent(
            Arc::new(EditorCoder::new(model("coder", name)?, config)) as Arc<dyn Coder>
        )
    } else if let Some(command) = &r.coder_command {
        let config = ExternalConfig {
            timeout_secs: r.coder_timeout_secs,
            target_dir: Some(target.to_path_buf()),
            ..ExternalConfig::new(command.clone())
        };
        CoderChoice::Agent(Arc::new(
            ExternalCoder::new(config).map_err(|e| anyhow::anyhow!("--coder-command: {e}"))?,
        ))
    } else {
        CoderChoice::Rules
    };
    if !any_fdcr {
        return Ok((Diagnoser::Heuristic, coder));
    }
    if args.method != Method::Ecdysis {
        bail!(
            "FDCR role models were given but --method {} does not deliberate (only `ecdysis` does)",
            args.method.as_str()
        );
    }
    if matches!(coder, CoderChoice::Rules) {
        bail!(
            "FDCR specs are prose, which the offline rule coder cannot implement: add --coder-model or --coder-command"
        );
    }
    let mut models = Vec::new();
    for (role, m) in per_role {
        let Some(name) = m.as_ref().or(r.fdcr_model.as_ref()) else {
            bail!("no model for the {role}: give --{role}-model or --fdcr-model");
        };
        models.push(model(role, name)?);
    }
    let mut it = models.into_iter();
    let mut next = || it.next().expect("four roles");
    let roles = Roles {
        analyst: next(),
        critic: next(),
        engineer: next(),
        moderator: next(),
    };
    let config = FdcrConfig {
        rounds: r.fdcr_rounds.max(1),
        ..FdcrConfig::default()
    };
    Ok((Diagnoser::Fdcr { roles, config }, coder))
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
    if !s.stopped.is_empty() {
        out += &format!("stopped: {}\n", s.stopped);
    }
    if let Some(sel) = &s.selection {
        out += &format!(
            "trained on {} selected tasks ({}): {}\n",
            sel.tasks.len(),
            sel.strategy.as_str(),
            sel.tasks.join(",")
        );
    }
    out += &render_usage(&s.usage);
    out += &format!("incumbent {}\n", s.incumbent);
    out
}

/// Tokens, calls and dollars per role, as the paper reports them.
fn render_usage(u: &ecdysis_host::model::LedgerSummary) -> String {
    if u.by_role.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "{:<10} {:>7} {:>7} {:>12} {:>12} {:>10}\n",
        "role", "calls", "hits", "prompt tok", "compl tok", "USD"
    );
    for (role, t) in u.by_role.iter().chain([(&"total".to_string(), &u.total)]) {
        out += &format!(
            "{:<10} {:>7} {:>7} {:>12} {:>12} {:>10.4}\n",
            role,
            t.fresh_calls + t.failed_calls,
            t.cache_hits,
            t.fresh_tokens.prompt_tokens,
            t.fresh_tokens.completion_tokens,
            t.usd
        );
    }
    if !u.unpriced_models.is_empty() {
        out += &format!(
            "(no price for: {}; pass --prices to cost them)\n",
            u.unpriced_models
                .iter()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    out
}
