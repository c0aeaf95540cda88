//! The evolution loop (`ecdysis-host train`).
//!
//! Per round (the `Round` type of `round.rs`): evaluate the incumbent on the
//! training tasks (cached per component hash), collect scrubbed failure
//! records, aggregate them across tasks, diagnose a spec, let the coder edit
//! a staging copy of the incumbent's source, build, `check`, screen,
//! evaluate, and decide by the acceptance rule. Every round closes the same
//! way: its record appended to `rounds.jsonl`, the ledger saved.
//!
//! Run directory ([`dir::TrainDir`]):
//! ```text
//! config.json  rounds.jsonl  incumbent  initial  summary.json  ledger.json  wit/  staging/
//! selection.json          the chosen training tasks (with --select-train)
//! rounds/<n>/transcript.json   the diagnosis discussion and coder runs
//! candidates/<hash>/{source/, manifest.json, spec.json, transcript.json, diff.patch, train_summary.json}
//! evals/<hash>-<split>/   result directories of the runner (resumable)
//! ```
//!
//! Who diagnoses and who edits is the caller's choice ([`Diagnoser`],
//! [`Coder`]): offline, the heuristic diagnoser and the rule coder; with
//! endpoints, the FDCR roles and an LLM editor or an external coding agent.

pub mod defaults;
mod dir;
mod history;
mod ids;
mod round;
mod spend_limits;
mod train_spec;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::staging;
use crate::code::Coder;
use crate::code::rule_coder;
use crate::diagnose::fdcr::{FdcrConfig, PromptLayout, Roles};
use crate::evaluate::task_budget::{self, SelectStrategy, Selection};
use crate::gate::accept::AcceptRule;
use ecdysis_env::Domain;
use ecdysis_runner::agent::EpisodeRecord;
use ecdysis_runner::eval::{
    self, Participants, ProgressDisplay, RunConfig, RunOptions, RunSettings, RunSummary,
};
use ecdysis_sys::progress::{PROGRESS, SECURITY};

use ecdysis_model::UsageLedger;
use ecdysis_sandbox::sandbox::{LayerSet, LoadedHarness, Sandbox};
use ecdysis_sandbox::store::{
    BuildOptions, BuildProfile, ComponentHash, ComponentStore, Containment, Manifest, Trust,
};
use ecdysis_sys::fsutil::PathError;
use ecdysis_sys::layout::{RunLayout, TrainLayout};

pub use dir::TrainDir;
pub use history::{
    CoderRun, LedgerFile, Measure, PhaseTimes, RoundRecord, RoundTranscript, TestReport, TestScore,
    TrainSummary,
};
pub use ids::{CoderId, DiagnoserId};
pub use train_spec::{TrainSpec, TrainSpecError, run as run_spec};

/// Which evolution method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// The baseline: one coder call per failure record, edits accumulate,
    /// one gate per round.
    SelfEvolution,
    /// Cross-task aggregation, one coder call per round, spec written
    /// directly from the groups.
    EcdysisNofdcr,
    /// Aggregation plus the FDCR diagnostic roles (offline: the heuristic
    /// diagnoser stands in for the roles).
    Ecdysis,
}

impl Method {
    /// The method's name on the command line and in files.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::SelfEvolution => "self-evolution",
            Method::EcdysisNofdcr => "ecdysis-nofdcr",
            Method::Ecdysis => "ecdysis",
        }
    }
}

/// What a training run does, as the user asked for it: the part that
/// [`TrainSpec`] (the request) and [`TrainConfig`] (the record) share,
/// written once. Flattened into `config.json`, so the file keeps its shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainPlan {
    /// The evolution method.
    pub method: Method,
    /// Rounds at most.
    pub rounds: u32,
    /// Episodes with reward below this are failures.
    pub lambda: f64,
    /// The held-out split, evaluated at the end (`None`: no test).
    pub test_split: Option<String>,
    /// Spend limit: coder calls in all.
    pub max_coder_calls: Option<u32>,
    /// Spend limit: episodes in all.
    pub max_episodes: Option<u64>,
    /// Stop after this many rounds in a row without an accepted candidate.
    pub plateau: u32,
    /// Start from the source with its rule tables emptied.
    #[serde(default)]
    pub start_blank: bool,
    /// Simulated latency of one coder call, in milliseconds (experiments
    /// model an LLM coder's cost offline).
    #[serde(default)]
    pub coder_latency_ms: u64,
    /// The acceptance rule.
    #[serde(default)]
    pub accept: AcceptRule,
    /// Whether the gate stops a candidate's evaluation once the rule's
    /// decision is certain ([`crate::gate::race`]). A run recorded before the
    /// option resumes with it on: it decides every round alike.
    #[serde(default)]
    pub gate_race: crate::gate::race::GateRace,
    /// Spend limit: dollars over every role (agent, user, FDCR roles, coder),
    /// from the usage ledger and the price table.
    #[serde(default)]
    pub max_usd: Option<f64>,
    /// Train on a budget of tasks chosen from the training split.
    #[serde(default)]
    pub select: Option<SelectConfig>,
    /// Trials per held-out task at the end (`--test-trials`), apart from
    /// the training trials.
    #[serde(default = "one_trial")]
    pub test_trials: u32,
    /// Also evaluate the Direct baseline (no harness) on the held-out split.
    #[serde(default)]
    pub test_direct: bool,
    /// Ablate the final incumbent's layers on the training tasks and keep
    /// the subset the data favours ([`crate::ablate`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub select_layers: bool,
    /// The operator allowed candidate builds and the external coder to run
    /// without a jail where bubblewrap cannot make one
    /// (`--allow-unjailed-builds`).
    #[serde(default)]
    pub allow_unjailed_builds: bool,
}

