//! `--isolate process` and the worker limits, shared by `run` and `train`.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;

use ecdysis_runner::isolate::{Isolation, PoolConfig, WorkerLimits, WorkerPool};

/// Where episodes run.
#[derive(Args, Debug, Clone)]
pub struct IsolateArgs {
    /// Where episodes run: in-process (default) or process (worker
    /// processes of this binary, each under a memory and CPU-time limit; a
    /// worker that dies costs only its episode, recorded as harness_error).
    #[arg(long, default_value = "in-process", help_heading = "Isolation")]
    pub isolate: Isolation,
    /// --isolate process: memory each worker may commit, in MiB
    /// (RLIMIT_DATA: heap and private writable mappings).
    #[arg(long, default_value_t = 4096, help_heading = "Isolation")]
    pub worker_memory_mib: u64,
    /// --isolate process: CPU seconds one episode may use (RLIMIT_CPU).
    #[arg(long, default_value_t = 300, help_heading = "Isolation")]
    pub worker_cpu_seconds: u64,
    /// --isolate process: wall-clock seconds one episode may take before
    /// its worker is killed.
    #[arg(long, default_value_t = 3600, help_heading = "Isolation")]
    pub worker_wall_seconds: u64,
}

impl IsolateArgs {
    /// The worker limits, checked.
    pub fn limits(&self) -> Result<WorkerLimits> {
        if self.worker_memory_mib < 64 {
            bail!(
                "--worker-memory-mib {} is too small for a worker (it loads wasmtime and the domain's data); give at least 64",
                self.worker_memory_mib
            );
        }
        if self.worker_cpu_seconds == 0 || self.worker_wall_seconds == 0 {
            bail!("--worker-cpu-seconds and --worker-wall-seconds must be at least 1");
        }
        Ok(WorkerLimits {
            memory_bytes: self.worker_memory_mib << 20,
            cpu_per_request: Duration::from_secs(self.worker_cpu_seconds),
            wall_per_request: Duration::from_secs(self.worker_wall_seconds),
            ..WorkerLimits::default()
        })
    }

    /// A pool of `workers` worker processes of this binary, when asked for.
    pub fn pool(&self, workers: usize) -> Result<Option<Arc<WorkerPool>>> {
        if self.isolate == Isolation::InProcess {
            return Ok(None);
        }
        let config = PoolConfig::this_binary(workers, self.limits()?)
            .context("locating this binary to start worker processes")?;
        Ok(Some(WorkerPool::start(config)))
    }
}
