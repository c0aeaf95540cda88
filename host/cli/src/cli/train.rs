//! `train`: evolve a harness on the training split.

use std::path::PathBuf;
use std::str::FromStr;

use anyhow::{Result, bail};
use clap::Args;

use ecdysis_evolve::code::NetworkChoice;
use ecdysis_evolve::code::{editor, external};
use ecdysis_evolve::diagnose::fdcr::{self, PromptLayout};
use ecdysis_evolve::diagnose::roles::{CoderSpec, RoleError, RoleSpec};
use ecdysis_evolve::evaluate::task_budget::SelectStrategy;
use ecdysis_evolve::gate::accept::{AcceptRule, DEFAULT_PAIRED_ALPHA};
use ecdysis_evolve::gate::power::DEFAULT_POWER;
use ecdysis_evolve::gate::race::GateRace;
use ecdysis_evolve::train::defaults;
use ecdysis_evolve::train::{Method, SelectConfig, TrainPlan, TrainSpec, TrainSummary, run_spec};
use ecdysis_model::{ModelFlags, SamplingArgs};
use ecdysis_runner::eval::SIMULATED_LABEL;
use ecdysis_sandbox::sandbox::Sandbox;
use ecdysis_sandbox::store::ComponentStore;

use super::env::DataArgs;
use super::eval_args::EvalArgs;

/// Flags of `train`: the method and the run directory, then the knobs
/// `experiment` shares.
#[derive(Args)]
pub struct TrainArgs {
    /// Evolution method: ecdysis (aggregation + FDCR), ecdysis-nofdcr
    /// (aggregation, spec straight from the groups) or self-evolution (one
    /// edit per failure, the baseline).
    #[arg(long, value_enum, default_value_t = defaults::METHOD)]
    pub method: Method,
    /// Training run directory (default runs/train-<method>-<domain>-<agent>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub knobs: TrainKnobs,
}