impl Default for TrainPlan {
    /// `train`'s defaults ([`defaults`]), no spend limit, the strict gate.
    fn default() -> Self {
        TrainPlan {
            method: defaults::METHOD,
            rounds: defaults::ROUNDS,
            lambda: defaults::LAMBDA,
            test_split: Some(defaults::TEST_SPLIT.into()),
            max_coder_calls: None,
            max_episodes: None,
            plateau: defaults::PLATEAU,
            start_blank: defaults::START_BLANK,
            coder_latency_ms: defaults::CODER_LATENCY_MS,
            accept: AcceptRule::default(),
            gate_race: crate::gate::race::GateRace::default(),
            max_usd: None,
            select: None,
            test_trials: defaults::TEST_TRIALS,
            test_direct: false,
            select_layers: false,
            allow_unjailed_builds: false,
        }
    }
}

/// Everything that determines a training run (`config.json`; a resume with
/// another one is refused).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainConfig {
    /// What the run does.
    #[serde(flatten)]
    pub plan: TrainPlan,
    /// The runner config for training evaluations; its `harness` is
    /// replaced per candidate, its `tasks` are the training tasks.
    pub train: RunConfig,
    /// Held-out tasks, evaluated once at the end, never used for selection.
    pub test_tasks: Vec<String>,
    /// Who diagnoses (`heuristic`, or `fdcr` with the role models), for the
    /// record: a resume with other roles is refused.
    #[serde(default)]
    pub diagnoser: DiagnoserId,
    /// Who edits (`rules`, `editor:<model>`, `external:<program>`).
    #[serde(default)]
    pub coder: CoderId,
    /// Whether the gate re-measures the incumbent every round, and why.
    #[serde(default)]
    pub gate_measure: GateMeasure,
    /// The FDCR roles' and coder's sampling and context budget.
    #[serde(default)]
    pub roles: RolesConfig,
    /// The external coder's network (absent for coders that run no
    /// process).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coder_network: Option<crate::code::CoderNetwork>,
}

fn one_trial() -> u32 {
    1
}

/// How the gate gets the incumbent's score (`config.json`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GateMeasure {
    /// Measure the incumbent afresh every round, on the tasks, trials and
    /// seeds the candidate gets (the response cache bypassed for both),
    /// instead of reusing its stored score.
    pub remeasure: bool,
    /// Why (what makes the agent deterministic or not).
    pub reason: String,
}

impl GateMeasure {
    /// Whether episodes of `train` replay identically: a simulated agent
    /// and user are deterministic per seed; a model endpoint only when it
    /// samples at temperature 0 (agent and user) and its responses are
    /// served from the response cache. Otherwise a stored score is one
    /// draw, and the winner of an earlier gate would be a lucky bar.
    pub fn for_run(train: &RunConfig, cache_reads: bool, user_temperature: Option<f64>) -> Self {
        let sim = train.agent_model.is_simulated();
        let scripted = train.user_model == ecdysis_runner::eval::spec::SCRIPTED_USER;
        let zero = |t: Option<f64>| t == Some(0.0);
        let (remeasure, reason) = if sim && scripted {
            (
                false,
                "simulated agent and scripted user: deterministic per seed".to_string(),
            )
        } else if !cache_reads {
            (
                true,
                "model responses are not served from the response cache".to_string(),
            )
        } else if !sim && !zero(train.settings.sampling.temperature) {
            (
                true,
                format!(
                    "the agent samples at temperature {}",
                    train
                        .settings
                        .sampling
                        .temperature
                        .map(|t| t.to_string())
                        .unwrap_or_else(|| "(the endpoint's default)".into())
                ),
            )
        } else if !scripted && !zero(user_temperature) {
            (
                true,
                "the LLM user samples at the endpoint's default temperature".to_string(),
            )
        } else {
            (
                false,
                "temperature 0 with cached responses: episodes replay identically".to_string(),
            )
        };
        GateMeasure { remeasure, reason }
    }
}

/// The roles' settings as `config.json` records them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RolesConfig {
    /// Sampling of every FDCR role and coder request.
    #[serde(default)]
    pub sampling: ecdysis_model::SamplingArgs,
    /// The context budget every role and coder request fits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::diagnose::token_budget::ContextBudget>,
    /// Where the context size came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_source: Option<crate::diagnose::token_budget::ContextSource>,
    /// How the FDCR roles' prompts are laid out (`--roles-layout`). Absent:
    /// `per-turn`, the only layout before the option; it is never written,
    /// so a run recorded before the option resumes with the requests it
    /// asked (its response cache is keyed on them).
    #[serde(default, skip_serializing_if = "PromptLayout::is_per_turn")]
    pub prompt_layout: PromptLayout,
}

