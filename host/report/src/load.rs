//! Reading result directories into typed data, with errors that name the
//! offending file. Nothing here writes: a report never changes what it
//! reads (a torn last line of a running run is skipped, not cut off).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

use super::ReportError;
use ecdysis_evolve::diagnose::change_spec::ChangeSpec;
use ecdysis_evolve::experiment::ExperimentReport;
use ecdysis_evolve::train::{LedgerFile, RoundRecord, RoundTranscript, TrainConfig, TrainSummary};
use ecdysis_runner::agent::EpisodeRecord;
use ecdysis_runner::eval::rundir::{
    self, CONFIG_FILE, RunDirError, SUMMARY_FILE, TRAJECTORIES_FILE, TrainLayout,
};
use ecdysis_runner::eval::{RunConfig, RunSummary};
use ecdysis_sandbox::store::Manifest;

/// The file an experiment writes beside its methods' training directories.
pub const EXPERIMENT_FILE: &str = "experiment.json";

/// What kind of result a directory holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirKind {
    /// `run`: `config.json` + `trajectories.jsonl`.
    Run,
    /// `train`: `rounds.jsonl`, `initial` or `incumbent`.
    Training,
    /// `experiment`: `experiment.json` and/or one training directory per
    /// method.
    Experiment,
}

/// Which kind of directory `dir` is.
pub fn detect(dir: &Path) -> Result<DirKind, ReportError> {
    if !dir.is_dir() {
        return Err(ReportError::NotADirectory(dir.to_path_buf()));
    }
    if dir.join(EXPERIMENT_FILE).is_file() {
        return Ok(DirKind::Experiment);
    }
    let t = TrainLayout::new(dir);
    if [t.rounds(), t.initial(), t.incumbent()]
        .iter()
        .any(|f| f.is_file())
    {
        return Ok(DirKind::Training);
    }
    if dir.join(TRAJECTORIES_FILE).is_file() || dir.join(CONFIG_FILE).is_file() {
        return Ok(DirKind::Run);
    }
    if !training_subdirs(dir).is_empty() {
        return Ok(DirKind::Experiment);
    }
    Err(ReportError::Unrecognised(dir.to_path_buf()))
}

/// Subdirectories that hold training runs, by name.
fn training_subdirs(dir: &Path) -> Vec<(String, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<(String, PathBuf)> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir() && TrainLayout::is_training_run(p))
        .map(|p| {
            (
                p.file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                p,
            )
        })
        .collect();
    out.sort();
    out
}

fn read_bytes(path: &Path) -> Result<Option<Vec<u8>>, ReportError> {
    match ecdysis_sys::fsutil::read_regular(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ReportError::Io {
            path: path.to_path_buf(),
            source: e,
        }),
    }
}

/// A JSON file, or `None` when it does not exist.
pub fn read_json<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, ReportError> {
    match read_bytes(path)? {
        None => Ok(None),
        Some(b) => serde_json::from_slice(&b)
            .map(Some)
            .map_err(|e| ReportError::Corrupt {
                path: path.to_path_buf(),
                reason: e.to_string(),
            }),
    }
}

fn read_text(path: &Path) -> Result<Option<String>, ReportError> {
    Ok(read_bytes(path)?.map(|b| String::from_utf8_lossy(&b).into_owned()))
}

/// JSON lines; a last line without its newline that does not parse is a
/// write in progress and skipped (the returned flag says so), damage
/// anywhere else is an error naming the line.
fn read_jsonl<T: DeserializeOwned>(path: &Path) -> Result<(Vec<T>, bool), ReportError> {
    let Some(text) = read_text(path)? else {
        return Ok((Vec::new(), false));
    };
    let mut out = Vec::new();
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str(line) {
            Ok(v) => out.push(v),
            Err(_) if i + 1 == lines.len() && !line.ends_with('\n') => return Ok((out, true)),
            Err(e) => {
                return Err(ReportError::Corrupt {
                    path: path.to_path_buf(),
                    reason: format!("line {}: {e}", i + 1),
                });
            }
        }
    }
    Ok((out, false))
}

/// A run directory (`ecdysis-host run`, or an evaluation inside training).
#[derive(Debug, Clone)]
pub struct RunData {
    /// The run directory.
    pub dir: PathBuf,
    /// The run's `config.json`.
    pub config: RunConfig,
    /// `None` while the run is still going (or was killed).
    pub summary: Option<RunSummary>,
    /// Every finished episode, in the config's task order then by trial (a torn
    /// last line skipped).
    pub records: Vec<EpisodeRecord>,
}

