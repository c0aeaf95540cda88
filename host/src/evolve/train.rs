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
//! config.json  rounds.jsonl  incumbent  summary.json  wit/  staging/
//! candidates/<hash>/{source/, manifest.json, spec.json, diff.patch, train_summary.json}
//! evals/<hash>-<split>/   result directories of the runner (resumable)
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::aggregate::{self, FailureGroup};
use super::heuristic::{self, ToolFacts};
use super::records::{self, FailureRecord};
use super::rulecoder;
use super::screen;
use super::spec::ChangeSpec;
use super::staging;
use crate::agent::EpisodeRecord;
use crate::env::Domain;
use crate::eval::{self, Participants, RunConfig, RunOptions, RunSummary};
use crate::fsutil::{PathError, atomic_write};
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
    pub episodes: u64,
    pub seconds: PhaseTimes,
    pub wall_seconds: f64,
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
    let options = RunOptions {
        out: out.clone(),
        concurrency: cx.concurrency,
        force_new: false,
        quiet: true,
        silent: true,
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
        Ok(h) => ComponentHash::parse(h.trim()).expect("initial hash"),
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
    let train_tasks = config.train.tasks.clone();
    // Rule tables key entries by the short domain name (`retail`).
    let short_domain = config
        .train
        .domain
        .rsplit('/')
        .next()
        .unwrap_or(&config.train.domain)
        .to_string();
    let short_domain = short_domain.as_str();
    let mut episodes: u64 = 0;
    let mut coder_calls: u32 = done.iter().map(|r| r.coder_calls).sum();
    let mut totals = PhaseTimes::default();
    for r in &done {
        totals.add(&r.seconds);
    }
    let (init_summary, _) = evaluate(
        &cx,
        &dirs,
        &config.train,
        &initial,
        &train_tasks,
        config.train.split.clone(),
        "train",
    )
    .await?;
    let initial_train_score = score(&init_summary);

    let first_round = done.len() as u32 + 1;
    for round in first_round..=config.rounds {
        if out.join("STOP").exists() {
            tracing::info!("stop file found: ending training");
            break;
        }
        let plateaued = done.len() as u32 >= config.plateau
            && done
                .iter()
                .rev()
                .take(config.plateau as usize)
                .all(|r| !r.accepted);
        if config.plateau > 0 && plateaued {
            break;
        }
        if config.max_coder_calls.is_some_and(|m| coder_calls >= m)
            || config.max_episodes.is_some_and(|m| episodes >= m)
        {
            break;
        }
        let mut t = PhaseTimes::default();
        let clock = Instant::now();
        let (inc_summary, inc_records) = evaluate(
            &cx,
            &dirs,
            &config.train,
            &incumbent,
            &train_tasks,
            config.train.split.clone(),
            "train",
        )
        .await?;
        episodes += inc_summary.ran_now;
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
        };

        // Diagnosis and coding: one call per round, or one per failure.
        let clock = Instant::now();
        let units: Vec<Vec<FailureGroup>> = match config.method {
            Method::SelfEvolution => failures
                .iter()
                .map(|f| aggregate::aggregate(std::slice::from_ref(f)))
                .collect(),
            Method::EcdysisNofdcr | Method::Ecdysis => vec![groups.clone()],
        };
        t.diagnosis = clock.elapsed().as_secs_f64();
        staging::fresh_copy(&dirs.candidate(&incumbent).join("source"), &dirs.staging())?;
        let clock = Instant::now();
        let mut merged: Option<ChangeSpec> = None;
        for unit in &units {
            if config.max_coder_calls.is_some_and(|m| coder_calls >= m) {
                break;
            }
            let Some(spec) = heuristic::diagnose(unit, &successes, &facts) else {
                continue;
            };
            coder_calls += 1;
            record.coder_calls += 1;
            if config.coder_latency_ms > 0 {
                tokio::time::sleep(std::time::Duration::from_millis(config.coder_latency_ms)).await;
            }
            rulecoder::apply(&dirs.staging(), &spec, short_domain)?;
            merged = Some(match merged {
                None => spec,
                Some(mut m) => {
                    m.failure_patterns.extend(spec.failure_patterns);
                    m.proposed_changes.extend(spec.proposed_changes);
                    m
                }
            });
        }
        t.coder = clock.elapsed().as_secs_f64();
        record.spec = merged.clone();
        if merged.is_none() {
            record.decision =
                "no change proposed: no failure with a visible interface cause".into();
            finish_round(&rounds_path, &mut record, t, &mut totals, &mut done)?;
            continue;
        }

        let clock = Instant::now();
        let built = build(&dirs.staging(), Some(incumbent.clone()));
        t.build = clock.elapsed().as_secs_f64();
        let manifest = match built {
            Ok(b) => b.manifest,
            Err(e) => {
                record.decision = format!("build failed: {e}");
                finish_round(&rounds_path, &mut record, t, &mut totals, &mut done)?;
                continue;
            }
        };
        let cand = manifest.hash.clone();
        record.candidate = Some(cand.to_string());
        let cdir = dirs.candidate(&cand);
        staging::fresh_copy(&dirs.staging(), &cdir.join("source"))?;
        write_json(&cdir.join("manifest.json"), &manifest)?;
        write_json(&cdir.join("spec.json"), &merged)?;
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
            finish_round(&rounds_path, &mut record, t, &mut totals, &mut done)?;
            continue;
        }
        if let Some(hit) = hits.first() {
            record.decision = format!(
                "rejected by the screen: blocks {}({}) which succeeded on task {}",
                hit.tool, hit.arguments, hit.task_id
            );
            t.gate = clock.elapsed().as_secs_f64();
            finish_round(&rounds_path, &mut record, t, &mut totals, &mut done)?;
            continue;
        }
        let (cand_summary, _) = evaluate(
            &cx,
            &dirs,
            &config.train,
            &cand,
            &train_tasks,
            config.train.split.clone(),
            "train",
        )
        .await?;
        episodes += cand_summary.ran_now;
        write_json(&cdir.join("train_summary.json"), &cand_summary)?;
        t.gate = clock.elapsed().as_secs_f64();
        let cand_score = score(&cand_summary);
        record.candidate_score = Some(cand_score);
        if cand_score > inc_score {
            record.accepted = true;
            record.decision = format!("accepted: {cand_score:.4} > {inc_score:.4}");
            incumbent = cand.clone();
            atomic_write(&incumbent_path, incumbent.as_str().as_bytes())
                .map_err(|e| PathError::new("write", &incumbent_path, e))?;
        } else {
            record.decision = format!("rejected: {cand_score:.4} does not beat {inc_score:.4}");
        }
        if !cx.quiet {
            eprintln!("round {round}: {}", record.decision);
        }
        finish_round(&rounds_path, &mut record, t, &mut totals, &mut done)?;
    }

    // Held-out test evaluation of the final incumbent.
    let (final_summary, _) = evaluate(
        &cx,
        &dirs,
        &config.train,
        &incumbent,
        &train_tasks,
        config.train.split.clone(),
        "train",
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
        episodes,
        seconds: totals,
        wall_seconds: started.elapsed().as_secs_f64(),
    };
    write_json(&out.join("summary.json"), &summary)?;
    Ok(summary)
}

fn write_json<T: Serialize>(path: &Path, v: &T) -> Result<(), PathError> {
    atomic_write(path, &serde_json::to_vec_pretty(v).expect("json"))
        .map_err(|e| PathError::new("write", path, e))
}

fn finish_round(
    path: &Path,
    record: &mut RoundRecord,
    t: PhaseTimes,
    totals: &mut PhaseTimes,
    done: &mut Vec<RoundRecord>,
) -> Result<(), PathError> {
    use std::io::Write;
    record.seconds = t;
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
    Ok(())
}