/// `--select-train <strategy> --budget-tasks <n>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SelectConfig {
    /// How tasks are chosen.
    pub strategy: SelectStrategy,
    /// How many.
    pub budget: usize,
    /// Seed of a random draw (`--select-seed`, default the run seed), apart
    /// from the run seed so draws compare on the same episodes.
    pub seed: u64,
}

/// Who turns failure groups into a spec.
#[derive(Clone)]
pub enum Diagnoser {
    /// The offline heuristic diagnoser (deterministic, no model).
    Heuristic,
    /// The FDCR roles (Analyst, Critic, Engineer, Moderator). Used by
    /// `--method ecdysis`; the other methods write specs from the groups.
    Fdcr {
        /// The four role models.
        roles: Roles,
        /// Rounds and limits of the discussion.
        config: FdcrConfig,
    },
}

impl Diagnoser {
    /// The diagnoser as `config.json` records it.
    pub fn describe(&self) -> DiagnoserId {
        match self {
            Diagnoser::Heuristic => DiagnoserId::Heuristic,
            Diagnoser::Fdcr { roles, config } => DiagnoserId::Fdcr(format!(
                "fdcr(k={}): analyst {}, critic {}, engineer {}, moderator {}",
                config.rounds,
                roles.analyst.name(),
                roles.critic.name(),
                roles.engineer.name(),
                roles.moderator.name()
            )),
        }
    }
}

