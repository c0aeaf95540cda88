//! The on-disk layout of run and training directories, named once: the
//! writers (runner, evolve) and the readers (report, export, experiment)
//! take their paths from here, so they agree by construction. Pure path
//! arithmetic, no I/O: reading and writing stay with their owners.

use std::path::{Path, PathBuf};

/// A run's result directory (`ecdysis-host run --out DIR`, and every
/// evaluation directory of a training run).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunLayout {
    root: PathBuf,
}

impl RunLayout {
    /// The run's configuration; a resume with a different one is refused.
    pub const CONFIG: &'static str = "config.json";
    /// One finished, scored episode per line, appended as each ends.
    pub const TRAJECTORIES: &'static str = "trajectories.jsonl";
    /// The run's metrics, written at the end of every invocation.
    pub const SUMMARY: &'static str = "summary.json";
    /// The HTML page `--report` writes.
    pub const REPORT: &'static str = "report.html";

    /// The layout of the directory `root`.
    pub fn new(root: impl Into<PathBuf>) -> RunLayout {
        RunLayout { root: root.into() }
    }

    /// The directory itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Path of the configuration file.
    pub fn config(&self) -> PathBuf {
        self.root.join(Self::CONFIG)
    }

    /// Path of [`Self::TRAJECTORIES`].
    pub fn trajectories(&self) -> PathBuf {
        self.root.join(Self::TRAJECTORIES)
    }

    /// Path of the summary file.
    pub fn summary(&self) -> PathBuf {
        self.root.join(Self::SUMMARY)
    }

    /// Path of [`Self::REPORT`].
    pub fn report(&self) -> PathBuf {
        self.root.join(Self::REPORT)
    }
}

/// A training run's directory (`ecdysis-host train --out DIR`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrainLayout {
    root: PathBuf,
}

impl TrainLayout {
    /// One finished round per line.
    pub const ROUNDS: &'static str = "rounds.jsonl";
    /// The starting harness's hash (a text file).
    pub const INITIAL: &'static str = "initial";
    /// The current incumbent's hash (a text file).
    pub const INCUMBENT: &'static str = "incumbent";
    /// Tokens and dollars per role.
    pub const LEDGER: &'static str = "ledger.json";
    /// The failure-aware task selection, when one was made.
    pub const SELECTION: &'static str = "selection.json";

    /// The layout of the directory `root`.
    pub fn new(root: impl Into<PathBuf>) -> TrainLayout {
        TrainLayout { root: root.into() }
    }

    /// The directory itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The training configuration (same name as a run's).
    pub fn config(&self) -> PathBuf {
        self.root.join(RunLayout::CONFIG)
    }

    /// The training summary (same name as a run's).
    pub fn summary(&self) -> PathBuf {
        self.root.join(RunLayout::SUMMARY)
    }

    /// Path of [`Self::ROUNDS`].
    pub fn rounds(&self) -> PathBuf {
        self.root.join(Self::ROUNDS)
    }

    /// Path of [`Self::INITIAL`].
    pub fn initial(&self) -> PathBuf {
        self.root.join(Self::INITIAL)
    }

    /// Path of [`Self::INCUMBENT`].
    pub fn incumbent(&self) -> PathBuf {
        self.root.join(Self::INCUMBENT)
    }

    /// Path of [`Self::LEDGER`].
    pub fn ledger(&self) -> PathBuf {
        self.root.join(Self::LEDGER)
    }

    /// Path of [`Self::SELECTION`].
    pub fn selection(&self) -> PathBuf {
        self.root.join(Self::SELECTION)
    }

    /// Where the coder edits the next candidate.
    pub fn staging(&self) -> PathBuf {
        self.root.join("staging")
    }

    /// Every candidate's directory is under this one, named by its hash.
    pub fn candidates(&self) -> PathBuf {
        self.root.join("candidates")
    }

    /// A candidate's directory, by its full hash.
    pub fn candidate(&self, hash: &str) -> CandidateLayout {
        CandidateLayout {
            root: self.candidates().join(hash),
        }
    }

    /// Every round's directory is under this one, named by its number.
    pub fn rounds_dir(&self) -> PathBuf {
        self.root.join("rounds")
    }

    /// A round's directory.
    pub fn round(&self, n: u32) -> PathBuf {
        self.rounds_dir().join(n.to_string())
    }

    /// A round's diagnosis transcript.
    pub fn round_transcript(&self, n: u32) -> PathBuf {
        self.round(n).join("transcript.json")
    }

    /// The evaluations' result directories are under this one.
    pub fn evals(&self) -> PathBuf {
        self.root.join("evals")
    }

    /// The result directory of one evaluation of a harness (its first 16
    /// hex digits and a label such as `train` or `test-k1`).
    pub fn eval(&self, hash: &str, label: &str) -> RunLayout {
        let short = hash.get(..16).unwrap_or(hash);
        RunLayout::new(self.evals().join(format!("{short}-{label}")))
    }

    /// The result directory of the Direct baseline's evaluation.
    pub fn direct_eval(&self, label: &str) -> RunLayout {
        RunLayout::new(self.evals().join(format!("direct-{label}")))
    }

    /// Whether `dir` looks like a training run (its config and either
    /// its rounds or its starting harness).
    pub fn is_training_run(dir: &Path) -> bool {
        let t = TrainLayout::new(dir);
        t.config().is_file() && (t.rounds().is_file() || t.initial().is_file())
    }
}

/// One candidate of a training run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CandidateLayout {
    root: PathBuf,
}

impl CandidateLayout {
    /// The directory itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The crate the candidate was built from.
    pub fn source(&self) -> PathBuf {
        self.root.join("source")
    }

    /// The store manifest of its component.
    pub fn manifest(&self) -> PathBuf {
        self.root.join("manifest.json")
    }

    /// The change spec it implements.
    pub fn spec(&self) -> PathBuf {
        self.root.join("spec.json")
    }

    /// The diagnosis that produced the spec.
    pub fn transcript(&self) -> PathBuf {
        self.root.join("transcript.json")
    }

    /// Its diff against the incumbent it was edited from.
    pub fn diff(&self) -> PathBuf {
        self.root.join("diff.patch")
    }

    /// Its training evaluation's summary.
    pub fn train_summary(&self) -> PathBuf {
        self.root.join("train_summary.json")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_names_the_files_the_docs_describe() {
        let t = TrainLayout::new("/r");
        assert_eq!(t.rounds(), Path::new("/r/rounds.jsonl"));
        assert_eq!(t.config(), Path::new("/r/config.json"));
        let h = "0123456789abcdef0123";
        assert_eq!(
            t.eval(h, "train").trajectories(),
            Path::new("/r/evals/0123456789abcdef-train/trajectories.jsonl")
        );
        // A short (or non-hex) name is kept whole, never sliced mid-char.
        assert_eq!(t.eval("é", "x").root(), Path::new("/r/evals/é-x"));
        assert_eq!(
            t.candidate(h).diff(),
            Path::new("/r/candidates/0123456789abcdef0123/diff.patch")
        );
        assert_eq!(
            t.direct_eval("test-k1").root(),
            Path::new("/r/evals/direct-test-k1")
        );
    }

    #[test]
    fn a_training_run_is_told_from_a_plain_run() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        std::fs::write(dir.join("config.json"), "{}").unwrap();
        assert!(!TrainLayout::is_training_run(dir), "a run is not training");
        std::fs::write(dir.join("rounds.jsonl"), "").unwrap();
        assert!(TrainLayout::is_training_run(dir));
    }
}
