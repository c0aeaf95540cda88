//! The evolution loop (`ecdysis-host train`).
//!
//! Per round: evaluate the incumbent on the training tasks (cached per
//! component hash), collect scrubbed failure records, aggregate them across
//! tasks, diagnose a spec, let the coder edit a staging copy of the
//! incumbent's source, build, `check`, screen, evaluate, and accept iff the
//! training score strictly beats the incumbent's. Every decision is appended
//! to `rounds.jsonl`; the incumbent is a hash in the file `incumbent`.
//!
//! Run directory:
//! ```text
//! config.json  rounds.jsonl  incumbent  summary.json  ledger.json  wit/  staging/
//! selection.json          the chosen training tasks (with --select-train)
//! rounds/<n>/transcript.json   the diagnosis discussion and coder runs
//! candidates/<hash>/{source/, manifest.json, spec.json, transcript.json, diff.patch, train_summary.json}
//! evals/<hash>-<split>/   result directories of the runner (resumable)
//! ```
//!
//! Who diagnoses and who edits is the caller's choice ([`Diagnoser`],
//! [`CoderChoice`]): offline, the heuristic diagnoser and the rule coder; with
//! endpoints, the FDCR roles and an LLM editor or an external coding agent.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::accept::{self, AcceptRule};
use super::aggregate::{self, FailureGroup};
use super::coder::{Coder, CoderTask};
use super::fdcr::{self, EvidenceLimits, FdcrConfig, FdcrInput, FdcrOutcome, Roles};
use super::heuristic::{self, ToolFacts};
use super::records::{self, FailureRecord};
use super::rulecoder;
use super::screen;
use super::select::{self, SelectStrategy, Selection};
use super::spec::ChangeSpec;
use super::staging;
use crate::agent::EpisodeRecord;
use crate::env::Domain;
use crate::eval::{self, Participants, RunConfig, RunOptions, RunSummary};
use crate::fsutil::{PathError, atomic_write};
use crate::model::{CallRecord, LedgerSummary, UsageLedger};
use crate::sandbox::{Limits, Sandbox};
use crate::store::{BuildOptions, ComponentHash, ComponentStore};

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
    pub fn as_str(self) -> &'static str {
        match self {
            Method::SelfEvolution => "self-evolution",
            Method::EcdysisNofdcr => "ecdysis-nofdcr",
            Method::Ecdysis => "ecdysis",
        }
    }
}

/// Everything that determines a training run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainConfig {
    pub method: Method,
    pub rounds: u32,
    /// Episodes with reward below this are failures.
    pub lambda: f64,
    /// The runner config for training evaluations; its `harness` is
    /// replaced per candidate, its `tasks` are the training tasks.
    pub train: RunConfig,
    /// Held-out tasks, evaluated once at the end, never used for selection.
    pub test_tasks: Vec<String>,
    pub test_split: Option<String>,
    pub max_coder_calls: Option<u32>,
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
    /// Who diagnoses (`heuristic`, or `fdcr` with the role models), for the
    /// record: a resume with other roles is refused.
    #[serde(default = "default_diagnoser")]
    pub diagnoser: String,
    /// Who edits (`rules`, `editor:<model>`, `external:<program>`).
    #[serde(default = "default_coder")]
    pub coder: String,
    #[serde(default)]
    pub accept: AcceptRule,
    /// Budget: dollars over every role (agent, user, FDCR roles, coder),
    /// from the usage ledger and the price table.
    #[serde(default)]
    pub max_usd: Option<f64>,
    /// Train on a budget of tasks chosen from the training split.
    #[serde(default)]
    pub select: Option<SelectConfig>,
}

fn default_diagnoser() -> String {
    "heuristic".into()
}

fn default_coder() -> String {
    "rules".into()
}

/// `--select-train <strategy> --budget-tasks <n>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SelectConfig {
    pub strategy: SelectStrategy,
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
    Fdcr { roles: Roles, config: FdcrConfig },
}

/// Who implements a spec in the staging crate.
#[derive(Clone)]
pub enum CoderChoice {
    /// The offline rule coder: edits `src/tables.rs` from the spec's rules.
    Rules,
    /// A coding agent (the LLM editor or an external command).
    Agent(Arc<dyn Coder>),
}

