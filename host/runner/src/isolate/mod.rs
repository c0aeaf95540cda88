//! Process isolation for evaluation (`run`/`train --isolate process`, and
//! every episode of the evaluation service): episodes run in worker
//! processes of this binary, each under a memory limit (`RLIMIT_DATA`) and
//! a CPU-time limit (`RLIMIT_CPU`), with a wall-clock watchdog in the
//! parent. So even a bug in the host's own code under hostile input
//! (wasmtime, the environment emulation, JSON parsing) costs one worker and
//! the one episode it was running, recorded as `harness_error` (see
//! [`executor::lost_episode`] for why), and the run goes on with a fresh
//! worker.
//!
//! - [`protocol`]: the JSON-lines requests and replies, the job a worker
//!   runs episodes of.
//! - [`pool`]: the parent's side: long-lived workers, one request each at a
//!   time, the watchdog, what a death looked like (signal, peak RSS).
//! - [`child`]: the worker's side (`ecdysis-host episode-worker`).
//! - [`executor`]: the runner's executor on a pool.

pub mod child;
pub mod executor;
pub mod pool;
pub mod protocol;

pub use ecdysis_sys::rlimit::{Exit, signal_name};
pub use executor::{ProcessExecutor, death_end, lost_episode};
pub use pool::{
    Death, DeathCause, Outcome, PoolConfig, WORKER_SUBCOMMAND, WorkerLimits, WorkerPool,
};
pub use protocol::{
    CheckReply, DomainSource, EpisodeJob, Reply, Request, TEST_FAULT_ENV, TestFault,
};

/// Where episodes run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Isolation {
    /// As tasks of this process (the default).
    #[default]
    InProcess,
    /// In worker processes under memory and CPU limits.
    Process,
}

impl std::str::FromStr for Isolation {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "in-process" | "none" => Ok(Isolation::InProcess),
            "process" => Ok(Isolation::Process),
            other => Err(format!(
                "unknown isolation `{other}` (expected in-process or process)"
            )),
        }
    }
}

/// A worker pool and the data its workers open domains from: what a
/// library caller (`train`) passes to run its evaluations isolated.
#[derive(Clone)]
pub struct Workers {
    /// The worker processes.
    pub pool: std::sync::Arc<WorkerPool>,
    /// Where workers find the domains' data.
    pub source: DomainSource,
}

impl std::fmt::Debug for Workers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workers")
            .field("workers", &self.pool.workers())
            .field("limits", self.pool.limits())
            .field("source", &self.source)
            .finish()
    }
}

impl PartialEq for Workers {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.pool, &other.pool) && self.source == other.source
    }
}
