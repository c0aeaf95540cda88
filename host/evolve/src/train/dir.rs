//! The training run directory: its layout, its config check, and the files
//! that make a run resumable (`initial`, `incumbent`, `rounds.jsonl`,
//! `ledger.json`, `selection.json`). Everything is read strictly: a corrupt
//! file is an error naming it, never a silent fallback to a fresh start.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::history::{LedgerFile, RoundRecord};
use super::{TrainConfig, TrainError};
use crate::diagnose::fdcr::PromptLayout;
use ecdysis_model::UsageLedger;
use ecdysis_runner::eval::rundir::{self, CandidateLayout, JsonlLog, TrainLayout};
use ecdysis_sandbox::store::ComponentHash;
use ecdysis_sys::fsutil::PathError;

/// The FDCR prompt layout the training run directory `root` records in
/// its `config.json`: `None` without one (a new run); a run recorded
/// before the option names none and used [`PromptLayout::PerTurn`]. A
/// corrupt file is an error naming it.
pub fn recorded_layout(root: &Path) -> Result<Option<PromptLayout>, TrainError> {
    let path = root.join(rundir::CONFIG_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(PathError::new("read", &path, e).into()),
    };
    let corrupt = |e: serde_json::Error| TrainError::Corrupt {
        path: path.clone(),
        message: e.to_string(),
    };
    let config: serde_json::Value = serde_json::from_slice(&bytes).map_err(corrupt)?;
    match config.get("roles").and_then(|r| r.get("prompt_layout")) {
        None => Ok(Some(PromptLayout::PerTurn)),
        Some(v) => serde_json::from_value(v.clone()).map(Some).map_err(corrupt),
    }
}

/// An open training run directory.
pub struct TrainDir {
    layout: TrainLayout,
    rounds: JsonlLog<RoundRecord>,
}

impl TrainDir {
    /// Open `root` for `config`: refuse another configuration (with a
    /// diff), write `config.json`, read back the finished rounds.
    pub fn open(
        root: &Path,
        config: &TrainConfig,
    ) -> Result<(TrainDir, Vec<RoundRecord>), TrainError> {
        rundir::claim_dir(root, config, false)?;
        let layout = TrainLayout::new(root);
        let (rounds, done) = JsonlLog::open(&layout.rounds())?;
        Ok((TrainDir { layout, rounds }, done))
    }

    /// The directory.
    pub fn root(&self) -> &Path {
        self.layout.root()
    }

    /// Its files' paths.
    pub fn layout(&self) -> &TrainLayout {
        &self.layout
    }

    /// Where the coder edits the next candidate.
    pub fn staging(&self) -> PathBuf {
        self.layout.staging()
    }

    /// A candidate's directory (source, manifest, spec, diff...).
    pub fn candidate(&self, h: &ComponentHash) -> CandidateLayout {
        self.layout.candidate(h.as_str())
    }

    /// The runner's result directory for one evaluation of `h`.
    pub fn eval_dir(&self, h: &ComponentHash, label: &str) -> PathBuf {
        self.layout.eval(h.as_str(), label).root().to_path_buf()
    }

    /// The finished rounds recorded in `rounds.jsonl`, in order.
    pub fn recorded_rounds(&self) -> Result<Vec<RoundRecord>, TrainError> {
        Ok(rundir::read_jsonl(&self.layout.rounds(), false)?)
    }

    /// Whether a finished round of `rounds.jsonl` judged candidate `h`.
    /// Its files alone do not say so: a run killed during a gate leaves
    /// them, and the resumed round must judge that candidate again.
    pub fn judged(&self, h: &ComponentHash) -> Result<bool, TrainError> {
        Ok(self
            .recorded_rounds()?
            .iter()
            .any(|r| r.candidate.as_ref() == Some(h)))
    }

    /// Append a finished round (synced before returning).
    pub fn append_round(&self, record: &RoundRecord) -> Result<(), TrainError> {
        Ok(self.rounds.append(record)?)
    }