/// A training run that could not go on.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// A file of the training directory or harness source could not be read or
    /// written (also a rule-coder edit that failed).
    #[error(transparent)]
    Io(#[from] PathError),
    /// The incumbent's build or the component store failed.
    #[error(transparent)]
    Store(#[from] ecdysis_sandbox::store::StoreError),
    /// An evaluation failed.
    #[error(transparent)]
    Run(#[from] eval::RunError),
    /// The sandbox failed outside any candidate (e.g. the engine).
    #[error(transparent)]
    Sandbox(#[from] ecdysis_sandbox::sandbox::SandboxError),
    /// The domain failed (an unknown task, an evaluator error).
    #[error(transparent)]
    Env(#[from] ecdysis_env::EnvError),
    /// The output directory holds a training run of another configuration.
    #[error("{dir} holds a training run with another configuration:\n{diff}\n(use another --out)")]
    ConfigChanged {
        /// The training directory.
        dir: PathBuf,
        /// One `path: old -> new` line per changed setting.
        diff: String,
    },
    /// `--coder rules` was chosen but the harness source has no
    /// `src/tables.rs`.
    #[error("the harness source {0} has no src/tables.rs for the rule coder")]
    NoTables(PathBuf),
    /// A file of the training directory holds something unusable (a
    /// damaged `rounds.jsonl` line, an `incumbent` that is not a hash):
    /// never a silent fallback to the initial harness.
    #[error("{path} is corrupt: {message} (move it away to start that part afresh)")]
    Corrupt {
        /// The damaged file.
        path: PathBuf,
        /// What is wrong with it (with the line or round, where known).
        message: String,
    },
    /// No jail can be made for the run's untrusted work, and the operator
    /// did not pass `--allow-unjailed-builds`.
    #[error(
        "training builds untrusted candidates (and runs an external coder) only in a jail, and {0}; \
         to accept the risk of building coder-written source without one, pass --allow-unjailed-builds"
    )]
    NoJail(ecdysis_sys::jail::JailError),
}

impl From<eval::RunDirError> for TrainError {
    fn from(e: eval::RunDirError) -> Self {
        match e {
            eval::RunDirError::ConfigChanged { dir, diff } => {
                TrainError::ConfigChanged { dir, diff }
            }
            eval::RunDirError::Corrupt { path, reason } => TrainError::Corrupt {
                path,
                message: reason,
            },
            eval::RunDirError::Io(p) => TrainError::Io(p),
        }
    }
}

/// What the loop needs besides the config.
pub struct TrainContext {
    /// Where candidates are stored.
    pub store: ComponentStore,
    /// The benchmark domain.
    pub domain: Arc<dyn Domain>,
    /// The agent and user of every episode.
    pub participants: Arc<dyn Participants>,
    /// The process's one sandbox (pooled, sized to the concurrency): every
    /// evaluation, check and screen of the run instantiates from it.
    pub sandbox: Sandbox,
    /// Episodes at once.
    pub concurrency: usize,
    /// What the power lines are stated for.
    pub power: crate::gate::power::PowerAsk,
    /// Cargo target dir shared by every candidate build (so a candidate
    /// rebuilds only the harness crate, not its dependencies).
    pub cargo_target: PathBuf,
    /// Who diagnoses.
    pub diagnoser: Diagnoser,
    /// Who edits (offline, the [`crate::code::RuleCoder`]).
    pub coder: Arc<dyn Coder>,
    /// The ledger every model of the run records into (the participants'
    /// and the roles'); persisted as `ledger.json`.
    pub ledger: Arc<UsageLedger>,
    /// Components loaded into the sandbox, by hash (a candidate is
    /// evaluated several times; loading once keeps the gate fast).
    pub loaded: Mutex<HashMap<ComponentHash, LoadedHarness>>,
    /// The agent and user for fresh draws (the response cache bypassed),
    /// when the gate re-measures; `None`: `participants` serve.
    pub fresh: Option<Arc<dyn Participants>>,
    /// How candidate builds (untrusted source) are contained.
    pub containment: Containment,
    /// `--isolate process`: the worker pool and the job every evaluation's
    /// episodes run as (its harness set per candidate).
    pub isolation: Option<(
        Arc<ecdysis_runner::isolate::WorkerPool>,
        ecdysis_runner::isolate::EpisodeJob,
    )>,
}

/// Which participants an evaluation draws from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Draw {
    /// The run's participants (responses replayed from the cache).
    Cached,
    /// Fresh samples: the response cache bypassed.
    Fresh,
}

impl TrainContext {
    /// A stored component, loaded into the run's sandbox once.
    pub fn load(&self, hash: &ComponentHash) -> Result<LoadedHarness, TrainError> {
        let mut loaded = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(h) = loaded.get(hash) {
            return Ok(h.clone());
        }
        let (harness, _) = self.store.load(&self.sandbox, hash)?;
        loaded.insert(hash.clone(), harness.clone());
        Ok(harness)
    }

    /// Build a crate into the store with the run's shared target dir: the
    /// user's own source (`Trust::Own`) or a candidate edited from a
    /// reference (untrusted: scanned and jailed, see
    /// [`ecdysis_sandbox::store::build`]).
    pub fn build(
        &self,
        dir: &Path,
        parent: Option<ComponentHash>,
        trust: Trust,
    ) -> Result<Manifest, TrainError> {
        Ok(self
            .store
            .build(
                dir,
                &BuildOptions {
                    parent,
                    target_dir: Some(self.cargo_target.clone()),
                    quiet: true,
                    trust,
                    // Every harness of the run, the starting one too, is
                    // built alike, with the fast incremental profile.
                    profile: BuildProfile::Candidate,
                    staged: true,
                    ..BuildOptions::default()
                },
            )?
            .manifest)
    }

    /// Whether untrusted work can run as the run's containment asks: in a
    /// jail, or (allowed by the operator) without one. Says which, loudly
    /// when unjailed.
    pub fn check_containment(&self) -> Result<(), TrainError> {
        match ecdysis_sys::jail::Jail::get() {
            Ok(jail) => {
                self.say(format!(
                    "candidate builds and external coders run jailed ({})",
                    jail.version()
                ));
                Ok(())
            }
            Err(e) if self.containment.allow_unjailed => {
                tracing::warn!(
                    target: SECURITY,
                    "WARNING: candidate builds and external coders run WITHOUT a jail ({e}); \
                     allowed by --allow-unjailed-builds"
                );
                Ok(())
            }
            Err(e) => Err(TrainError::NoJail(e)),
        }
    }

    /// Evaluate one component on `tasks` (resuming its cached result dir
    /// under `label`), returning the summary and the episodes.
    pub async fn evaluate(
        &self,
        dir: &TrainDir,
        base: &RunConfig,
        hash: &ComponentHash,
        tasks: &[String],
        split: Option<String>,
        label: &str,
    ) -> Result<(RunSummary, Vec<EpisodeRecord>), TrainError> {
        self.evaluate_with(dir, base, Some(hash), tasks, split, label, Draw::Cached)
            .await
    }

    /// Evaluate one component, or Direct (`None`), drawing from `draw`'s
    /// participants.
    #[allow(clippy::too_many_arguments)]
    pub async fn evaluate_with(
        &self,
        dir: &TrainDir,
        base: &RunConfig,
        hash: Option<&ComponentHash>,
        tasks: &[String],
        split: Option<String>,
        label: &str,
        draw: Draw,
    ) -> Result<(RunSummary, Vec<EpisodeRecord>), TrainError> {
        self.say(format!(
            "evaluating {} on {} {label} task(s) x {} trial(s){}",
            hash.map(|h| h.short().to_string())
                .unwrap_or_else(|| "direct".into()),
            tasks.len(),
            base.settings.trials,
            fresh_note(draw)
        ));
        let (config, options, executor) =
            self.prepare(dir, base, hash, tasks, split, label, draw)?;
        let out = options.out.clone();
        let summary = eval::run_with(config, options, self.domain.clone(), executor, None).await?;
        let records =
            eval::rundir::read_trajectories(&out.join(eval::rundir::TRAJECTORIES_FILE), false)?;
        Ok((summary, in_task_order(records)))
    }

    /// Evaluate `hash` on `part` of `tasks` only, in the result directory
    /// of its evaluation on all of `tasks` (which a later [`Self::evaluate_with`]
    /// resumes): the racing gate's batches. Returns every finished episode
    /// of that directory.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn evaluate_part(
        &self,
        dir: &TrainDir,
        base: &RunConfig,
        hash: &ComponentHash,
        tasks: &[String],
        part: &std::collections::BTreeSet<String>,
        split: Option<String>,
        label: &str,
        draw: Draw,
    ) -> Result<Vec<EpisodeRecord>, TrainError> {
        self.say(format!(
            "evaluating {} on {} of {} {label} task(s) x {} trial(s){}",
            hash.short(),
            part.len(),
            tasks.len(),
            base.settings.trials,
            fresh_note(draw)
        ));
        let (config, options, executor) =
            self.prepare(dir, base, Some(hash), tasks, split, label, draw)?;
        Ok(in_task_order(
            eval::run_tasks(config, options, executor, part).await?,
        ))
    }

    /// The run config, options and episode executor of one evaluation.
    #[allow(clippy::too_many_arguments)]
    fn prepare(
        &self,
        dir: &TrainDir,
        base: &RunConfig,
        hash: Option<&ComponentHash>,
        tasks: &[String],
        split: Option<String>,
        label: &str,
        draw: Draw,
    ) -> Result<(RunConfig, RunOptions, Arc<dyn eval::EpisodeExecutor>), TrainError> {
        let loaded = match hash {
            Some(h) => Some(self.load(h)?),
            None => None,
        };
        let config = RunConfig {
            harness: hash.cloned(),
            tasks: tasks.to_vec(),
            settings: RunSettings {
                split,
                ..base.settings.clone()
            },
            ..base.clone()
        };
        let out = match hash {
            Some(h) => dir.eval_dir(h, label),
            None => dir.layout().direct_eval(label).root().to_path_buf(),
        };
        let participants = match (draw, &self.fresh) {
            (Draw::Fresh, Some(p)) => p.clone(),
            _ => self.participants.clone(),
        };
        // Decile progress lines (not a bar): training runs for hours against
        // real endpoints, often with stderr going to a log file.
        let options = RunOptions {
            out,
            concurrency: self.concurrency,
            adaptive: None,
            force_new: false,
            progress: ProgressDisplay::Lines,
            max_requeues: 2,
        };
        let executor: Arc<dyn eval::EpisodeExecutor> = match &self.isolation {
            None => Arc::new(eval::InProcess {
                config: Arc::new(config.clone()),
                domain: self.domain.clone(),
                harness: loaded,
                participants,
            }),
            Some((pool, job)) => {
                let mut services = job.services.clone();
                if draw == Draw::Fresh && self.fresh.is_some() {
                    // The workers' models bypass the response cache too.
                    services.cache = ecdysis_model::CachePolicy::Off;
                }
                Arc::new(ecdysis_runner::isolate::ProcessExecutor {
                    pool: pool.clone(),
                    job: Arc::new(ecdysis_runner::isolate::EpisodeJob {
                        harness: hash.cloned(),
                        services,
                        ..job.clone()
                    }),
                    domain: self.domain.clone(),
                    ledger: Some(self.ledger.clone()),
                })
            }
        };
        Ok((config, options, executor))
    }

    fn say(&self, line: impl std::fmt::Display) {
        tracing::info!(target: PROGRESS, "{line}");
    }
}

