//! Experiment tracking: a run, training or experiment directory mirrored
//! into an MLflow tracking server over its REST API (no Python on our
//! side).
//!
//! What is sent is a pure function of the directory ([`plan`]): one MLflow
//! run per run directory, per training directory and per method of an
//! experiment (under a parent run for the experiment), with the config as
//! parameters, the numbers of every round and of the summary as metrics,
//! the harness hash, lineage and simulated/real label as tags, and the
//! report and accepted candidates' diffs and specs as artifacts.
//!
//! [`sync`] sends what the server does not have yet and records what it
//! acknowledged in `mlflow.json` inside the directory, so a sync that
//! failed (server down, slow, refusing) loses nothing and the next one,
//! after a resume or from `ecdysis-host mlflow sync`, sends each item
//! exactly once. A sync never takes longer than its deadline and never
//! fails the command that wrote the directory: its outcome is a
//! [`SyncReport`].
//!
//! It uses the report (a run's figures and page) and `ecdysis-sys`; never
//! the service or the CLI.

pub mod client;
pub mod plan;
pub mod state;
mod sync;

pub use client::{ClientError, MlflowClient};
pub use plan::{Plan, PlannedRun, plan};
pub use state::{STATE_FILE, SyncState};
pub use sync::{SyncOptions, SyncReport, sync};

/// Why a directory could not be planned or its state kept.
#[derive(Debug, thiserror::Error)]
pub enum TrackError {
    /// The directory is not a run, training or experiment directory, or
    /// one of its files is corrupt.
    #[error(transparent)]
    Report(#[from] ecdysis_report::ReportError),
    /// `mlflow.json` could not be read or written.
    #[error("{path}: {reason}")]
    State {
        /// The state file.
        path: std::path::PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// The tracking URI is not an `http(s)://` URL.
    #[error(
        "the MLflow tracking URI `{0}` is not an http:// or https:// URL (a local `file:` store is not served over REST; start `mlflow server` and give its URL)"
    )]
    Uri(String),
}