    /// The starting harness, if it was built already.
    pub fn initial(&self) -> Result<Option<ComponentHash>, TrainError> {
        read_hash(&self.layout.initial())
    }

    /// Record the starting harness.
    pub fn set_initial(&self, h: &ComponentHash) -> Result<(), TrainError> {
        write_text(&self.layout.initial(), h.as_str())
    }

    /// The incumbent after the finished rounds: the last accepted candidate
    /// of `rounds.jsonl`, else `initial`. The `incumbent` file mirrors it
    /// for users; a corrupt one is an error naming it, a stale one (a kill
    /// between the round's record and the file) is rewritten.
    pub fn incumbent(
        &self,
        initial: &ComponentHash,
        done: &[RoundRecord],
    ) -> Result<ComponentHash, TrainError> {
        let from_log = match done.iter().rev().find(|r| r.accepted) {
            Some(r) => r.candidate.clone().ok_or_else(|| TrainError::Corrupt {
                path: self.layout.rounds(),
                message: format!("round {} is accepted but names no candidate", r.round),
            })?,
            None => initial.clone(),
        };
        let path = self.layout.incumbent();
        if read_hash(&path)?.as_ref() != Some(&from_log) {
            self.set_incumbent(&from_log)?;
        }
        Ok(from_log)
    }

    /// Record a new incumbent.
    pub fn set_incumbent(&self, h: &ComponentHash) -> Result<(), TrainError> {
        write_text(&self.layout.incumbent(), h.as_str())
    }

    /// Load the calls of earlier processes of this run into `ledger`, so
    /// budgets hold across resumes.
    pub fn import_ledger(&self, ledger: &UsageLedger) -> Result<(), TrainError> {
        if let Some(earlier) = self.read::<LedgerFile>(TrainLayout::LEDGER)? {
            ledger.import(earlier.calls);
        }
        Ok(())
    }

    /// Save `ledger.json`.
    pub fn save_ledger(&self, ledger: &UsageLedger) -> Result<(), TrainError> {
        self.write(
            TrainLayout::LEDGER,
            &LedgerFile {
                summary: ledger.summary(),
                calls: ledger.calls(),
            },
        )
    }

    /// Read a JSON file of the run (`None` when absent; corrupt: an error
    /// naming it).
    pub fn read<T: DeserializeOwned>(&self, name: &str) -> Result<Option<T>, TrainError> {
        let path = self.root().join(name);
        match std::fs::read(&path) {
            Ok(bytes) => {
                serde_json::from_slice(&bytes)
                    .map(Some)
                    .map_err(|e| TrainError::Corrupt {
                        path,
                        message: e.to_string(),
                    })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(PathError::new("read", &path, e).into()),
        }
    }

    /// Write a JSON file of the run atomically.
    pub fn write<T: Serialize>(&self, name: &str, value: &T) -> Result<(), TrainError> {
        write_json(&self.root().join(name), value)
    }

    /// Episodes this training run has paid for, across resumes: every
    /// finished line of every evaluation (the runner never re-runs them).
    pub fn paid_episodes(&self) -> u64 {
        let Ok(entries) = std::fs::read_dir(self.layout.evals()) else {
            return 0;
        };
        entries
            .flatten()
            .filter_map(|e| std::fs::read(e.path().join(rundir::TRAJECTORIES_FILE)).ok())
            .map(|bytes| {
                bytes
                    .split(|b| *b == b'\n')
                    .filter(|l| !l.is_empty())
                    .count() as u64
            })
            .sum()
    }

    /// Whether the user asked the run to stop after the current round.
    pub fn stop_requested(&self) -> bool {
        self.root().join("STOP").exists()
    }
}

/// Write any JSON value atomically.
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), TrainError> {
    Ok(rundir::write_json(path, value)?)
}

fn write_text(path: &Path, text: &str) -> Result<(), TrainError> {
    ecdysis_sys::fsutil::atomic_write(path, text.as_bytes())
        .map_err(|e| PathError::new("write", path, e))?;
    Ok(())
}