/// One coder invocation, as `transcript.json` records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CoderRun {
    pub coder: String,
    pub ok: bool,
    /// Model calls or command runs inside this invocation.
    pub attempts: u32,
    pub changed_files: Vec<String>,
    pub build_ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub log: String,
}

/// `rounds/<n>/transcript.json` (and the candidate's copy).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoundTranscript {
    pub round: u32,
    pub diagnoser: String,
    /// The scrubbed evidence each diagnosed unit was shown (failure
    /// excerpts by group, and successes on the same tools).
    #[serde(default)]
    pub evidence: Vec<String>,
    /// FDCR discussions, one per diagnosed unit (empty for the heuristic).
    pub discussions: Vec<FdcrOutcome>,
    pub coder_runs: Vec<CoderRun>,
}

/// `ledger.json`: every metered model call of the run (across resumes) and
/// their totals per role and model.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LedgerFile {
    pub summary: LedgerSummary,
    pub calls: Vec<CallRecord>,
}

/// One round's record in `rounds.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoundRecord {
    pub round: u32,
    pub incumbent: String,
    pub incumbent_score: f64,
    pub candidate: Option<String>,
    pub candidate_score: Option<f64>,
    pub accepted: bool,
    /// Why not accepted (or `accepted`).
    pub decision: String,
    pub failures: usize,
    pub groups: usize,
    pub recurring_groups: usize,
    pub coder_calls: u32,
    pub spec: Option<ChangeSpec>,
    pub seconds: PhaseTimes,
    /// The paired test's p-value (`--accept paired`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p_value: Option<f64>,
    /// Dollars spent by every role during this round.
    #[serde(default)]
    pub usd: f64,
}

/// Seconds spent per phase.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseTimes {
    pub train_eval: f64,
    pub aggregation: f64,
    pub diagnosis: f64,
    pub coder: f64,
    pub build: f64,
    pub gate: f64,
    pub test_eval: f64,
}

impl PhaseTimes {
    fn add(&mut self, o: &PhaseTimes) {
        self.train_eval += o.train_eval;
        self.aggregation += o.aggregation;
        self.diagnosis += o.diagnosis;
        self.coder += o.coder;
        self.build += o.build;
        self.gate += o.gate;
        self.test_eval += o.test_eval;
    }
}

/// `summary.json` of a training run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrainSummary {
    pub method: Method,
    pub initial: String,
    pub incumbent: String,
    pub rounds: Vec<RoundRecord>,
    pub initial_train_score: f64,
    pub final_train_score: f64,
    pub test_score: Option<f64>,
    pub accepted: u32,
    pub coder_calls: u32,
    /// Episodes paid for by this training run (every evaluation, across
    /// resumes).
    pub episodes: u64,
    pub seconds: PhaseTimes,
    pub wall_seconds: f64,
    /// Why the loop ended (`rounds`, `plateau`, a budget, `stop file`).
    #[serde(default)]
    pub stopped: String,
    /// The training tasks, when a budget selected them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection: Option<Selection>,
    /// Tokens, calls, cache hits and dollars per role and model, over the
    /// whole run (also in `ledger.json`).
    #[serde(default)]
    pub usage: LedgerSummary,
}