impl RunData {
    /// Read a run directory; a run still going (no summary, a half-written last
    /// line) loads too.
    pub fn load(dir: &Path) -> Result<RunData, ReportError> {
        let config_path = dir.join(CONFIG_FILE);
        let config: RunConfig =
            read_json(&config_path)?.ok_or_else(|| ReportError::Missing(config_path.clone()))?;
        let records = match rundir::read_trajectories(&dir.join(TRAJECTORIES_FILE), false) {
            Ok(r) => r,
            // A run still writing may leave an unterminated last line: the
            // report skips it rather than failing or cutting the file.
            Err(RunDirError::Corrupt { path, reason }) => {
                let (records, torn) = read_jsonl::<EpisodeRecord>(&path)?;
                if !torn {
                    return Err(ReportError::Corrupt { path, reason });
                }
                records
            }
            Err(RunDirError::Io(e)) => {
                return Err(ReportError::Io {
                    path: dir.join(TRAJECTORIES_FILE),
                    source: std::io::Error::other(e.to_string()),
                });
            }
            Err(e) => {
                return Err(ReportError::Corrupt {
                    path: dir.join(TRAJECTORIES_FILE),
                    reason: e.to_string(),
                });
            }
        };
        let summary = read_json(&dir.join(SUMMARY_FILE))?;
        // Episodes in the run's task order, then by trial.
        let order: BTreeMap<&str, usize> = config
            .tasks
            .iter()
            .enumerate()
            .map(|(i, t)| (t.as_str(), i))
            .collect();
        let mut records: Vec<EpisodeRecord> = rundir::by_pair(records).into_values().collect();
        records.sort_by_key(|r| {
            (
                order.get(r.task_id.as_str()).copied().unwrap_or(usize::MAX),
                r.trial,
            )
        });
        Ok(RunData {
            dir: dir.to_path_buf(),
            config,
            summary,
            records,
        })
    }

    /// The run's metrics: the summary's, or computed from the episodes
    /// finished so far.
    pub fn metrics(&self) -> ecdysis_runner::eval::Metrics {
        match &self.summary {
            Some(s) => s.metrics.clone(),
            None => ecdysis_runner::eval::metrics::compute(&self.records),
        }
    }

    /// Whether the agent was a `sim:` testbed model (every page then says so).
    pub fn simulated(&self) -> bool {
        self.config.agent_model.is_simulated()
    }
}

/// One candidate of a training run (`candidates/<hash>/`).
#[derive(Debug, Clone, Default)]
pub struct Candidate {
    /// The component hash (the directory's name).
    pub hash: String,
    /// `manifest.json`, if written.
    pub manifest: Option<Manifest>,
    /// `spec.json`: the change spec the candidate implements (`None` without
    /// one).
    pub spec: Option<ChangeSpec>,
    /// `diff.patch`: the source diff against its parent.
    pub diff: Option<String>,
    /// `diff` was recomputed from the stored sources because `diff.patch`
    /// was empty (see [`TrainData::load`]).
    pub diff_recomputed: bool,
    /// `train_summary.json`: its training evaluation, if it got one.
    pub train_summary: Option<RunSummary>,
}

/// Which harness of a training run's held-out evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeldOut {
    /// The starting harness.
    Initial,
    /// The final incumbent.
    Final,
    /// No harness (`--test-direct`).
    Direct,
}

/// A training directory (`ecdysis-host train`).
#[derive(Debug, Clone)]
pub struct TrainData {
    /// The training directory.
    pub dir: PathBuf,
    /// The training run's `config.json`.
    pub config: TrainConfig,
    /// Every round of `rounds.jsonl` (a torn last line skipped).
    pub rounds: Vec<RoundRecord>,
    /// The `initial` file: the starting harness's hash.
    pub initial: Option<String>,
    /// The `incumbent` file: the current best harness's hash.
    pub incumbent: Option<String>,
    /// `None` while training is still going.
    pub summary: Option<TrainSummary>,
    /// Every candidate under `candidates/`, by hash.
    pub candidates: BTreeMap<String, Candidate>,
    /// `rounds/<n>/transcript.json` by round.
    pub transcripts: BTreeMap<u32, RoundTranscript>,
    /// `ledger.json`: model usage and cost, if written.
    pub ledger: Option<LedgerFile>,
    /// The runner's result directories under `evals/`, by directory name
    /// (`<hash prefix>-<label>`).
    pub evals: BTreeMap<String, RunData>,
    /// A round record was being written when the report read the file.
    pub torn_round: bool,
}