/// The training knobs, defined once: `train` and `experiment` (which runs
/// every method with them) both flatten this.
#[derive(Args)]
pub struct TrainKnobs {
    /// The harness source crate to start from (copied, never edited).
    #[arg(long, default_value = defaults::SOURCE)]
    pub source: PathBuf,
    /// Rounds at most.
    #[arg(long, default_value_t = defaults::ROUNDS)]
    pub rounds: u32,
    /// Episodes with reward below this are failures (0 < λ ≤ 1).
    #[arg(long, default_value_t = defaults::LAMBDA, value_parser = super::eval_args::parse_lambda)]
    pub lambda: f64,
    /// Stop after this many rounds in a row without an accepted candidate
    /// (default 2 for `train`; every round for `experiment`, whose
    /// comparison is per round).
    #[arg(long)]
    pub plateau: Option<u32>,
    /// Budget: coder calls in all.
    #[arg(long)]
    pub max_coder_calls: Option<u32>,
    /// Budget: episodes in all (every evaluation counts).
    #[arg(long)]
    pub max_episodes: Option<u64>,
    /// Training split.
    #[arg(long, default_value = defaults::TRAIN_SPLIT)]
    pub train_split: String,
    /// Held-out split evaluated at the end, for the initial and the final
    /// harness (`none` to skip).
    #[arg(long, default_value = defaults::TEST_SPLIT)]
    pub test_split: String,
    /// Trials per held-out task (the paper's protocol: three independent
    /// trials), apart from the training trials (--trials).
    #[arg(long, default_value_t = defaults::TEST_TRIALS)]
    pub test_trials: u32,
    /// Also evaluate the Direct baseline (no harness) on the held-out split.
    #[arg(long)]
    pub test_direct: bool,
    /// After the last round, ablate the final incumbent's layers on the
    /// training tasks (each layer off in turn, paired with the full
    /// harness) and keep the subset the data favours; the held-out test
    /// evaluates the chosen variant beside the full harness, and `export
    /// --train-run` writes the choice into harness.json.
    #[arg(long)]
    pub select_layers: bool,
    /// Detection probability of the power lines: before training, the
    /// smallest improvement the gate detects with this probability on the
    /// training tasks and trials (from the starting harness's evaluation),
    /// and likewise for the held-out comparison.
    #[arg(long, default_value_t = DEFAULT_POWER)]
    pub power: f64,
    /// An improvement (in accuracy, e.g. 0.1) to state the power for: the
    /// tasks it would need at 1, 3 and the run's trials, and a warning when
    /// the run as configured cannot detect it.
    #[arg(long)]
    pub target_effect: Option<f64>,
    /// Only these held-out task ids (comma-separated; default: the whole
    /// held-out split).
    #[arg(long, value_delimiter = ',')]
    pub test_tasks: Vec<String>,
    /// Start from the source's rule engine with its rule tables emptied
    /// (an evolution experiment's starting point). `--start-blank false`
    /// starts from the source as written. Default: false for `train`, true
    /// for `experiment` on a simulated agent.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    pub start_blank: Option<bool>,
    /// Simulated latency per coder call, in milliseconds (offline
    /// experiments; default 0 for `train`, 2000 for `experiment`).
    #[arg(long)]
    pub coder_latency_ms: Option<u64>,
    /// Cargo target dir shared by candidate builds (default
    /// <store>/cargo-target). Every harness of a run is built from a copy
    /// at `<dir>.staged`, beside it, so builds of any run sharing the
    /// directory reuse each other's incremental compilation.
    #[arg(long)]
    pub cargo_target_dir: Option<PathBuf>,
    /// Candidates are coder-written, untrusted source: they are built (and
    /// an external coder runs) in a bubblewrap jail, and training refuses to
    /// start where no jail can be made (bwrap missing, no user namespaces,
    /// nested in another sandbox). This flag accepts the risk and runs them
    /// WITHOUT a jail there (still scanned, offline, with a cleared
    /// environment and a memory limit). Recorded in config.json; printed.
    #[arg(long)]
    pub allow_unjailed_builds: bool,
    #[command(flatten)]
    pub roles: RoleArgs,
    #[command(flatten)]
    pub gate: GateArgs,
    #[command(flatten)]
    pub eval: EvalArgs,
}

/// What `train` and `experiment` default differently.
#[derive(Debug, Clone, Copy)]
pub struct KnobDefaults {
    /// `--plateau` when not given (`None`: every round).
    pub plateau: Option<u32>,
    /// `--start-blank` when not given.
    pub start_blank: bool,
    /// `--coder-latency-ms` when not given.
    pub coder_latency_ms: u64,
}