#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error(transparent)]
    Io(#[from] PathError),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    Run(#[from] eval::RunError),
    #[error(transparent)]
    Sandbox(#[from] crate::sandbox::SandboxError),
    #[error(transparent)]
    Env(#[from] crate::env::EnvError),
    #[error("{dir} holds a training run with another configuration:\n{diff}\n(use another --out)")]
    ConfigChanged { dir: PathBuf, diff: String },
    #[error("the harness source {0} has no src/tables.rs for the rule coder")]
    NoTables(PathBuf),
    #[error("{path} is corrupt: {message} (move it away to start that part afresh)")]
    Corrupt { path: PathBuf, message: String },
}

/// What the loop needs besides the config.
pub struct TrainContext {
    pub store: ComponentStore,
    pub domain: Arc<dyn Domain>,
    pub participants: Arc<dyn Participants>,
    pub limits: Limits,
    pub concurrency: usize,
    pub quiet: bool,
    /// Cargo target dir shared by every candidate build (so a candidate
    /// rebuilds only the harness crate, not its dependencies).
    pub cargo_target: PathBuf,
    pub diagnoser: Diagnoser,
    pub coder: CoderChoice,
    /// The ledger every model of the run records into (the participants'
    /// and the roles'); persisted as `ledger.json`.
    pub ledger: Arc<UsageLedger>,
}

fn io<T>(r: std::io::Result<T>, action: &'static str, p: &Path) -> Result<T, PathError> {
    r.map_err(|e| PathError::new(action, p, e))
}

struct RunDirs {
    root: PathBuf,
}

impl RunDirs {
    fn staging(&self) -> PathBuf {
        self.root.join("staging")
    }
    fn candidate(&self, h: &ComponentHash) -> PathBuf {
        self.root.join("candidates").join(h.as_str())
    }
    fn eval_dir(&self, h: &str, split: &str) -> PathBuf {
        self.root
            .join("evals")
            .join(format!("{}-{split}", &h[..16.min(h.len())]))
    }
}

/// Evaluate one component on `tasks`, resuming its cached result dir.
async fn evaluate(
    cx: &TrainContext,
    dirs: &RunDirs,
    base: &RunConfig,
    hash: &ComponentHash,
    tasks: &[String],
    split: Option<String>,
    label: &str,
) -> Result<(RunSummary, Vec<EpisodeRecord>), TrainError> {
    let sandbox = Sandbox::pooled(cx.limits.clone(), cx.concurrency)?;
    let (loaded, _) = cx.store.load(&sandbox, hash)?;
    let config = RunConfig {
        harness: Some(hash.to_string()),
        tasks: tasks.to_vec(),
        split,
        ..base.clone()
    };
    let out = dirs.eval_dir(hash.as_str(), label);
    if !cx.quiet {
        eprintln!(
            "evaluating {} on {} {label} task(s) x {} trial(s)",
            hash.short(),
            tasks.len(),
            base.trials
        );
    }
    // Decile progress lines (not a bar): training runs for hours against
    // real endpoints, often with stderr going to a log file.
    let options = RunOptions {
        out: out.clone(),
        concurrency: cx.concurrency,
        force_new: false,
        quiet: true,
        silent: cx.quiet,
        max_requeues: 2,
    };
    let summary = eval::run(
        config,
        options,
        cx.domain.clone(),
        Some(loaded),
        cx.participants.clone(),
        None,
    )
    .await?;
    let records =
        eval::rundir::read_trajectories(&out.join(eval::rundir::TRAJECTORIES_FILE), false)
            .map_err(eval::RunError::from)?;
    Ok((summary, records))
}

fn score(s: &RunSummary) -> f64 {
    s.metrics.accuracy
}

/// Run (or resume) training from the harness crate at `source` into `out`.
pub async fn train(
    config: TrainConfig,
    source: &Path,
    out: &Path,
    cx: TrainContext,
) -> Result<TrainSummary, TrainError> {
    let started = Instant::now();
    let dirs = RunDirs {
        root: out.to_path_buf(),
    };
    // Config: refuse a resume with another one.
    let cfg_path = out.join("config.json");
    let cfg_json = serde_json::to_value(&config).expect("config serializes");
    if let Ok(bytes) = std::fs::read(&cfg_path) {
        let old: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
        if old != cfg_json {
            return Err(TrainError::ConfigChanged {
                dir: out.to_path_buf(),
                diff: eval::rundir::json_diff(&old, &cfg_json).join("\n"),
            });
        }
    }
    io(std::fs::create_dir_all(out), "create", out)?;
    atomic_write(
        &cfg_path,
        &serde_json::to_vec_pretty(&cfg_json).expect("json"),
    )
    .map_err(|e| PathError::new("write", &cfg_path, e))?;
    // Spending of earlier processes of this run counts toward the budget.
    let ledger_path = out.join("ledger.json");
    if let Ok(bytes) = std::fs::read(&ledger_path) {
        let earlier: LedgerFile =
            serde_json::from_slice(&bytes).map_err(|e| TrainError::Corrupt {
                path: ledger_path.clone(),
                message: e.to_string(),
            })?;
        cx.ledger.import(earlier.calls);
    }
    // The WIT package sits beside the staging crate, where `../wit` finds it.
    let wit_src = source.join("../wit");
    staging::fresh_copy(&wit_src, &out.join("wit"))?;
    if !source.join(heuristic::TABLES_FILE).is_file() {
        return Err(TrainError::NoTables(source.to_path_buf()));
    }
    let target_dir = cx.cargo_target.clone();
    let build = |dir: &Path, parent: Option<ComponentHash>| {
        cx.store.build(
            dir,
            &BuildOptions {
                parent,
                target_dir: Some(target_dir.clone()),
                quiet: true,
                ..BuildOptions::default()
            },
        )
    };

    // The initial incumbent, or the one a killed run left behind.
    let incumbent_path = out.join("incumbent");
    let rounds_path = out.join("rounds.jsonl");
    let mut done: Vec<RoundRecord> = match std::fs::read_to_string(&rounds_path) {
        Ok(text) => text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect(),
        Err(_) => Vec::new(),
    };
    let initial = match std::fs::read_to_string(out.join("initial")) {
        Ok(h) => ComponentHash::parse(h.trim()).ok_or_else(|| TrainError::Corrupt {
            path: out.join("initial"),
            message: format!("`{}` is not a component hash", h.trim()),
        })?,
        Err(_) => {
            staging::fresh_copy(source, &dirs.staging())?;
            if config.start_blank {
                let path = dirs.staging().join(heuristic::TABLES_FILE);
                let mut text = io(std::fs::read_to_string(&path), "read", &path)?;
                rulecoder::blank_tables(&mut text)
                    .map_err(|m| PathError::new("edit", &path, std::io::Error::other(m)))?;
                atomic_write(&path, text.as_bytes())
                    .map_err(|e| PathError::new("write", &path, e))?;
            }
            let m = build(&dirs.staging(), None)?.manifest;
            staging::fresh_copy(&dirs.staging(), &dirs.candidate(&m.hash).join("source"))?;
            atomic_write(&out.join("initial"), m.hash.as_str().as_bytes())
                .map_err(|e| PathError::new("write", &out.join("initial"), e))?;
            m.hash
        }
    };
    let mut incumbent = match std::fs::read_to_string(&incumbent_path) {
        Ok(h) => ComponentHash::parse(h.trim()).unwrap_or_else(|| initial.clone()),
        Err(_) => initial.clone(),
    };
    let facts = ToolFacts {
        tools: cx
            .domain
            .tools()
            .iter()
            .map(|t| (t.name.clone(), t.mutates))
            .collect(),
    };
    // Rule tables key entries by the short domain name (`retail`).
    let short_domain = config
        .train
        .domain
        .rsplit('/')
        .next()
        .unwrap_or(&config.train.domain)
        .to_string();
    let short_domain = short_domain.as_str();
    let mut coder_calls: u32 = done.iter().map(|r| r.coder_calls).sum();
    let mut totals = PhaseTimes::default();
    for r in &done {
        totals.add(&r.seconds);
    }
    let run_ledger = RunLedger {
        path: ledger_path.clone(),
        ledger: &cx.ledger,
    };
    let spent = || run_ledger.spent();

    // The training tasks: the whole split, or a budget chosen from it by
    // how the initial harness fails (or at random).
    let (train_tasks, train_label, selection) = match config.select {
        None => (config.train.tasks.clone(), "train".to_string(), None),
        Some(sel) => {
            let selection = select_tasks(&cx, &dirs, &config, &initial, sel).await?;
            let label = format!("train-{}-{}", sel.strategy.as_str(), sel.budget);
            (selection.tasks.clone(), label, Some(selection))
        }
    };
    let (init_summary, _) = evaluate(
        &cx,
        &dirs,
        &config.train,
        &initial,
        &train_tasks,
        config.train.split.clone(),
        &train_label,
    )
    .await?;
    let initial_train_score = score(&init_summary);

    let mut stopped = "rounds".to_string();
    let first_round = done.len() as u32 + 1;
    for round in first_round..=config.rounds {
        if out.join("STOP").exists() {
            tracing::info!("stop file found: ending training");
            stopped = "stop file".into();
            break;
        }
        let plateaued = done.len() as u32 >= config.plateau
            && done
                .iter()
                .rev()
                .take(config.plateau as usize)
                .all(|r| !r.accepted);
        if config.plateau > 0 && plateaued {
            stopped = "plateau".into();
            break;
        }
        if let Some(why) = budget_exhausted(&config, coder_calls, paid_episodes(&dirs), spent()) {
            stopped = why;
            break;
        }
        let usd_before = spent();
        let mut t = PhaseTimes::default();
        let clock = Instant::now();
        let (inc_summary, inc_records) = evaluate(
            &cx,
            &dirs,
            &config.train,
            &incumbent,
            &train_tasks,
            config.train.split.clone(),
            &train_label,
        )
        .await?;
        t.train_eval = clock.elapsed().as_secs_f64();
        let inc_score = score(&inc_summary);

        let clock = Instant::now();
        let failures = records::failures(&inc_records, config.lambda);
        let successes: Vec<FailureRecord> = inc_records
            .iter()
            .filter(|r| r.reward >= config.lambda)
            .map(FailureRecord::from_episode)
            .collect();
        let groups = aggregate::aggregate(&failures);
        t.aggregation = clock.elapsed().as_secs_f64();

        let mut record = RoundRecord {
            round,
            incumbent: incumbent.to_string(),
            incumbent_score: inc_score,
            candidate: None,
            candidate_score: None,
            accepted: false,
            decision: String::new(),
            failures: failures.len(),
            groups: groups.len(),
            recurring_groups: groups.iter().filter(|g| g.recurring).count(),
            coder_calls: 0,
            spec: None,
            seconds: PhaseTimes::default(),
            p_value: None,
            usd: 0.0,
        };
        let mut transcript = RoundTranscript {
            round,
            diagnoser: config.diagnoser.clone(),
            evidence: vec![],
            discussions: vec![],
            coder_runs: vec![],
        };

        // Diagnosis and coding: one unit per round, or one per failure.
        let units: Vec<Vec<FailureGroup>> = match config.method {
            Method::SelfEvolution => failures
                .iter()
                .map(|f| aggregate::aggregate(std::slice::from_ref(f)))
                .collect(),
            Method::EcdysisNofdcr | Method::Ecdysis => vec![groups.clone()],
        };
        if !cx.quiet {
            eprintln!(
                "round {round}: {} failure(s) in {} group(s), {} recurring; {} diagnosis unit(s) for {}",
                record.failures,
                record.groups,
                record.recurring_groups,
                units.len(),
                config.diagnoser
            );
        }
        staging::fresh_copy(&dirs.candidate(&incumbent).join("source"), &dirs.staging())?;
        let mut merged: Option<ChangeSpec> = None;
        let mut skipped: Vec<String> = vec![];
        for unit in &units {
            if let Some(why) = budget_exhausted(&config, coder_calls, paid_episodes(&dirs), spent())
            {
                skipped.push(format!("budget: {why}"));
                break;
            }
            let clock = Instant::now();
            let spec = diagnose_unit(
                &cx,
                &config,
                unit,
                &successes,
                &facts,
                &dirs.staging(),
                &mut transcript,
            )
            .await?;
            t.diagnosis += clock.elapsed().as_secs_f64();
            let spec = match spec {
                Ok(spec) => spec,
                Err(why) => {
                    skipped.push(why);
                    continue;
                }
            };
            let clock = Instant::now();
            coder_calls += 1;
            record.coder_calls += 1;
            let applied = match &cx.coder {
                CoderChoice::Rules => {
                    if config.coder_latency_ms > 0 {
                        tokio::time::sleep(std::time::Duration::from_millis(
                            config.coder_latency_ms,
                        ))
                        .await;
                    }
                    let n = rulecoder::apply(&dirs.staging(), &spec, short_domain)?;
                    transcript.coder_runs.push(CoderRun {
                        coder: "rules".into(),
                        ok: n > 0,
                        attempts: 1,
                        changed_files: if n > 0 {
                            vec![heuristic::TABLES_FILE.into()]
                        } else {
                            vec![]
                        },
                        build_ok: false,
                        error: None,
                        log: format!("{n} table entr(ies) changed"),
                    });
                    true
                }
                CoderChoice::Agent(coder) => {
                    let mut task = CoderTask::new(spec.clone());
                    if config.method == Method::SelfEvolution {
                        // The baseline's coder works from the one failure.
                        task = task.with_notes(fdcr::render_evidence(
                            unit,
                            &[],
                            &EvidenceLimits::default(),
                        ));
                    }
                    match coder.implement(&task, &dirs.staging()).await {
                        Ok(o) => {
                            transcript.coder_runs.push(CoderRun {
                                coder: coder.name().to_string(),
                                ok: true,
                                attempts: o.attempts,
                                changed_files: o.changed_files,
                                build_ok: o.build_ok,
                                error: None,
                                log: o.log,
                            });
                            true
                        }
                        Err(e) => {
                            if !cx.quiet {
                                eprintln!("round {round}: coder failed: {e}");
                            }
                            transcript.coder_runs.push(CoderRun {
                                coder: coder.name().to_string(),
                                ok: false,
                                attempts: e.attempts(),
                                changed_files: vec![],
                                build_ok: false,
                                error: Some(e.to_string()),
                                log: e.log().to_string(),
                            });
                            skipped.push(format!("coder failed: {e}"));
                            false
                        }
                    }
                }
            };
            t.coder += clock.elapsed().as_secs_f64();
            if !applied {
                continue;
            }
            merged = Some(match merged {
                None => spec,
                Some(mut m) => {
                    m.failure_patterns.extend(spec.failure_patterns);
                    m.proposed_changes.extend(spec.proposed_changes);
                    m.skills.extend(spec.skills);
                    m
                }
            });
        }
        let round_dir = out.join("rounds").join(round.to_string());
        io(std::fs::create_dir_all(&round_dir), "create", &round_dir)?;
        write_json(&round_dir.join("transcript.json"), &transcript)?;
        record.spec = merged.clone();
        if merged.is_none() {
            record.decision = if skipped.is_empty() {
                "no change proposed: no failure with a visible interface cause".into()
            } else {
                format!("no change made: {}", skipped.join("; "))
            };
            finish_round(
                &rounds_path,
                &mut record,
                t,
                usd_before,
                &run_ledger,
                &mut totals,
                &mut done,
            )?;
            if !cx.quiet {
                eprintln!("round {round}: {}", record.decision);
            }
            continue;
        }

        let clock = Instant::now();
        let built = build(&dirs.staging(), Some(incumbent.clone()));
        t.build = clock.elapsed().as_secs_f64();
        let manifest = match built {
            Ok(b) => b.manifest,
            Err(e) => {
                record.decision = format!("build failed: {e}");
                finish_round(
                    &rounds_path,
                    &mut record,
                    t,
                    usd_before,
                    &run_ledger,
                    &mut totals,
                    &mut done,
                )?;
                continue;
            }
        };
        let cand = manifest.hash.clone();
        record.candidate = Some(cand.to_string());
        let cdir = dirs.candidate(&cand);
        staging::fresh_copy(&dirs.staging(), &cdir.join("source"))?;
        write_json(&cdir.join("manifest.json"), &manifest)?;
        write_json(&cdir.join("spec.json"), &merged)?;
        write_json(&cdir.join("transcript.json"), &transcript)?;
        let diff = super::rulecoder::diff(
            &dirs.candidate(&incumbent).join("source/src"),
            &cdir.join("source/src"),
        );
        atomic_write(&cdir.join("diff.patch"), diff.as_bytes())
            .map_err(|e| PathError::new("write", &cdir.join("diff.patch"), e))?;

        // Gate: contract smoke, screen, then the training score.
        let clock = Instant::now();
        let sandbox = Sandbox::new(cx.limits.clone())?;
        let (loaded, _) = cx.store.load(&sandbox, &cand)?;
        let (check, hits) = {
            let domain = cx.domain.clone();
            let records = inc_records.clone();
            tokio::task::spawn_blocking(move || {
                let check = crate::doctor::check(&loaded);
                let hits = screen::screen(&loaded, &*domain, &records);
                (check, hits)
            })
            .await
            .expect("gate task")
        };
        if !check.passed() {
            record.decision = "rejected: check failed".into();
            t.gate = clock.elapsed().as_secs_f64();
            finish_round(
                &rounds_path,
                &mut record,
                t,
                usd_before,
                &run_ledger,
                &mut totals,
                &mut done,
            )?;
            continue;
        }
        if let Some(hit) = hits.first() {
            record.decision = format!(
                "rejected by the screen: blocks {}({}) which succeeded on task {}",
                hit.tool, hit.arguments, hit.task_id
            );
            t.gate = clock.elapsed().as_secs_f64();
            finish_round(
                &rounds_path,
                &mut record,
                t,
                usd_before,
                &run_ledger,
                &mut totals,
                &mut done,
            )?;
            continue;
        }
        let (cand_summary, cand_records) = evaluate(
            &cx,
            &dirs,
            &config.train,
            &cand,
            &train_tasks,
            config.train.split.clone(),
            &train_label,
        )
        .await?;
        write_json(&cdir.join("train_summary.json"), &cand_summary)?;
        t.gate = clock.elapsed().as_secs_f64();
        let verdict = accept::decide(config.accept, &inc_records, &cand_records);
        record.candidate_score = Some(score(&cand_summary));
        record.p_value = verdict.p_value;
        record.decision = verdict.reason.clone();
        if verdict.accepted {
            record.accepted = true;
            incumbent = cand.clone();
            atomic_write(&incumbent_path, incumbent.as_str().as_bytes())
                .map_err(|e| PathError::new("write", &incumbent_path, e))?;
        }
        if !cx.quiet {
            eprintln!("round {round}: {}", record.decision);
        }
        finish_round(
            &rounds_path,
            &mut record,
            t,
            usd_before,
            &run_ledger,
            &mut totals,
            &mut done,
        )?;
    }

    // The final incumbent's training score, then the held-out test split.
    let (final_summary, _) = evaluate(
        &cx,
        &dirs,
        &config.train,
        &incumbent,
        &train_tasks,
        config.train.split.clone(),
        &train_label,
    )
    .await?;
    let clock = Instant::now();
    let test_score = if config.test_tasks.is_empty() {
        None
    } else {
        let (s, _) = evaluate(
            &cx,
            &dirs,
            &config.train,
            &incumbent,
            &config.test_tasks,
            config.test_split.clone(),
            "test",
        )
        .await?;
        Some(score(&s))
    };
    totals.test_eval += clock.elapsed().as_secs_f64();
    run_ledger.save()?;
    let summary = TrainSummary {
        method: config.method,
        initial: initial.to_string(),
        incumbent: incumbent.to_string(),
        accepted: done.iter().filter(|r| r.accepted).count() as u32,
        rounds: done,
        initial_train_score,
        final_train_score: score(&final_summary),
        test_score,
        coder_calls,
        episodes: paid_episodes(&dirs),
        seconds: totals,
        wall_seconds: started.elapsed().as_secs_f64(),
        stopped,
        selection,
        usage: cx.ledger.summary(),
    };
    write_json(&out.join("summary.json"), &summary)?;
    Ok(summary)
}

/// The first exhausted budget, if any. Every attempt counts: failed builds,
/// trapped candidates and failed coder runs were paid for too.
fn budget_exhausted(
    config: &TrainConfig,
    coder_calls: u32,
    episodes: u64,
    usd: f64,
) -> Option<String> {
    if let Some(m) = config.max_coder_calls.filter(|m| coder_calls >= *m) {
        return Some(format!("coder-call budget ({m}) used"));
    }
    if let Some(m) = config.max_episodes.filter(|m| episodes >= *m) {
        return Some(format!("episode budget ({m}) used"));
    }
    if let Some(m) = config.max_usd.filter(|m| usd >= *m) {
        return Some(format!("dollar budget (${m:.2}) used: ${usd:.4} spent"));
    }
    None
}

/// Diagnose one unit of failure groups into a spec. `Ok(Err(why))` when
/// this unit yields no spec (recorded, the round goes on).
async fn diagnose_unit(
    cx: &TrainContext,
    config: &TrainConfig,
    unit: &[FailureGroup],
    successes: &[FailureRecord],
    facts: &ToolFacts,
    staging: &Path,
    transcript: &mut RoundTranscript,
) -> Result<Result<ChangeSpec, String>, TrainError> {
    let evidence = fdcr::render_evidence(unit, successes, &EvidenceLimits::default());
    transcript.evidence.push(evidence.clone());
    if let (Diagnoser::Fdcr { roles, config: fc }, Method::Ecdysis) = (&cx.diagnoser, config.method)
    {
        let input = FdcrInput {
            evidence,
            harness: fdcr::describe_harness(staging)?,
        };
        let outcome = fdcr::deliberate(roles, &input, fc).await;
        let spec = outcome.spec.clone();
        let error = outcome.error.clone();
        transcript.discussions.push(outcome);
        return Ok(spec.ok_or_else(|| {
            format!(
                "FDCR produced no spec: {}",
                error.unwrap_or_else(|| "no reason given".into())
            )
        }));
    }
    if let Some(spec) = heuristic::diagnose(unit, successes, facts) {
        return Ok(Ok(spec));
    }
    // A prose-reading coder can still work from the groups themselves.
    match (&cx.coder, heuristic::spec_from_groups(unit)) {
        (CoderChoice::Agent(_), Some(spec)) => Ok(Ok(spec)),
        _ => Ok(Err(
            "no failure with a visible interface cause for the rule coder".into(),
        )),
    }
}

/// Choose (or reload) the training tasks for `--select-train`.
async fn select_tasks(
    cx: &TrainContext,
    dirs: &RunDirs,
    config: &TrainConfig,
    initial: &ComponentHash,
    sel: SelectConfig,
) -> Result<Selection, TrainError> {
    let path = dirs.root.join("selection.json");
    if let Ok(bytes) = std::fs::read(&path) {
        return serde_json::from_slice(&bytes).map_err(|e| TrainError::Corrupt {
            path,
            message: e.to_string(),
        });
    }
    // Failure-aware selection needs to see how the starting harness does
    // on every training task; random selection does not.
    let records = match sel.strategy {
        SelectStrategy::FailureAware => {
            evaluate(
                cx,
                dirs,
                &config.train,
                initial,
                &config.train.tasks,
                config.train.split.clone(),
                "train-all",
            )
            .await?
            .1
        }
        SelectStrategy::Random => vec![],
    };
    let selection = select::select(
        sel.strategy,
        sel.budget,
        &config.train.tasks,
        &records,
        config.lambda,
        sel.seed,
    );
    write_json(&path, &selection)?;
    if !cx.quiet {
        eprintln!(
            "selected {} of {} training tasks ({}): {}",
            selection.tasks.len(),
            config.train.tasks.len(),
            sel.strategy.as_str(),
            selection.tasks.join(",")
        );
    }
    Ok(selection)
}

/// Episodes this training run has paid for, across resumes: every finished
/// line of every evaluation's trajectories (the runner never re-runs them).
fn paid_episodes(dirs: &RunDirs) -> u64 {
    let Ok(entries) = std::fs::read_dir(dirs.root.join("evals")) else {
        return 0;
    };
    entries
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join(eval::rundir::TRAJECTORIES_FILE)).ok())
        .map(|bytes| {
            bytes
                .split(|b| *b == b'\n')
                .filter(|l| !l.is_empty())
                .count() as u64
        })
        .sum()
}