fn read_hash(path: &Path) -> Result<Option<String>, ReportError> {
    Ok(read_text(path)?.map(|t| t.trim().to_string()))
}

impl TrainData {
    /// Read a training directory with its candidates, transcripts and
    /// evaluations; a run still going loads too.
    pub fn load(dir: &Path) -> Result<TrainData, ReportError> {
        let t = TrainLayout::new(dir);
        let config_path = t.config();
        let config: TrainConfig =
            read_json(&config_path)?.ok_or_else(|| ReportError::Missing(config_path.clone()))?;
        let (rounds, torn_round) = read_jsonl::<RoundRecord>(&t.rounds())?;
        let mut candidates = BTreeMap::new();
        for path in sorted_dirs(&t.candidates())? {
            let hash = file_name(&path);
            let c = t.candidate(&hash);
            candidates.insert(
                hash.clone(),
                Candidate {
                    hash,
                    manifest: read_json(&c.manifest())?,
                    spec: read_json::<Option<ChangeSpec>>(&c.spec())?.flatten(),
                    diff: read_text(&c.diff())?,
                    diff_recomputed: false,
                    train_summary: read_json(&c.train_summary())?,
                },
            );
        }
        recompute_empty_diffs(dir, &rounds, &mut candidates);
        let mut transcripts = BTreeMap::new();
        for path in sorted_dirs(&t.rounds_dir())? {
            let Ok(n) = file_name(&path).parse::<u32>() else {
                continue;
            };
            if let Some(t) = read_json(&t.round_transcript(n))? {
                transcripts.insert(n, t);
            }
        }
        let mut evals = BTreeMap::new();
        for path in sorted_dirs(&t.evals())? {
            if path.join(CONFIG_FILE).is_file() {
                evals.insert(file_name(&path), RunData::load(&path)?);
            }
        }
        Ok(TrainData {
            dir: dir.to_path_buf(),
            config,
            rounds,
            initial: read_hash(&t.initial())?,
            incumbent: read_hash(&t.incumbent())?,
            summary: read_json(&t.summary())?,
            candidates,
            transcripts,
            ledger: read_json(&t.ledger())?,
            evals,
            torn_round,
        })
    }

    /// Whether the agent was a `sim:` testbed model.
    pub fn simulated(&self) -> bool {
        self.config.train.agent_model.is_simulated()
    }

    /// The label of training evaluations (`train`, or with a task budget
    /// `train-<strategy>-<n>`), as the trainer names its `evals/` folders.
    pub fn train_label(&self) -> String {
        match &self.config.plan.select {
            None => "train".into(),
            Some(s) => format!("train-{}-{}", s.strategy.as_str(), s.budget),
        }
    }

    /// The evaluation of component `hash` on `label`, if it was run.
    pub fn eval(&self, hash: &str, label: &str) -> Option<&RunData> {
        self.evals
            .get(&format!("{}-{label}", &hash[..16.min(hash.len())]))
    }

    /// The held-out evaluation of the final incumbent (`which` = `final`),
    /// the initial harness (`initial`) or Direct (`direct`), from the
    /// summary's test report.
    pub fn held_out(&self, which: HeldOut) -> Option<&RunData> {
        let test = self.summary.as_ref()?.test.as_ref()?;
        let score = match which {
            HeldOut::Initial => &test.initial,
            HeldOut::Final => &test.final_,
            HeldOut::Direct => test.direct.as_ref()?,
        };
        let name = Path::new(&score.dir).file_name()?.to_string_lossy();
        self.evals.get(name.as_ref())
    }

    /// The final incumbent: the summary's, else the `incumbent` file, else
    /// the initial harness.
    pub fn final_incumbent(&self) -> Option<&str> {
        self.summary
            .as_ref()
            .map(|s| s.incumbent.as_str())
            .or(self.incumbent.as_deref())
            .or(self.initial.as_deref())
    }
}

/// The parent a candidate was derived from: its manifest's, else the
/// incumbent of a round that proposed it (never itself).
pub fn parent_of(hash: &str, c: Option<&Candidate>, rounds: &[RoundRecord]) -> Option<String> {
    c.and_then(|c| c.manifest.as_ref())
        .and_then(|m| m.parent.as_ref().map(|p| p.to_string()))
        .filter(|p| p != hash)
        .or_else(|| {
            rounds
                .iter()
                .find(|r| {
                    r.candidate.as_ref().is_some_and(|c| c.as_str() == hash)
                        && r.incumbent.as_str() != hash
                })
                .map(|r| r.incumbent.to_string())
        })
}