/// `train`'s defaults.
pub const TRAIN_DEFAULTS: KnobDefaults = KnobDefaults {
    plateau: Some(defaults::PLATEAU),
    start_blank: defaults::START_BLANK,
    coder_latency_ms: defaults::CODER_LATENCY_MS,
};

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
    #[arg(long, default_value_t = fdcr::DEFAULT_ROUNDS, help_heading = "Evolution roles")]
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
    #[arg(long, default_value_t = external::DEFAULT_TIMEOUT_SECS, help_heading = "Evolution roles")]
    pub coder_timeout_secs: u64,
    /// The external coder runs in a jail with a cleared environment: pass
    /// it this variable (`NAME` takes the value from this process's
    /// environment, `NAME=VALUE` sets it), e.g. its API key. Repeatable.
    #[arg(long, value_name = "NAME[=VALUE]", help_heading = "Evolution roles")]
    pub coder_env: Vec<String>,
    /// A path the jailed external coder may read besides the staging crate,
    /// the toolchain and /usr (e.g. its virtualenv when the automatic
    /// guess, the prefix of its bin/ directory, is not enough). Repeatable.
    #[arg(long, value_name = "PATH", help_heading = "Evolution roles")]
    pub coder_ro: Vec<PathBuf>,
    /// A directory the jailed external coder may write besides the staging
    /// crate and the cargo target (e.g. for its logs). Repeatable.
    #[arg(long, value_name = "PATH", help_heading = "Evolution roles")]
    pub coder_rw: Vec<PathBuf>,
    /// The jailed external coder's network. `auto` (default): only its
    /// model endpoint when known (--coder-endpoint, else --coder-base-url, a
    /// *_BASE_URL variable given with --coder-env, else the roles' base
    /// URL), otherwise none. `endpoint`: the same, but a missing endpoint is
    /// an error. `none`: no network. `host`: UNSAFE, the host's whole
    /// network: the untrusted coder (wrong, compromised or prompt-injected)
    /// can then reach every local service (databases, other tenants, cloud
    /// metadata) and any host, and send your data there. Recorded in
    /// config.json.
    #[arg(
        long,
        value_name = "auto|none|endpoint|host",
        default_value = "auto",
        value_parser = NetworkChoice::from_str,
        help_heading = "Evolution roles"
    )]
    pub coder_network: NetworkChoice,
    /// Same as --coder-network none (kept for older scripts).
    #[arg(long, hide = true, help_heading = "Evolution roles")]
    pub coder_no_network: bool,
    /// The only endpoint the jailed external coder may reach: HOST:PORT or
    /// its base URL (`https://api.openai.com/v1`, `http://127.0.0.1:8080`).
    /// It gets a network of its own; the host forwards TCP to these
    /// endpoints and nothing else (no other host, no local service).
    /// Repeatable.
    #[arg(long, value_name = "HOST:PORT|URL", help_heading = "Evolution roles")]
    pub coder_endpoint: Vec<String>,
    /// Follow-up turns of the built-in coder (compiler errors, edits that
    /// did not apply).
    #[arg(long, default_value_t = editor::DEFAULT_MAX_FEEDBACK, help_heading = "Evolution roles")]
    pub coder_max_feedback: u32,
    /// How --coder-model delivers its change: `editor` (search/replace
    /// blocks on any file of src/, for models that edit Rust well),
    /// `tables` (a JSON list of rule-table edits: prompt rules, tool hints,
    /// skills, error advice, aliases, thresholds, which the host writes into
    /// src/tables.rs; for small models, whose replies then always build) or
    /// `whole-file` (the complete new content of one small hook file the
    /// host picks from the spec: a file it names, else one of the layer it
    /// names, at most 5,000 bytes; compiler errors go back to the model).
    /// `bench --coder` compares them on recorded conversations.
    #[arg(
        long,
        default_value = "editor",
        value_parser = ["editor", "tables", "whole-file"],
        help_heading = "Evolution roles"
    )]
    pub coder_format: String,
    /// Ask the roles' endpoint to constrain the Moderator's spec and the
    /// table coder's edits to their JSON schemas (`response_format` with a
    /// JSON schema: OpenAI, vLLM and llama.cpp's server enforce it). Without
    /// it the JSON is read from the reply and checked the same way.
    #[arg(long, help_heading = "Evolution roles")]
    pub structured_output: bool,
    /// How the FDCR roles' prompts are laid out: `shared-prefix` fits the
    /// evidence and the harness's sources once per discussion, to the room
    /// its largest turn leaves, so every request of a discussion begins
    /// with the same bytes (a server's prefix cache reuses them);
    /// `per-turn` fits them beside each turn's discussion (the layout
    /// before this option, whose requests recorded response caches hold).
    /// Default: the layout the run directory's config.json records (a run
    /// recorded before this option: per-turn), else shared-prefix.
    #[arg(long, value_enum, help_heading = "Evolution roles")]
    pub roles_layout: Option<PromptLayout>,
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
    /// Sampling temperature of every FDCR role and the coder (default: the
    /// endpoint's; the paper uses 0).
    #[arg(long, help_heading = "Evolution roles")]
    pub roles_temperature: Option<f64>,
    /// Nucleus-sampling cut-off of the roles and the coder.
    #[arg(long, help_heading = "Evolution roles")]
    pub roles_top_p: Option<f64>,
    /// Most tokens per role or coder reply; this much of the context is
    /// kept free for the reply (default 1024, sent as max_tokens).
    #[arg(long, help_heading = "Evolution roles")]
    pub roles_max_tokens: Option<u32>,
    /// The context window, in tokens, that every FDCR and coder request must
    /// fit (evidence, source excerpts and transcripts are trimmed, largest
    /// first, saying what was left out). Default: what the roles' endpoint
    /// reports (llama.cpp's /props, vLLM's /v1/models), else 8192.
    #[arg(long, help_heading = "Evolution roles")]
    pub roles_context_tokens: Option<usize>,
    /// Seconds one role or coder request may take (a long prompt on a CPU
    /// server takes minutes).
    #[arg(long, help_heading = "Evolution roles")]
    pub roles_timeout_secs: Option<f64>,
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
    #[arg(long, default_value_t = DEFAULT_PAIRED_ALPHA)]
    pub accept_alpha: f64,
    /// Race the gate: evaluate a candidate task by task, the incumbent's
    /// failing tasks first, and stop once the acceptance rule's decision
    /// can no longer change (episodes not run are recorded as not needed;
    /// an accepted candidate is still evaluated on every task). `off`
    /// evaluates every task before deciding.
    #[arg(long, value_enum, default_value_t = GateRace::default())]
    pub gate_race: GateRace,
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
            accept_alpha: DEFAULT_PAIRED_ALPHA,
            gate_race: GateRace::default(),
            max_usd: None,
            select_train: None,
            budget_tasks: None,
            select_seed: None,
        }
    }
}

