//! Errors of the environment layer.

use std::path::PathBuf;

/// Why an environment could not be loaded or used.
#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    /// Reading a file failed.
    #[error("reading {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A data file is not what the reference package ships.
    #[error("{file}: {reason}")]
    Format {
        /// The data file (relative to the data root).
        file: String,
        /// What is wrong.
        reason: String,
    },
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
    /// A benchmark's own failure (its data set, its database server, its
    /// machines): the benchmark crate's typed error, worded as it words it
    /// (read it back with [`EnvError::benchmark_error`]). Boxed so this
    /// crate names no benchmark.
    #[error(transparent)]
    Benchmark(Box<dyn std::error::Error + Send + Sync + 'static>),
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

impl EnvError {
    /// A benchmark's own error as an [`EnvError::Benchmark`].
    pub fn benchmark(e: impl std::error::Error + Send + Sync + 'static) -> EnvError {
        EnvError::Benchmark(Box::new(e))
    }

    /// The benchmark's own error inside, if it is an `E`.
    pub fn benchmark_error<E: std::error::Error + 'static>(&self) -> Option<&E> {
        match self {
            EnvError::Benchmark(e) => e.downcast_ref::<E>(),
            _ => None,
        }
    }
}