/// The run's usage ledger and its file, `ledger.json`.
struct RunLedger<'a> {
    path: PathBuf,
    ledger: &'a UsageLedger,
}

impl RunLedger<'_> {
    /// Dollars spent by every role so far, across resumes.
    fn spent(&self) -> f64 {
        self.ledger.summary().total.usd
    }

    fn save(&self) -> Result<(), PathError> {
        write_json(
            &self.path,
            &LedgerFile {
                summary: self.ledger.summary(),
                calls: self.ledger.calls(),
            },
        )
    }
}

fn write_json<T: Serialize>(path: &Path, v: &T) -> Result<(), PathError> {
    atomic_write(path, &serde_json::to_vec_pretty(v).expect("json"))
        .map_err(|e| PathError::new("write", path, e))
}

/// Close a round, whatever its outcome: its times and dollars (spent since
/// `usd_before`) into the record, the record appended to `rounds.jsonl`, and
/// the ledger saved, so a kill after this point loses nothing of the round.
fn finish_round(
    path: &Path,
    record: &mut RoundRecord,
    t: PhaseTimes,
    usd_before: f64,
    ledger: &RunLedger,
    totals: &mut PhaseTimes,
    done: &mut Vec<RoundRecord>,
) -> Result<(), PathError> {
    use std::io::Write;
    record.seconds = t;
    record.usd = ledger.spent() - usd_before;
    totals.add(&record.seconds);
    let mut line = serde_json::to_vec(record).expect("json");
    line.push(b'\n');
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| PathError::new("open", path, e))?;
    f.write_all(&line)
        .and_then(|_| f.sync_data())
        .map_err(|e| PathError::new("append to", path, e))?;
    done.push(record.clone());
    ledger.save()
}
