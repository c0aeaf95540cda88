//! The evaluation runner: tasks × trials through the agent loop, scored by
//! the environment's evaluator, written to a resumable result directory.

pub mod concurrency;
pub mod intervals;
pub mod metrics;
pub mod participants;
pub mod report;
pub mod rundir;
pub mod spec;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::agent::{EndReason, EpisodeRecord, EpisodeSetup, run_episode_to_state};
use ecdysis_env::{Domain, EnvError, Trajectory};
use ecdysis_model::{LedgerSummary, ModelId, SamplingArgs, UsageLedger};
use ecdysis_sandbox::sandbox::{FailurePolicy, LayerSet, Limits, LoadedHarness};
use ecdysis_sandbox::store::ComponentHash;

pub use metrics::Metrics;
pub use participants::{Participants, ParticipantsError};
pub use report::ProgressDisplay;
pub use rundir::{RunDir, RunDirError};
pub use spec::{ModelServices, RunSpec, RunSpecError};

/// What a run's specification and its stored configuration share: the
/// benchmark, the trials, the seed, and the rules every episode runs under.
/// Both flatten it, so `config.json` and a worker's job keep flat fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSettings {
    /// Benchmark domain, e.g. `tau2/retail`.
    pub domain: String,
    /// Task split (`None`: every task).
    pub split: Option<String>,
    /// Trials per task.
    pub trials: u32,
    /// Run seed; every episode's seed derives from it, the task and the
    /// trial ([`episode_seed`]).
    pub seed: u64,
    /// Step cap per episode (message hops).
    pub max_steps: u32,
    /// Tool-error cap per episode.
    pub max_errors: u32,
    /// Largest agent request, in estimated prompt tokens: a request over it
    /// is not sent and the episode ends as `request_too_large` (`None`: no
    /// cap; the CLI defaults it to the endpoint's context when it reports
    /// one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_request_tokens: Option<u64>,
    /// What a failing hook does.
    pub policy: FailurePolicy,
    /// The harness's layers that run (`--layers`; absent: all four).
    #[serde(
        default,
        skip_serializing_if = "ecdysis_sandbox::sandbox::layers::is_all"
    )]
    pub layers: LayerSet,
    /// Sandbox limits of every hook call.
    pub limits: Limits,
    /// The agent's sampling parameters.
    pub sampling: SamplingArgs,
}

/// Everything that determines a run's results. Stored as `config.json`; a
/// resume with a different config is refused. (Concurrency is not in it:
/// it changes speed, never results.)
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunConfig {
    /// The WIT world the host implements.
    pub world: String,
    /// blake3 hash of the harness component, or `None` for Direct.
    pub harness: Option<ComponentHash>,
    /// Domain, split, trials, seed, caps, limits, policy, layers, sampling.
    #[serde(flatten)]
    pub settings: RunSettings,
    /// The task ids, in order.
    pub tasks: Vec<String>,
    /// The agent model: `sim:<profile>` or an endpoint's model name.
    pub agent_model: ModelId,
    /// The agent's `--agent-base-url`, if given (`None`: `OPENAI_BASE_URL` or
    /// the default endpoint; unused by a `sim:` agent).
    pub agent_base_url: Option<String>,
    /// The user simulator: `scripted` or an endpoint's model name.
    pub user_model: String,
    /// The user simulator's `--user-base-url`, if given (`None`: the agent's
    /// endpoint).
    pub user_base_url: Option<String>,
}

/// How to run (not what: that is the config).
pub struct RunOptions {
    /// The result directory (`config.json`, `trajectories.jsonl`,
    /// `summary.json`).
    pub out: PathBuf,
    /// Episodes run at once (at least 1); with `adaptive`, the most.
    pub concurrency: usize,
    /// Adapt the episodes in flight, between 1 and `concurrency`, to what
    /// the endpoint turns into throughput (`--concurrency auto`); `None`:
    /// always `concurrency`.
    pub adaptive: Option<concurrency::AdaptiveConcurrency>,
    /// A directory holding another configuration is moved aside instead of
    /// refusing the run.
    pub force_new: bool,
    /// A bar, plain lines every 10%, or nothing.
    pub progress: ProgressDisplay,
    /// Extra attempts for an episode that ended in an infrastructure error.
    pub max_requeues: u32,
}

