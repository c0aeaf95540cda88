//! `mlflow.json`: what the tracking server has acknowledged for a
//! directory, written atomically after every acknowledged batch.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::TrackError;

/// The state file, inside the tracked directory.
pub const STATE_FILE: &str = "mlflow.json";

/// One MLflow run's sync state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunState {
    /// The server's run id.
    pub run_id: String,
    /// Where its artifacts go.
    pub artifact_uri: String,
    /// Ids of the items the server acknowledged.
    pub sent: BTreeSet<String>,
    /// Ids of the batch being sent when the last sync stopped: checked
    /// against the server before anything is sent again.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub in_flight: BTreeSet<String>,
    /// Items the server refused, with its answer (not retried).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub refused: BTreeMap<String, String>,
}

/// The sync state of a directory.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SyncState {
    /// The server it was sent to.
    pub tracking_uri: String,
    /// The MLflow experiment's name.
    pub experiment: String,
    /// Its id on that server.
    pub experiment_id: Option<String>,
    /// This directory's key (tag `ecdysis.key` of its runs), so a lost
    /// state file finds the runs again instead of making new ones.
    pub key: String,
    /// By planned run key (`run`, `training`, `method:<name>`).
    pub runs: BTreeMap<String, RunState>,
    /// Items not sent yet after the last sync.
    pub pending: usize,
    /// Why the last sync stopped early, if it did.
    pub last_error: Option<String>,
}

impl SyncState {
    /// The path of `dir`'s state file.
    pub fn path(dir: &Path) -> PathBuf {
        dir.join(STATE_FILE)
    }

    /// `dir`'s state, `None` when it was never synced; a corrupt file is
    /// an error naming it (never silently replaced: that would resend).
    pub fn load(dir: &Path) -> Result<Option<SyncState>, TrackError> {
        let path = Self::path(dir);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| TrackError::State {
                    path,
                    reason: format!("corrupt ({e}); move it away to send everything again"),
                }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(TrackError::State {
                path,
                reason: e.to_string(),
            }),
        }
    }

    /// Writes the state atomically.
    pub fn save(&self, dir: &Path) -> Result<(), TrackError> {
        let path = Self::path(dir);
        let bytes = serde_json::to_vec_pretty(self).expect("state serializes");
        ecdysis_sys::fsutil::atomic_write(&path, &bytes).map_err(|e| TrackError::State {
            path,
            reason: e.to_string(),
        })
    }
}