impl TrainArgs {
    /// The library's training specification from the flags.
    pub fn spec(&self) -> Result<TrainSpec> {
        self.knobs.spec(self.method, TRAIN_DEFAULTS)
    }
}

impl TrainKnobs {
    /// The training specification of `method` from the flags, with the
    /// command's `defaults` where a flag was not given.
    pub fn spec(&self, method: Method, defaults: KnobDefaults) -> Result<TrainSpec> {
        let mut eval = self
            .eval
            .spec(Some(self.train_split.clone()), defaults::AGENT)?;
        // The training evaluations resume from their own directories; only
        // the held-out split differs.
        eval.settings.split = Some(self.train_split.clone());
        if self.test_trials == 0 {
            bail!("--test-trials must be at least 1");
        }
        if !(self.power > 0.0 && self.power < 1.0) {
            bail!(
                "--power must be strictly between 0 and 1, not {}",
                self.power
            );
        }
        if let Some(t) = self.target_effect.filter(|t| !(*t > 0.0 && *t <= 1.0)) {
            bail!("--target-effect must be in (0, 1] (an accuracy difference), not {t}");
        }
        if self.roles.roles_context_tokens.is_some_and(|n| n < 1024) {
            bail!("--roles-context-tokens must be at least 1024 tokens");
        }
        let accept = AcceptRule::parse(&self.gate.accept, self.gate.accept_alpha)
            .map_err(|e| anyhow::anyhow!("--accept: {e}"))?;
        let seed = self.gate.select_seed.unwrap_or(self.eval.seed);
        let select = match (self.gate.select_train, self.gate.budget_tasks) {
            (_, Some(0)) => bail!("--budget-tasks must be at least 1"),
            (strategy, Some(budget)) => Some(SelectConfig {
                strategy: strategy.unwrap_or(SelectStrategy::FailureAware),
                budget,
                seed,
            }),
            (Some(s), None) => bail!(
                "--select-train {} needs --budget-tasks N (how many training tasks to keep)",
                s.as_str()
            ),
            (None, None) => None,
        };
        if let Some(m) = self.gate.max_usd
            && !(m.is_finite() && m > 0.0)
        {
            bail!("--max-usd must be a positive number of dollars, got {m}");
        }
        Ok(TrainSpec {
            plan: TrainPlan {
                method,
                rounds: self.rounds,
                lambda: self.lambda,
                plateau: self.plateau.or(defaults.plateau).unwrap_or(self.rounds),
                max_coder_calls: self.max_coder_calls,
                max_episodes: self.max_episodes,
                max_usd: self.gate.max_usd,
                test_split: (self.test_split != "none").then(|| self.test_split.clone()),
                start_blank: self.start_blank.unwrap_or(defaults.start_blank),
                coder_latency_ms: self.coder_latency_ms.unwrap_or(defaults.coder_latency_ms),
                accept,
                gate_race: self.gate.gate_race,
                select,
                test_trials: self.test_trials,
                test_direct: self.test_direct,
                select_layers: self.select_layers,
                allow_unjailed_builds: self.allow_unjailed_builds,
            },
            source: self.source.clone(),
            eval,
            roles: {
                let roles = self.roles.spec(
                    self.eval.agent_base_url.clone(),
                    self.eval.agent_api_key_env.clone(),
                )?;
                roles.validate(method).map_err(role_error)?;
                roles
            },
            cargo_target: self.cargo_target_dir.clone(),
            concurrency: self.eval.fixed_concurrency("train")?,
            test_tasks: self.test_tasks.clone(),
            power: ecdysis_evolve::gate::power::PowerAsk {
                power: self.power,
                target_effect: self.target_effect,
            },
            workers: None,
        })
    }
}