/// A round that rebuilds the incumbent itself (the coder made no effective
/// change) rewrites that candidate's `diff.patch` as an empty diff against
/// itself. The sources of both builds are kept, so the diff against the
/// real parent is recomputed from them for the report.
fn recompute_empty_diffs(
    dir: &Path,
    rounds: &[RoundRecord],
    candidates: &mut BTreeMap<String, Candidate>,
) {
    let hashes: Vec<String> = candidates.keys().cloned().collect();
    for h in hashes {
        let c = &candidates[&h];
        if c.diff.as_deref().is_some_and(|d| !d.trim().is_empty()) {
            continue;
        }
        let Some(parent) = parent_of(&h, Some(c), rounds) else {
            continue;
        };
        let t = TrainLayout::new(dir);
        let before = t.candidate(&parent).source().join("src");
        let after = t.candidate(&h).source().join("src");
        if !(before.is_dir() && after.is_dir()) {
            continue;
        }
        // Paths relative to each build's source, as in a diff.patch.
        let mut d = ecdysis_evolve::code::rule_coder::diff(&before, &after);
        for src in [&before, &after] {
            if let Some(root) = src.parent() {
                let prefix = format!("{}/", root.to_string_lossy().trim_start_matches('/'));
                d = d.replace(&prefix, "");
            }
        }
        if !d.trim().is_empty()
            && let Some(c) = candidates.get_mut(&h)
        {
            c.diff = Some(d);
            c.diff_recomputed = true;
        }
    }
}

/// An experiment directory (`ecdysis-host experiment`).
#[derive(Debug, Clone)]
pub struct ExperimentData {
    /// The experiment directory.
    pub dir: PathBuf,
    /// `None` for an experiment that has not finished (or predates the
    /// file): the methods' directories are still shown.
    pub file: Option<ExperimentReport>,
    /// Each method's training directory, in the file's order.
    pub methods: Vec<(String, TrainData)>,
    /// Transfer runs (`transfer-*` run directories), by directory name.
    pub transfer_runs: BTreeMap<String, RunData>,
    /// The baselines' training directory (zero rounds), if measured.
    pub baselines: Option<TrainData>,
}

impl ExperimentData {
    /// Read an experiment directory: `experiment.json` if present, else one
    /// training directory per method found in it.
    pub fn load(dir: &Path) -> Result<ExperimentData, ReportError> {
        let file: Option<ExperimentReport> = read_json(&dir.join(EXPERIMENT_FILE))?;
        let mut methods = Vec::new();
        match &file {
            Some(f) => {
                for m in &f.methods {
                    // Beside the file (the experiment may have moved since),
                    // else where the file says.
                    let name = m.method.as_str();
                    let path = [dir.join(name), m.dir.clone()]
                        .into_iter()
                        .find(|p| TrainLayout::new(p).config().is_file());
                    if let Some(path) = path {
                        methods.push((name.to_string(), TrainData::load(&path)?));
                    }
                }
            }
            None => {
                for (name, path) in training_subdirs(dir) {
                    methods.push((name, TrainData::load(&path)?));
                }
            }
        }
        let mut transfer_runs = BTreeMap::new();
        for path in sorted_dirs(dir)? {
            let name = file_name(&path);
            if name.starts_with("transfer-") && path.join(CONFIG_FILE).is_file() {
                transfer_runs.insert(name, RunData::load(&path)?);
            }
        }
        let baselines_dir = dir.join(ecdysis_evolve::experiment::BASELINES_DIR);
        let baselines = if TrainLayout::new(&baselines_dir).config().is_file() {
            Some(TrainData::load(&baselines_dir)?)
        } else {
            None
        };
        Ok(ExperimentData {
            dir: dir.to_path_buf(),
            file,
            methods,
            transfer_runs,
            baselines,
        })
    }

    /// Whether any of its runs had a `sim:` testbed agent.
    pub fn simulated(&self) -> bool {
        self.file.as_ref().is_some_and(|f| f.simulated)
            || self.methods.iter().any(|m| m.1.simulated())
    }
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Subdirectories of `dir`, sorted by name; none when `dir` is missing.
fn sorted_dirs(dir: &Path) -> Result<Vec<PathBuf>, ReportError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(ReportError::Io {
                path: dir.to_path_buf(),
                source: e,
            });
        }
    };
    let mut out: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    out.sort();
    Ok(out)
}