/// Why a run could not complete.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The result directory could not be claimed, read or written.
    #[error(transparent)]
    RunDir(#[from] RunDirError),
    /// The domain failed: an unknown task, or its evaluator failed.
    #[error(transparent)]
    Env(#[from] EnvError),
    /// The episode's participants (agent, user) could not be built.
    #[error(transparent)]
    Participants(#[from] ParticipantsError),
    /// The task selection is empty.
    #[error("no tasks to run: {0}")]
    NoTasks(String),
    /// The run specification is impossible (see [`RunSpecError`]).
    #[error(transparent)]
    Spec(#[from] RunSpecError),
    #[error("worker process: {0}")]
    /// A worker process could not serve an episode (`--isolate process`).
    Worker(String),
}

/// `summary.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunSummary {
    /// What was run.
    pub config: RunConfig,
    /// The scores of every finished episode (resumed ones included).
    pub metrics: Metrics,
    /// Episodes that ended in infrastructure errors after every requeue:
    /// not scored, run again on resume.
    pub unfinished: Vec<(String, u32)>,
    /// The do-nothing floor of the chosen tasks: how many an agent that
    /// does nothing solves, next to the score.
    pub floor_solved: u64,
    /// How many tasks the do-nothing floor was measured on (the run's tasks).
    pub floor_tasks: u64,
    /// Wall time of this invocation, in seconds.
    pub wall_seconds: f64,
    /// Episodes run by this invocation (the rest were resumed from disk).
    pub ran_now: u64,
    /// Token usage and cost of the metered models, when the run had a ledger.
    #[serde(default)]
    pub ledger: Option<LedgerSummary>,
    /// What the adaptive limit did (`--concurrency auto`; absent for a
    /// fixed concurrency).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<concurrency::ConcurrencyReport>,
}

/// The seed of one episode, derived from the run seed.
pub fn episode_seed(seed: u64, task_id: &str, trial: u32) -> u64 {
    let h = blake3::hash(format!("{seed}/{task_id}/{trial}").as_bytes());
    u64::from_le_bytes(h.as_bytes()[..8].try_into().expect("8 bytes"))
}

/// Score a finished episode against its task's oracle.
pub fn score(domain: &dyn Domain, record: &mut EpisodeRecord) -> Result<(), RunError> {
    score_final(domain, record, None)
}

/// [`score`] given the state the episode ended in (see
/// [`Domain::evaluate_final`]); `None` replays the episode's calls.
pub fn score_final(
    domain: &dyn Domain,
    record: &mut EpisodeRecord,
    final_state: Option<ecdysis_env::FinalState>,
) -> Result<(), RunError> {
    let (_, oracle) = domain.task(&record.task_id)?;
    let trajectory = Trajectory {
        tool_calls: record.executed_calls(),
        assistant_texts: record.agent_texts(),
        termination: record.end.termination(),
    };
    let ev = domain.evaluate_final(&oracle, &trajectory, final_state)?;
    record.reward = ev.reward;
    record.success = ev.success;
    record.evaluation = serde_json::to_value(&ev).ok();
    Ok(())
}

/// Runs one episode of a run to its end and scores it (an episode that
/// ended in an infrastructure error is returned unscored: the runner
/// requeues it). In this process ([`InProcess`]) or in a worker process
/// (`isolate::ProcessExecutor`, `--isolate process`).
pub trait EpisodeExecutor: Send + Sync {
    /// Run episode `trial` of `task_id` to its end; scored unless it ended in an infrastructure error.
    fn episode(
        self: Arc<Self>,
        task_id: String,
        trial: u32,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<EpisodeRecord, RunError>> + Send>>;
}

/// Episodes run as tasks of this process: the default.
pub struct InProcess {
    /// The run's configuration.
    pub config: Arc<RunConfig>,
    /// The benchmark domain.
    pub domain: Arc<dyn Domain>,
    /// The loaded harness (`None`: Direct).
    pub harness: Option<LoadedHarness>,
    /// The agent and user models.
    pub participants: Arc<dyn Participants>,
}

impl EpisodeExecutor for InProcess {
    fn episode(
        self: Arc<Self>,
        task_id: String,
        trial: u32,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<EpisodeRecord, RunError>> + Send>>
    {
        Box::pin(async move {
            run_and_score(
                &self.config,
                self.domain.clone(),
                self.harness.clone(),
                &*self.participants,
                &task_id,
                trial,
            )
            .await
        })
    }
}

/// One episode, scored unless it ended in an infrastructure error: what
/// every executor runs (a worker process calls it too).
pub async fn run_and_score(
    config: &RunConfig,
    domain: Arc<dyn Domain>,
    harness: Option<LoadedHarness>,
    participants: &dyn Participants,
    task_id: &str,
    trial: u32,
) -> Result<EpisodeRecord, RunError> {
    let (mut record, final_state) = one_episode(
        config,
        domain.clone(),
        harness,
        participants,
        task_id,
        trial,
    )
    .await?;
    if record.end != EndReason::InfrastructureError {
        score_final(&*domain, &mut record, final_state)?;
    }
    Ok(record)
}

/// Run (or resume) an evaluation.
pub async fn run(
    config: RunConfig,
    options: RunOptions,
    domain: Arc<dyn Domain>,
    harness: Option<LoadedHarness>,
    participants: Arc<dyn Participants>,
    ledger: Option<Arc<UsageLedger>>,
) -> Result<RunSummary, RunError> {
    let executor = Arc::new(InProcess {
        config: Arc::new(config.clone()),
        domain: domain.clone(),
        harness,
        participants,
    });
    run_with(config, options, domain, executor, ledger).await
}

/// Run (or resume) an evaluation whose episodes `executor` runs.
pub async fn run_with(
    config: RunConfig,
    options: RunOptions,
    domain: Arc<dyn Domain>,
    executor: Arc<dyn EpisodeExecutor>,
    ledger: Option<Arc<UsageLedger>>,
) -> Result<RunSummary, RunError> {
    let started = Instant::now();
    let ran = execute(&config, &options, executor, None).await?;
    let records: Vec<EpisodeRecord> = ran.finished.into_values().collect();
    let metrics = metrics::compute(&records);
    let floor_solved = do_nothing_solved(&*domain, &config.tasks)?;
    let summary = RunSummary {
        floor_tasks: config.tasks.len() as u64,
        config,
        metrics,
        unfinished: ran.unfinished,
        floor_solved,
        wall_seconds: started.elapsed().as_secs_f64(),
        ran_now: ran.ran_now,
        ledger: ledger.map(|l| l.summary()),
        concurrency: ran.concurrency,
    };
    ran.dir.write_summary(&summary)?;
    Ok(summary)
}

/// Run (or resume) only the episodes of `only`'s tasks, in the result
/// directory of the whole `config`: a later [`run_with`] of the same
/// config resumes them and runs the rest. Writes no summary (the
/// directory is not complete); returns every finished episode of the
/// directory, of any task.
pub async fn run_tasks(
    config: RunConfig,
    options: RunOptions,
    executor: Arc<dyn EpisodeExecutor>,
    only: &BTreeSet<String>,
) -> Result<Vec<EpisodeRecord>, RunError> {
    let ran = execute(&config, &options, executor, Some(only)).await?;
    Ok(ran.finished.into_values().collect())
}

/// What [`execute`] leaves: the open directory and its episodes.
struct Executed {
    dir: Arc<RunDir>,
    finished: BTreeMap<(String, u32), EpisodeRecord>,
    unfinished: Vec<(String, u32)>,
    ran_now: u64,
    concurrency: Option<concurrency::ConcurrencyReport>,
}

/// Claim the result directory and run its missing episodes (of `only`'s
/// tasks, when given).
async fn execute(
    config: &RunConfig,
    options: &RunOptions,
    executor: Arc<dyn EpisodeExecutor>,
    only: Option<&BTreeSet<String>>,
) -> Result<Executed, RunError> {
    if config.tasks.is_empty() {
        return Err(RunError::NoTasks(
            "the task selection is empty (check --split and --tasks)".into(),
        ));
    }
    let (dir, done) = RunDir::open(&options.out, config, options.force_new)?;
    let dir = Arc::new(dir);
    let mut finished = rundir::by_pair(done);
    let wanted: Vec<(String, u32)> = config
        .tasks
        .iter()
        .filter(|t| only.is_none_or(|o| o.contains(*t)))
        .flat_map(|t| (0..config.settings.trials).map(move |trial| (t.clone(), trial)))
        .collect();
    let total = wanted.len() as u64;
    let resumed = wanted.iter().filter(|k| finished.contains_key(*k)).count();
    let resumed_successes = wanted
        .iter()
        .filter(|k| finished.get(*k).is_some_and(|r| r.success))
        .count() as u64;
    let mut todo: Vec<(String, u32)> = wanted
        .into_iter()
        .filter(|k| !finished.contains_key(k))
        .collect();
    let progress =
        report::Progress::new(total, resumed as u64, resumed_successes, options.progress);
    let semaphore = Arc::new(tokio::sync::Semaphore::new(options.concurrency.max(1)));
    let mut adaptive = options.adaptive.as_ref().map(|a| {
        let mut a = a.clone();
        a.settings.max = a.settings.max.min(options.concurrency.max(1));
        a.settings.start = a.settings.start.min(a.settings.max);
        concurrency::Driver::new(&a)
    });
    let mut ticks = tokio::time::interval(concurrency::TICK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut in_flight = 0usize;
    let mut attempts: BTreeMap<(String, u32), u32> = BTreeMap::new();
    let mut unfinished = Vec::new();
    let mut ran_now = 0u64;

    while !todo.is_empty() {
        let mut queue = std::mem::take(&mut todo).into_iter().peekable();
        let mut set = tokio::task::JoinSet::new();
        loop {
            // Episodes start in task order, each as soon as a slot frees
            // (the permit is taken here, before the spawn, so the order does
            // not depend on which task the scheduler polls first), and the
            // bookkeeping of finished ones never delays the next start.
            tokio::select! {
                biased;
                permit = semaphore.clone().acquire_owned(),
                    if queue.peek().is_some()
                        && adaptive.as_ref().is_none_or(|a| in_flight < a.limit()) =>
                {
                    let permit = permit.expect("semaphore open");
                    in_flight += 1;
                    let (task_id, trial) = queue.next().expect("peeked");
                    *attempts.entry((task_id.clone(), trial)).or_default() += 1;
                    let executor = executor.clone();
                    let dir = dir.clone();
                    set.spawn(async move {
                        let result = {
                            let _permit = permit;
                            executor.episode(task_id.clone(), trial).await
                        };
                        let result = match result {
                            // Written here, on the runtime's thread: an
                            // append serialises and writes to the page
                            // cache and never waits for the disk (the log's
                            // syncer thread syncs), so handing it to the
                            // blocking pool cost more (two thread switches)
                            // than it saved.
                            Ok(record) if record.end != EndReason::InfrastructureError => {
                                dir.append(&record).map(|()| record).map_err(RunError::from)
                            }
                            other => other,
                        };
                        (task_id, trial, result)
                    });
                }
                joined = set.join_next(), if !set.is_empty() => {
                    let (task_id, trial, result) =
                        joined.expect("joined").expect("episode task does not panic");
                    in_flight -= 1;
                    let record = result?;
                    if record.end == EndReason::InfrastructureError {
                        let n = attempts[&(task_id.clone(), trial)];
                        progress.note(&format!(
                            "{task_id} trial {trial}: infrastructure error ({}), {}",
                            record.end_detail.as_deref().unwrap_or("?"),
                            if n <= options.max_requeues {
                                "requeued"
                            } else {
                                "left unscored"
                            }
                        ));
                        if n <= options.max_requeues {
                            todo.push((task_id, trial));
                        } else {
                            unfinished.push((task_id, trial));
                        }
                        continue;
                    }
                    ran_now += 1;
                    progress.finished(&record);
                    finished.insert((task_id, trial), record);
                }
                _ = ticks.tick(), if adaptive.is_some() && !set.is_empty() => {
                    if let Some(moved) = adaptive.as_mut().and_then(|a| a.tick(in_flight)) {
                        progress.note(&concurrency::describe(&moved.change));
                    }
                }
                else => break,
            }
        }
        if !todo.is_empty() {
            // Give a struggling endpoint a moment before the requeued round.
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    progress.done();
    Ok(Executed {
        dir,
        finished,
        unfinished,
        ran_now,
        concurrency: adaptive.map(|a| a.report()),
    })
}

/// The label every output shows next to a number from a `sim:` testbed
/// agent: such numbers are never benchmark results.
pub const SIMULATED_LABEL: &str = "simulated agent — not a benchmark result";

/// The harness of a run: its component hash and the loaded component.
pub type RunHarness = (ComponentHash, LoadedHarness);

/// Run (or resume) `spec` with `harness` (`None`: Direct) into
/// `options.out`, with the participants metered through `hub`: the library's
/// one call for an evaluation (`run`, the trainer's evaluations, the
/// experiment's transfer runs, the runner bench and the service use it).
pub async fn run_spec(
    spec: &RunSpec,
    harness: Option<RunHarness>,
    domain: Arc<dyn Domain>,
    hub: &ecdysis_model::ModelHub,
    options: RunOptions,
) -> Result<RunSummary, RunError> {
    spec.validate()?;
    let tasks = spec.task_ids(&*domain)?;
    let participants = spec.participants(hub, &*domain)?;
    let (hash, loaded) = match harness {
        Some((hash, loaded)) => (Some(hash), Some(loaded)),
        None => (None, None),
    };
    let config = spec.config(hash, tasks);
    run(
        config,
        options,
        domain,
        loaded,
        participants,
        Some(hub.ledger().clone()),
    )
    .await
}

/// [`run_spec`] with the episodes run by `executor` (a worker pool) instead
/// of this process; `harness` is the component hash the executor loads.
pub async fn run_spec_with(
    spec: &RunSpec,
    harness: Option<ComponentHash>,
    domain: Arc<dyn Domain>,
    executor: Arc<dyn EpisodeExecutor>,
    ledger: Option<Arc<UsageLedger>>,
    options: RunOptions,
) -> Result<RunSummary, RunError> {
    spec.validate()?;
    let tasks = spec.task_ids(&*domain)?;
    let config = spec.config(harness, tasks);
    run_with(config, options, domain, executor, ledger).await
}

/// How many of `tasks` an agent that does nothing solves (no calls, no
/// messages, then stops): the floor to read the score against.
pub fn do_nothing_solved(domain: &dyn Domain, tasks: &[String]) -> Result<u64, RunError> {
    let unique: BTreeSet<&String> = tasks.iter().collect();
    let mut solved = 0;
    for t in unique {
        solved += u64::from(idle_solves(domain, t)?);
    }
    Ok(solved)
}

/// Whether an agent that stops at once solves `task` (one task of
/// [`do_nothing_solved`]).
pub fn idle_solves(domain: &dyn Domain, task: &str) -> Result<bool, RunError> {
    let (_, oracle) = domain.task(task)?;
    let idle = Trajectory {
        termination: ecdysis_env::Termination::AgentStop,
        ..Trajectory::default()
    };
    Ok(domain.evaluate(&oracle, &idle)?.success)
}

async fn one_episode(
    config: &RunConfig,
    domain: Arc<dyn Domain>,
    harness: Option<LoadedHarness>,
    participants: &dyn Participants,
    task_id: &str,
    trial: u32,
) -> Result<(EpisodeRecord, Option<ecdysis_env::FinalState>), RunError> {
    let (view, oracle) = domain.task(task_id)?;
    let seed = episode_seed(config.settings.seed, task_id, trial);
    // The oracle goes to the participants (user simulator, testbed agent)
    // and nowhere else; the loop below never sees it.
    let (agent, user) = participants.build(&view, &oracle, trial, seed)?;
    drop(oracle);
    let setup = EpisodeSetup {
        domain,
        task: view,
        trial,
        seed,
        agent,
        user,
        harness,
        policy: config.settings.policy,
        layers: config.settings.layers,
        max_steps: config.settings.max_steps,
        max_errors: config.settings.max_errors,
        max_request_tokens: config.settings.max_request_tokens,
        sampling: SamplingArgs {
            seed: config.settings.sampling.seed.or(Some(seed)),
            ..config.settings.sampling.clone()
        },
    };
    Ok(run_episode_to_state(setup).await)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Records which episodes it was asked for; every episode scores 1.
    struct Counting(Mutex<Vec<(String, u32)>>);

    impl EpisodeExecutor for Counting {
        fn episode(
            self: Arc<Self>,
            task_id: String,
            trial: u32,
        ) -> std::pin::Pin<
            Box<dyn std::future::Future<Output = Result<EpisodeRecord, RunError>> + Send>,
        > {
            Box::pin(async move {
                self.0.lock().unwrap().push((task_id.clone(), trial));
                Ok(EpisodeRecord::bare(&task_id, trial, 1.0))
            })
        }
    }

    #[tokio::test]
    async fn a_partial_run_leaves_the_other_tasks_to_a_later_resume() {
        let tmp = tempfile::tempdir().unwrap();
        let tasks: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let mut config = RunSpec::default().config(None, tasks);
        config.settings.trials = 2;
        let options = || RunOptions {
            out: tmp.path().join("eval"),
            concurrency: 2,
            adaptive: None,
            force_new: false,
            progress: ProgressDisplay::Off,
            max_requeues: 0,
        };
        let exec = Arc::new(Counting(Mutex::new(vec![])));
        let only: BTreeSet<String> = ["b".to_string()].into();
        let got = run_tasks(config.clone(), options(), exec.clone(), &only)
            .await
            .unwrap();
        let keys: Vec<(String, u32)> = got.iter().map(|r| (r.task_id.clone(), r.trial)).collect();
        assert_eq!(keys, [("b".to_string(), 0), ("b".to_string(), 1)]);
        // Asked again, nothing runs: the directory already has them.
        run_tasks(config.clone(), options(), exec.clone(), &only)
            .await
            .unwrap();
        assert_eq!(exec.0.lock().unwrap().len(), 2);
        assert!(!tmp.path().join("eval").join(rundir::SUMMARY_FILE).exists());
        // A run of every task resumes them and runs only the others.
        exec.0.lock().unwrap().clear();
        let all: BTreeSet<String> = config.tasks.iter().cloned().collect();
        let got = run_tasks(config, options(), exec.clone(), &all)
            .await
            .unwrap();
        let ran: BTreeSet<String> = exec.0.lock().unwrap().iter().map(|k| k.0.clone()).collect();
        assert_eq!(ran, ["a".to_string(), "c".to_string()].into());
        assert_eq!(got.len(), 6);
    }
}
