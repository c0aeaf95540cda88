//! What the parent and a worker process say to each other: one JSON object
//! per line, requests on the worker's stdin, replies on its stdout.

use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::agent::EpisodeRecord;
use crate::eval::{ModelServices, RunSpec};
use ecdysis_model::CallRecord;
use ecdysis_sandbox::sandbox::Limits;
use ecdysis_sandbox::store::ComponentHash;

/// How a worker opens a job's domain: the parent's `--data`,
/// `--mysql-url` and `--sql-mode`, the contract's one options type
/// [`ecdysis_env::DomainOptions`], read by the registry the binary hands
/// to [`serve`](super::child::serve) (the worker inherits the parent's
/// working directory and environment, so `None` resolves the same way).
pub type DomainSource = ecdysis_env::DomainOptions;

/// Everything a worker needs to run episodes of one evaluation: what to
/// run (the spec), with which harness (a component hash in `store`), where
/// the domain's data is, and the model services.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpisodeJob {
    /// The run's specification (domain, models, limits, seed).
    pub spec: RunSpec,
    /// A component hash in `store`, or `None` for Direct.
    pub harness: Option<ComponentHash>,
    /// The component store the harness is loaded from (its precompiled
    /// artifacts are shared with the parent).
    pub store: PathBuf,
    /// The store's shared native-code directory, when it has one
    /// (`ComponentStore::with_native_cache`); else the store's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native_cache: Option<PathBuf>,
    /// Where the worker finds the domains' data.
    pub source: DomainSource,
    /// The model services (response cache, prices).
    pub services: ModelServices,
    /// A price table (the format of `--prices`) merged over the embedded
    /// one, inline: the service's model aliases carry their prices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prices: Option<serde_json::Value>,
}

impl EpisodeJob {
    /// The key a worker caches the prepared job under.
    pub fn key(&self) -> String {
        let json = serde_json::to_vec(self).expect("job serializes");
        blake3::hash(&json).to_hex().to_string()
    }
}

/// A fault a worker injects on purpose, for the isolation tests. Honoured
/// only by a binary built with the `testing` feature *and* started with
/// [`TEST_FAULT_ENV`] set: a harness can neither build the host nor set a
/// host process's environment, so it cannot reach this.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TestFault {
    /// `abort()`: SIGABRT, as a failed assertion in native code would.
    Abort,
    /// Allocate and touch memory without bound (a host bug under hostile
    /// input that keeps growing).
    Allocate,
    /// Spin on the CPU without end.
    Spin,
    /// Sleep without using CPU (a stall only the wall-clock limit ends).
    Hang,
    /// A Rust panic on the worker's main thread.
    Panic,
}

/// The environment variable that arms [`TestFault`]s in a worker:
/// `<fault>@<task id>` (e.g. `abort@3`): the fault fires when that task
/// runs. Several are separated by commas.
pub const TEST_FAULT_ENV: &str = "ECDYSIS_TEST_WORKER_FAULT";

/// A request to a worker.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "request", rename_all = "snake_case")]
pub enum Request {
    /// Run one episode of `job` and score it.
    Episode {
        /// What every episode of the run shares.
        job: Arc<EpisodeJob>,
        /// The task to run.
        task_id: String,
        /// Which trial of the task (seeds differ per trial).
        trial: u32,
        /// CPU time the episode may use, in seconds (`RLIMIT_CPU`).
        cpu_seconds: u64,
        /// Dollars the episode's model calls may spend, each checked before
        /// it is sent (`None`: no limit).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        spend_usd: Option<f64>,
    },
    /// Compile an untrusted component from `path` and report what
    /// `inspect` and `check` say (the evaluation service's uploads).
    Check {
        /// The component file (staged by the parent).
        path: PathBuf,
        /// The sandbox limits `check` runs the hooks under.
        limits: Limits,
        /// CPU time the check may use, in seconds (`RLIMIT_CPU`).
        cpu_seconds: u64,
    },
}

impl Request {
    /// The task an episode request runs, as `domain/task` (what a worker
    /// process caches per task is keyed so); `None` for other requests.
    pub fn task_key(&self) -> Option<String> {
        match self {
            Request::Episode { job, task_id, .. } => {
                Some(format!("{}/{task_id}", job.spec.settings.domain))
            }
            Request::Check { .. } => None,
        }
    }
}

/// A worker's answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum Reply {
    /// Sent once at start: the worker is ready for requests.
    Ready {
        /// The worker's process id.
        pid: u32,
    },
    /// A finished (scored) episode and the model calls it made.
    Episode {
        /// The scored episode.
        record: Box<EpisodeRecord>,
        /// The model calls it made (for the usage ledger).
        calls: Vec<CallRecord>,
    },
    /// What a component check found.
    Checked {
        /// What `inspect` and `check` said.
        report: Box<CheckReply>,
    },
    /// The request could not be served; `infrastructure`: the worker's
    /// setting is at fault (data missing, store unreadable), not the
    /// request.
    Error {
        /// What went wrong.
        message: String,
        /// Whether the worker's setting, not the request, is at fault.
        infrastructure: bool,
    },
}

/// The outcome of checking an uploaded component.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CheckReply {
    /// The component's hash.
    pub hash: String,
    /// The world it implements (`none` when it exports no hooks).
    pub world: String,
    /// Whether every hook answered within the contract.
    pub passed: bool,
    /// `inspect` (imports, exports, size), as JSON.
    pub inspect: serde_json::Value,
    /// `check` (per-hook results), as JSON; `None` when it did not compile
    /// or link.
    pub check: Option<serde_json::Value>,
    /// Why it could not be compiled or linked.
    pub error: Option<String>,
}