/// A file holding one component hash: `None` when absent, an error naming
/// the file when it holds anything else.
fn read_hash(path: &Path) -> Result<Option<ComponentHash>, TrainError> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            ComponentHash::parse(text.trim())
                .map(Some)
                .ok_or_else(|| TrainError::Corrupt {
                    path: path.to_path_buf(),
                    message: format!("`{}` is not a component hash", text.trim()),
                })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(PathError::new("read", path, e).into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::{CoderId, DiagnoserId, Method, PhaseTimes, TrainPlan};
    use ecdysis_runner::eval::RunSpec;

    fn config() -> TrainConfig {
        TrainConfig {
            plan: TrainPlan {
                method: Method::Ecdysis,
                test_split: None,
                test_trials: 1,
                ..TrainPlan::default()
            },
            train: RunSpec::default().config(None, vec!["1".into()]),
            test_tasks: vec![],
            diagnoser: DiagnoserId::Heuristic,
            coder: CoderId::Rules,
            gate_measure: Default::default(),
            roles: Default::default(),
            coder_network: None,
        }
    }

    fn round(n: u32, candidate: &ComponentHash, accepted: bool) -> RoundRecord {
        RoundRecord {
            round: n,
            incumbent: ComponentHash::of(b"i"),
            incumbent_score: 0.5,
            candidate: Some(candidate.clone()),
            candidate_score: Some(0.6),
            accepted,
            decision: "x".into(),
            failures: 1,
            groups: 1,
            recurring_groups: 0,
            coder_calls: 1,
            spec: None,
            seconds: PhaseTimes::default(),
            p_value: None,
            usd: 0.0,
            edit_to_episode_seconds: None,
            incumbent_measure: None,
            candidate_measure: None,
            gate_episodes: None,
        }
    }

    #[test]
    fn the_incumbent_comes_from_the_round_log_and_a_stale_file_is_rewritten() {
        let tmp = tempfile::tempdir().unwrap();
        let (dir, done) = TrainDir::open(tmp.path(), &config()).unwrap();
        assert!(done.is_empty());
        let initial = ComponentHash::of(b"initial");
        let cand = ComponentHash::of(b"candidate");
        assert_eq!(dir.incumbent(&initial, &[]).unwrap(), initial);
        dir.append_round(&round(1, &cand, true)).unwrap();
        dir.append_round(&round(2, &ComponentHash::of(b"x"), false))
            .unwrap();
        // A kill between the round's record and the `incumbent` file leaves
        // the file stale: the log decides and the file is repaired.
        dir.set_incumbent(&initial).unwrap();
        let (dir, done) = TrainDir::open(tmp.path(), &config()).unwrap();
        assert_eq!(done.len(), 2);
        assert_eq!(dir.incumbent(&initial, &done).unwrap(), cand);
        let file = std::fs::read_to_string(tmp.path().join("incumbent")).unwrap();
        assert_eq!(file, cand.as_str());
    }

    #[test]
    fn a_run_recorded_before_the_racing_gate_resumes_with_it_on_and_off_is_a_change() {
        let tmp = tempfile::tempdir().unwrap();
        let mut old = serde_json::to_value(config()).unwrap();
        assert_eq!(old["gate_race"], "on", "{old}");
        old.as_object_mut().unwrap().remove("gate_race");
        std::fs::write(
            tmp.path().join("config.json"),
            serde_json::to_vec(&old).unwrap(),
        )
        .unwrap();
        TrainDir::open(tmp.path(), &config()).unwrap();
        let mut off = config();
        off.plan.gate_race = crate::gate::race::GateRace::Off;
        let err = TrainDir::open(tmp.path(), &off).err().unwrap().to_string();
        assert!(err.contains("gate_race: \"on\" -> \"off\""), "{err}");
    }

    /// A run recorded before `--roles-layout` (its `config.json` names no
    /// layout) resumes with the per-turn layout, so it asks the requests it
    /// asked; the shared-prefix layout is a change of configuration; a new
    /// directory records none, and a run that records one keeps it.
    #[test]
    fn a_run_recorded_before_the_roles_layout_resumes_with_the_per_turn_layout() {
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(recorded_layout(tmp.path()).unwrap(), None, "a new run");
        let fdcr = |layout| {
            let mut c = config();
            c.diagnoser =
                DiagnoserId::Fdcr("fdcr(k=1): analyst m, critic m, engineer m, moderator m".into());
            c.roles.prompt_layout = layout;
            c
        };
        // Before the option: the same config without the field.
        let mut old = serde_json::to_value(fdcr(PromptLayout::SharedPrefix)).unwrap();
        assert_eq!(old["roles"]["prompt_layout"], "shared-prefix", "{old}");
        old["roles"]
            .as_object_mut()
            .unwrap()
            .remove("prompt_layout");
        std::fs::write(
            tmp.path().join("config.json"),
            serde_json::to_vec(&old).unwrap(),
        )
        .unwrap();
        assert_eq!(
            recorded_layout(tmp.path()).unwrap(),
            Some(PromptLayout::PerTurn)
        );
        let err = TrainDir::open(tmp.path(), &fdcr(PromptLayout::SharedPrefix))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("prompt_layout"), "{err}");
        TrainDir::open(tmp.path(), &fdcr(PromptLayout::PerTurn)).unwrap();
        // Resumed, the file still names no layout: it reads as before.
        let now: serde_json::Value =
            serde_json::from_slice(&std::fs::read(tmp.path().join("config.json")).unwrap())
                .unwrap();
        assert_eq!(now, old);

        let new = tempfile::tempdir().unwrap();
        TrainDir::open(new.path(), &fdcr(PromptLayout::SharedPrefix)).unwrap();
        assert_eq!(
            recorded_layout(new.path()).unwrap(),
            Some(PromptLayout::SharedPrefix)
        );
        std::fs::write(
            new.path().join("config.json"),
            b"{\"roles\": {\"prompt_layout\": 3}}",
        )
        .unwrap();
        let err = recorded_layout(new.path()).err().unwrap().to_string();
        assert!(err.contains("config.json"), "{err}");
    }

    #[test]
    fn corrupt_files_are_errors_naming_them_never_a_fresh_start() {
        let tmp = tempfile::tempdir().unwrap();
        let (dir, _) = TrainDir::open(tmp.path(), &config()).unwrap();
        let cand = ComponentHash::of(b"candidate");
        dir.append_round(&round(1, &cand, true)).unwrap();
        dir.append_round(&round(2, &cand, false)).unwrap();
        drop(dir);
        // Damage the first of two lines: an error naming file and line.
        let log = tmp.path().join("rounds.jsonl");
        let text = std::fs::read_to_string(&log).unwrap();
        std::fs::write(&log, text.replacen("\"round\":1", "\"round\":\"one\"", 1)).unwrap();
        let err = TrainDir::open(tmp.path(), &config())
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("rounds.jsonl") && err.contains("line 1"),
            "{err}"
        );
        // A corrupt incumbent file.
        std::fs::write(&log, &text).unwrap();
        let (dir, done) = TrainDir::open(tmp.path(), &config()).unwrap();
        std::fs::write(tmp.path().join("incumbent"), "not a hash").unwrap();
        let err = dir
            .incumbent(&ComponentHash::of(b"initial"), &done)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("incumbent") && err.contains("not a hash"),
            "{err}"
        );
        // A corrupt initial file.
        std::fs::write(tmp.path().join("initial"), "zz").unwrap();
        let err = dir.initial().unwrap_err().to_string();
        assert!(err.contains("initial"), "{err}");
        // Another configuration is refused with a diff.
        let mut other = config();
        other.plan.rounds = 9;
        let err = TrainDir::open(tmp.path(), &other)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("rounds: 3 -> 9"), "{err}");
    }
}