/// An evaluation's episodes by task and trial: the trajectories file holds
/// them in the order they finished, which concurrent episodes make differ
/// from run to run, and everything training builds from them (failure
/// groups, the examples the roles and coders read) must not.
fn in_task_order(mut records: Vec<EpisodeRecord>) -> Vec<EpisodeRecord> {
    records.sort_by(|a, b| (&a.task_id, a.trial).cmp(&(&b.task_id, b.trial)));
    records
}

/// How an evaluation's progress line names a fresh draw.
fn fresh_note(draw: Draw) -> &'static str {
    if draw == Draw::Fresh {
        " (fresh draw)"
    } else {
        ""
    }
}

/// The tasks a run trains on: the whole split or a selected budget.
pub(crate) struct TrainTasks {
    tasks: Vec<String>,
    /// The evaluation label (`train`, or `train-<strategy>-<budget>`).
    label: String,
    selection: Option<Selection>,
}

/// Why the loop should stop before the next round, if it should.
fn stop_before_round(
    config: &TrainConfig,
    dir: &TrainDir,
    done: &[RoundRecord],
    coder_calls: u32,
    usd: f64,
    call_refused: bool,
) -> Option<String> {
    if dir.stop_requested() {
        tracing::info!("stop file found: ending training");
        return Some("stop file".into());
    }
    let plateau = config.plan.plateau as usize;
    if plateau > 0 && done.len() >= plateau && done.iter().rev().take(plateau).all(|r| !r.accepted)
    {
        return Some("plateau".into());
    }
    spend_limits::reached(config, coder_calls, dir.paid_episodes(), usd, call_refused)
}