/// A role error in the flags' terms.
pub fn role_error(e: RoleError) -> anyhow::Error {
    match e {
        RoleError::FdcrWithoutCoder => anyhow::anyhow!(
            "FDCR specs are prose, which the offline rule coder cannot implement: add --coder-model or --coder-command"
        ),
        RoleError::FdcrWithoutDeliberation(m) => anyhow::anyhow!(
            "FDCR role models were given but --method {m} does not deliberate (only `ecdysis` does)"
        ),
        RoleError::MissingRole(role) => {
            anyhow::anyhow!("no model for the {role}: give --{role}-model or --fdcr-model")
        }
        other => anyhow::anyhow!("{other}"),
    }
}

impl RoleArgs {
    /// The roles from the flags; their endpoint defaults to the agent's.
    pub fn spec(
        &self,
        agent_base_url: Option<String>,
        agent_api_key_env: Option<String>,
    ) -> Result<RoleSpec> {
        let coder = match (&self.coder_model, &self.coder_command) {
            (Some(model), _) if self.coder_format == "tables" => CoderSpec::Tables {
                model: model.clone(),
                max_feedback: self.coder_max_feedback,
            },
            (Some(model), _) if self.coder_format == "whole-file" => CoderSpec::WholeFile {
                model: model.clone(),
                max_feedback: self.coder_max_feedback,
            },
            (Some(model), _) => CoderSpec::Editor {
                model: model.clone(),
                max_feedback: self.coder_max_feedback,
            },
            (None, Some(command)) => CoderSpec::External {
                command: command.clone(),
                timeout_secs: self.coder_timeout_secs,
                env: coder_env(&self.coder_env)?,
                read_only: self.coder_ro.clone(),
                read_write: self.coder_rw.clone(),
                network: self.network_choice()?,
                endpoints: self.coder_endpoint.clone(),
            },
            (None, None) => CoderSpec::Rules,
        };
        if self.coder_format != "editor" && self.coder_model.is_none() {
            bail!(
                "--coder-format {} sets how --coder-model edits: give --coder-model",
                self.coder_format
            );
        }
        if !matches!(coder, CoderSpec::External { .. })
            && (!self.coder_endpoint.is_empty()
                || self.coder_no_network
                || self.coder_network != NetworkChoice::Auto)
        {
            bail!(
                "--coder-network, --coder-endpoint and --coder-no-network set the external coder's \
                 network: they need --coder-command"
            );
        }
        Ok(RoleSpec {
            fdcr_model: self.fdcr_model.clone(),
            analyst_model: self.analyst_model.clone(),
            critic_model: self.critic_model.clone(),
            engineer_model: self.engineer_model.clone(),
            moderator_model: self.moderator_model.clone(),
            fdcr_rounds: self.fdcr_rounds,
            coder,
            endpoint: ModelFlags {
                base_url: self.roles_base_url.clone().or(agent_base_url),
                api_key_env: self.roles_api_key_env.clone().or(agent_api_key_env),
                extra_args: self.roles_extra_args.clone(),
                request_timeout_secs: self.roles_timeout_secs,
                ..ModelFlags::default()
            },
            coder_endpoint: ModelFlags {
                base_url: self.coder_base_url.clone(),
                api_key_env: self.coder_api_key_env.clone(),
                ..ModelFlags::default()
            },
            sampling: SamplingArgs {
                temperature: self.roles_temperature,
                top_p: self.roles_top_p,
                max_tokens: self.roles_max_tokens,
                ..SamplingArgs::default()
            },
            context_tokens: self.roles_context_tokens,
            structured: self.structured_output,
            layout: self.roles_layout,
        })
    }
}