/// Run (or resume) training from the harness crate at `source` into `out`.
pub async fn train(
    config: TrainConfig,
    source: &Path,
    out: &Path,
    cx: TrainContext,
) -> Result<TrainSummary, TrainError> {
    let started = Instant::now();
    if !cx.coder.reads_prose() && !source.join(crate::code::TABLES_FILE).is_file() {
        return Err(TrainError::NoTables(source.to_path_buf()));
    }
    cx.check_containment()?;
    let (dir, mut done) = TrainDir::open(out, &config)?;
    // Spending of earlier processes of this run counts toward the budget,
    // and every model call is checked against it before it is sent.
    dir.import_ledger(&cx.ledger)?;
    cx.ledger.set_spend_limit(config.plan.max_usd);
    // The WIT package sits beside the staging crate, where `../wit` finds it.
    staging::fresh_copy(&source.join("../wit"), &out.join("wit"))?;
    let initial = initial_harness(&cx, &dir, &config, source)?;
    let mut incumbent = dir.incumbent(&initial, &done)?;
    let tasks = training_tasks(&cx, &dir, &config, &initial).await?;
    let (init_summary, _) = cx
        .evaluate(
            &dir,
            &config.train,
            &initial,
            &tasks.tasks,
            config.train.settings.split.clone(),
            &tasks.label,
        )
        .await?;

    let power = power_line(
        &cx,
        &config,
        &init_summary.metrics.per_task,
        config.train.settings.trials,
    );
    cx.say(power.render().trim_end());

    let mut coder_calls: u32 = done.iter().map(|r| r.coder_calls).sum();
    let mut stopped = "rounds".to_string();
    for n in done.len() as u32 + 1..=config.plan.rounds {
        if let Some(why) = stop_before_round(
            &config,
            &dir,
            &done,
            coder_calls,
            cx.ledger.summary().total.usd,
            cx.ledger.spend_refused(),
        ) {
            stopped = why;
            break;
        }
        let round = round::Round::new(&cx, &config, &dir, &tasks, n, incumbent.clone());
        let record = round.run(&mut coder_calls).await?;
        if record.accepted
            && let Some(c) = &record.candidate
        {
            incumbent = c.clone();
        }
        done.push(record);
    }

    // The final incumbent's training score, then the held-out test split.
    let final_train_score = if config.gate_measure.remeasure {
        // Its latest measurement: a fresh one would be yet another draw.
        latest_score(&done, &incumbent).unwrap_or(init_summary.metrics.accuracy)
    } else {
        cx.evaluate(
            &dir,
            &config.train,
            &incumbent,
            &tasks.tasks,
            config.train.settings.split.clone(),
            &tasks.label,
        )
        .await?
        .0
        .metrics
        .accuracy
    };
    let mut seconds = PhaseTimes::default();
    for r in &done {
        seconds.add(&r.seconds);
    }
    let layer_selection = if config.plan.select_layers {
        Some(select_layers(&cx, &dir, &config, &tasks, &incumbent).await?)
    } else {
        None
    };
    let chosen = layer_selection
        .as_ref()
        .map(|a| a.chosen)
        .unwrap_or_default();
    let clock = Instant::now();
    let test = test_report(&cx, &dir, &config, (&initial, &incumbent), chosen).await?;
    seconds.test_eval += clock.elapsed().as_secs_f64();
    dir.save_ledger(&cx.ledger)?;
    let simulated = config.train.agent_model.is_simulated();
    let summary = TrainSummary {
        method: config.plan.method,
        initial: initial.clone(),
        incumbent: incumbent.clone(),
        accepted: done.iter().filter(|r| r.accepted).count() as u32,
        rounds: done,
        initial_train_score: init_summary.metrics.accuracy,
        final_train_score,
        test_score: test.as_ref().map(|t| t.final_.intervals.accuracy.estimate),
        test,
        coder_calls,
        episodes: dir.paid_episodes(),
        seconds,
        wall_seconds: started.elapsed().as_secs_f64(),
        stopped,
        selection: tasks.selection,
        layer_selection,
        power: Some(power),
        usage: cx.ledger.summary(),
        simulated,
        label: simulated.then(|| ecdysis_runner::eval::SIMULATED_LABEL.to_string()),
    };
    dir.write(RunLayout::SUMMARY, &summary)?;
    Ok(summary)
}

/// The incumbent's score in its latest measurement of the rounds.
fn latest_score(done: &[RoundRecord], incumbent: &ComponentHash) -> Option<f64> {
    done.iter().rev().find_map(|r| {
        if r.accepted && r.candidate.as_ref() == Some(incumbent) {
            r.candidate_score
        } else if r.incumbent == *incumbent {
            Some(r.incumbent_score)
        } else {
            None
        }
    })
}