impl RoleArgs {
    /// `--coder-network`, with the older `--coder-no-network`.
    fn network_choice(&self) -> Result<NetworkChoice> {
        match (self.coder_no_network, self.coder_network) {
            (false, choice) => Ok(choice),
            (true, NetworkChoice::Auto | NetworkChoice::None) => Ok(NetworkChoice::None),
            (true, other) => bail!(
                "--coder-no-network contradicts --coder-network {}: give one of them",
                other.as_str()
            ),
        }
    }
}

/// `--coder-env` values: `NAME` from this process's environment (which
/// must have it), `NAME=VALUE` as given.
fn coder_env(items: &[String]) -> Result<std::collections::BTreeMap<String, String>> {
    let mut env = std::collections::BTreeMap::new();
    for item in items {
        let (name, value) = match item.split_once('=') {
            Some((n, v)) => (n.to_string(), v.to_string()),
            None => {
                let v = std::env::var(item).map_err(|_| {
                    anyhow::anyhow!("--coder-env {item}: this process has no such variable")
                })?;
                (item.clone(), v)
            }
        };
        if name.is_empty() {
            bail!("--coder-env `{item}`: no variable name");
        }
        env.insert(name, value);
    }
    Ok(env)
}

/// The default training directory: runs/train-<method>-<domain>-<agent>.
pub fn default_out(spec: &TrainSpec) -> PathBuf {
    PathBuf::from("runs").join(format!(
        "train-{}-{}-{}",
        spec.plan.method.as_str(),
        spec.eval.settings.domain.replace('/', "-"),
        spec.eval.agent_model().file_stem()
    ))
}

/// `train`: the flags into a [`TrainSpec`], then the library's training.
pub async fn train(
    args: TrainArgs,
    store: &ComponentStore,
    data: &DataArgs,
    quiet: bool,
) -> Result<TrainSummary> {
    let mut spec = args.spec()?;
    spec.eval = args.knobs.eval.with_endpoint_cap(spec.eval).await;
    let domain = data.open(&spec.eval.settings.domain)?;
    let out = args.out.clone().unwrap_or_else(|| default_out(&spec));
    if !quiet {
        eprintln!(
            "training ({}) into {}",
            spec.plan.method.as_str(),
            out.display()
        );
        if spec.eval.is_simulated() {
            eprintln!("{SIMULATED_LABEL}");
        }
    }
    let services = args.knobs.eval.services()?;
    let spec = TrainSpec {
        workers: args
            .knobs
            .eval
            .isolate
            .pool(spec.concurrency)?
            .map(|pool| -> Result<_> {
                Ok(ecdysis_runner::isolate::Workers {
                    pool,
                    source: data.source()?,
                })
            })
            .transpose()?,
        ..spec
    };
    // The process's one engine: every episode of the run instantiates from it.
    let sandbox = Sandbox::pooled(spec.eval.settings.limits.clone(), spec.concurrency)?;
    Ok(run_spec(&spec, store, domain, &services, &sandbox, &out).await?)
}