/// The power line of an evaluation of `per_task` tasks with `trials` trials
/// each, at the gate's level (the strict gate's at
/// [`crate::gate::power::STRICT_GATE_ALPHA`]).
fn power_line(
    cx: &TrainContext,
    config: &TrainConfig,
    per_task: &[ecdysis_runner::eval::metrics::TaskResult],
    trials: u32,
) -> crate::gate::power::PowerStatement {
    let alpha = match config.plan.accept {
        AcceptRule::Paired { alpha } => alpha,
        AcceptRule::Strict => crate::gate::power::STRICT_GATE_ALPHA,
    };
    let rates: Vec<f64> = per_task.iter().map(|t| t.mean_reward).collect();
    let spec = crate::gate::power::PowerSpec::new(
        alpha,
        cx.power.power,
        cx.power.target_effect,
        config.train.settings.seed,
    );
    crate::gate::power::statement(&rates, trials, &spec)
}

/// The final incumbent's layer ablation on the training tasks (the full
/// variant is the incumbent's own training evaluation, resumed).
async fn select_layers(
    cx: &TrainContext,
    dir: &TrainDir,
    config: &TrainConfig,
    tasks: &TrainTasks,
    incumbent: &ComponentHash,
) -> Result<crate::ablate::Ablation, TrainError> {
    cx.say(format!(
        "selecting layers: {} with each layer off in turn on the training tasks",
        incumbent.short()
    ));
    let evaluate = async |layers: LayerSet| -> Result<crate::ablate::Evaluated, TrainError> {
        let base = RunConfig {
            settings: RunSettings {
                layers,
                ..config.train.settings.clone()
            },
            ..config.train.clone()
        };
        let label = variant_label(&tasks.label, layers);
        let (summary, episodes) = cx
            .evaluate_with(
                dir,
                &base,
                Some(incumbent),
                &tasks.tasks,
                config.train.settings.split.clone(),
                &label,
                Draw::Cached,
            )
            .await?;
        Ok(crate::ablate::Evaluated {
            per_task: summary.metrics.per_task,
            episodes,
            dir: dir.eval_dir(incumbent, &label),
        })
    };
    crate::ablate::ablate(evaluate, config.train.settings.seed)
        .await
        .map_err(|e| match e {
            crate::ablate::AblationError::Evaluate(e) => e,
            other => TrainError::Corrupt {
                path: dir.root().to_path_buf(),
                message: other.to_string(),
            },
        })
}

/// The evaluation label of a layer variant: the plain label for the full
/// harness (so its evaluation is the one the rounds made), else the label
/// with the variant's name.
fn variant_label(label: &str, layers: LayerSet) -> String {
    if layers.is_all() {
        label.to_string()
    } else {
        format!("{label}-{}", crate::ablate::variant_name(layers))
    }
}

/// The initial and final harness (and Direct when asked, and the final
/// harness with only the `chosen` layers when layer selection dropped any)
/// on the held-out split with `test_trials` trials per task; `None`
/// without a test split.
async fn test_report(
    cx: &TrainContext,
    dir: &TrainDir,
    config: &TrainConfig,
    (initial, incumbent): (&ComponentHash, &ComponentHash),
    chosen: LayerSet,
) -> Result<Option<TestReport>, TrainError> {
    if config.test_tasks.is_empty() {
        return Ok(None);
    }
    let base = RunConfig {
        settings: RunSettings {
            trials: config.plan.test_trials.max(1),
            ..config.train.settings.clone()
        },
        ..config.train.clone()
    };
    let label = format!("test-k{}", base.settings.trials);
    let (initial_score, initial_tasks) =
        test_score(cx, dir, config, &base, &label, Some(initial)).await?;
    // What the held-out comparison with the starting harness can detect.
    let power = power_line(cx, config, &initial_tasks, base.settings.trials);
    cx.say(format!("held-out {}", power.render().trim_end()));
    let final_score = if incumbent == initial {
        initial_score.clone()
    } else {
        test_score(cx, dir, config, &base, &label, Some(incumbent))
            .await?
            .0
    };
    let direct = if config.plan.test_direct {
        Some(test_score(cx, dir, config, &base, &label, None).await?.0)
    } else {
        None
    };
    let chosen_layers = if chosen.is_all() {
        None
    } else {
        let variant = RunConfig {
            settings: RunSettings {
                layers: chosen,
                ..base.settings.clone()
            },
            ..base.clone()
        };
        let label = variant_label(&label, chosen);
        Some(
            test_score(cx, dir, config, &variant, &label, Some(incumbent))
                .await?
                .0,
        )
    };
    Ok(Some(TestReport {
        split: config.plan.test_split.clone(),
        initial: initial_score,
        final_: final_score,
        direct,
        chosen_layers,
        power: Some(power),
    }))
}

/// One harness (or Direct) on the held-out tasks, and its per-task results.
async fn test_score(
    cx: &TrainContext,
    dir: &TrainDir,
    config: &TrainConfig,
    base: &RunConfig,
    label: &str,
    hash: Option<&ComponentHash>,
) -> Result<(TestScore, Vec<ecdysis_runner::eval::metrics::TaskResult>), TrainError> {
    let (summary, _) = cx
        .evaluate_with(
            dir,
            base,
            hash,
            &config.test_tasks,
            config.plan.test_split.clone(),
            label,
            Draw::Cached,
        )
        .await?;
    let path = match hash {
        Some(h) => dir.eval_dir(h, label),
        None => dir.layout().direct_eval(label).root().to_path_buf(),
    };
    let m = &summary.metrics;
    let score = TestScore {
        harness: hash
            .map(|h| h.to_string())
            .unwrap_or_else(|| "direct".into()),
        tasks: m.tasks,
        trials: base.settings.trials,
        episodes: m.episodes,
        intervals: ecdysis_runner::eval::intervals::task_intervals(
            &m.per_task,
            TEST_BOOTSTRAP,
            config.train.settings.seed,
        ),
        dir: path
            .strip_prefix(dir.root())
            .unwrap_or(&path)
            .to_string_lossy()
            .into_owned(),
    };
    Ok((score, summary.metrics.per_task))
}

/// Bootstrap resamples of the held-out intervals.
const TEST_BOOTSTRAP: usize = 2000;

/// The starting harness: built from `source` on the first run (with its
/// rule tables emptied under `start_blank`), read back on a resume.
fn initial_harness(
    cx: &TrainContext,
    dir: &TrainDir,
    config: &TrainConfig,
    source: &Path,
) -> Result<ComponentHash, TrainError> {
    if let Some(h) = dir.initial()? {
        return Ok(h);
    }
    let staging = dir.staging();
    staging::fresh_copy(source, &staging)?;
    if config.plan.start_blank {
        let path = staging.join(crate::code::TABLES_FILE);
        let mut text =
            std::fs::read_to_string(&path).map_err(|e| PathError::new("read", &path, e))?;
        rule_coder::blank_tables(&mut text)
            .map_err(|m| PathError::new("edit", &path, std::io::Error::other(m)))?;
        ecdysis_sys::fsutil::atomic_write(&path, text.as_bytes())
            .map_err(|e| PathError::new("write", &path, e))?;
    }
    // The user's own source: built with network, which also fills the
    // registry cache the candidates' offline builds use.
    let m = cx.build(&staging, None, Trust::Own)?;
    staging::fresh_copy(&staging, &dir.candidate(&m.hash).source())?;
    dir.set_initial(&m.hash)?;
    Ok(m.hash)
}

/// The training tasks: the whole split, or a budget chosen from it by how
/// the initial harness fails (or at random), kept in `selection.json`.
async fn training_tasks(
    cx: &TrainContext,
    dir: &TrainDir,
    config: &TrainConfig,
    initial: &ComponentHash,
) -> Result<TrainTasks, TrainError> {
    let Some(sel) = config.plan.select else {
        return Ok(TrainTasks {
            tasks: config.train.tasks.clone(),
            label: "train".into(),
            selection: None,
        });
    };
    let label = format!("train-{}-{}", sel.strategy.as_str(), sel.budget);
    if let Some(selection) = dir.read::<Selection>(TrainLayout::SELECTION)? {
        return Ok(TrainTasks {
            tasks: selection.tasks.clone(),
            label,
            selection: Some(selection),
        });
    }
    // Failure-aware selection needs to see how the starting harness does
    // on every training task; random selection does not.
    let records = match sel.strategy {
        SelectStrategy::FailureAware | SelectStrategy::Recurring => {
            cx.evaluate(
                dir,
                &config.train,
                initial,
                &config.train.tasks,
                config.train.settings.split.clone(),
                "train-all",
            )
            .await?
            .1
        }
        SelectStrategy::Random => vec![],
    };
    let selection = task_budget::select(
        sel.strategy,
        sel.budget,
        &config.train.tasks,
        &records,
        config.plan.lambda,
        sel.seed,
    );
    dir.write(TrainLayout::SELECTION, &selection)?;
    cx.say(format!(
        "selected {} of {} training tasks ({}): {}",
        selection.tasks.len(),
        config.train.tasks.len(),
        sel.strategy.as_str(),
        selection.tasks.join(",")
    ));
    Ok(TrainTasks {
        tasks: selection.tasks.clone(),
        label,
        selection: Some(selection),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two runs of one evaluation whose episodes finished in other orders
    /// give training the same list.
    #[test]
    fn an_evaluation_reads_the_same_whatever_order_its_episodes_finished_in() {
        let ids = |records: &[EpisodeRecord]| -> Vec<(String, u32)> {
            records
                .iter()
                .map(|r| (r.task_id.clone(), r.trial))
                .collect()
        };
        let finished = [("b", 1), ("a", 0), ("b", 0), ("c", 0), ("a", 1)];
        let one: Vec<_> = finished
            .iter()
            .map(|(t, k)| EpisodeRecord::bare(t, *k, 0.0))
            .collect();
        let other: Vec<_> = one.iter().rev().cloned().collect();
        let (one, other) = (in_task_order(one), in_task_order(other));
        assert_eq!(ids(&one), ids(&other));
        assert_eq!(
            ids(&one),
            [("a", 0), ("a", 1), ("b", 0), ("b", 1), ("c", 0)].map(|(t, k)| (t.to_string(), k))
        );
    }
}
