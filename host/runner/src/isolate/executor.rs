//! Episodes of `run` and `train` in worker processes: the runner's
//! [`EpisodeExecutor`] backed by a [`WorkerPool`].

use std::sync::Arc;

use super::pool::{Death, Outcome, WorkerPool};
use super::protocol::{EpisodeJob, Reply, Request};
use crate::agent::{EndReason, EpisodeRecord, RoleUsage};
use crate::eval::{self, EpisodeExecutor, RunError};
use ecdysis_env::Domain;
use ecdysis_model::UsageLedger;

/// Runs each episode of one job on the pool.
pub struct ProcessExecutor {
    /// The worker processes.
    pub pool: Arc<WorkerPool>,
    /// What every episode of the run shares.
    pub job: Arc<EpisodeJob>,
    /// The parent's copy of the domain: scores the episodes a dead worker
    /// lost (an empty trajectory, nothing the harness wrote).
    pub domain: Arc<dyn Domain>,
    /// Where the workers' model calls are recorded.
    pub ledger: Option<Arc<UsageLedger>>,
}

/// The record of an episode whose worker died or could not serve it.
///
/// A worker that dies while running an episode with a harness is recorded
/// as `harness_error` and scored (as a failure): the harness, or input the
/// episode derived from it, is the likely cause, and a harness whose
/// episodes kill their worker must not escape scoring by having them
/// requeued forever. A worker that cannot be started at all, or a death
/// with no harness loaded (Direct), is `infrastructure_error`: the runner
/// requeues it and never scores it.
pub fn lost_episode(
    job: &EpisodeJob,
    task_id: &str,
    trial: u32,
    end: EndReason,
    detail: String,
    wall_ms: u64,
) -> EpisodeRecord {
    EpisodeRecord {
        task_id: task_id.to_string(),
        trial,
        domain: job.spec.settings.domain.clone(),
        seed: eval::episode_seed(job.spec.settings.seed, task_id, trial),
        end,
        end_detail: Some(detail),
        steps: 0,
        tool_errors: 0,
        transcript: Vec::new(),
        hooks: Vec::new(),
        agent_usage: RoleUsage::default(),
        user_usage: RoleUsage::default(),
        wall_ms,
        model_wait_ms: 0.0,
        evaluation: None,
        reward: 0.0,
        success: false,
    }
}

/// The end reason of an episode whose worker died (see [`lost_episode`]).
pub fn death_end(job: &EpisodeJob, death: &Death) -> EndReason {
    if death.is_infrastructure() || job.harness.is_none() {
        EndReason::InfrastructureError
    } else {
        EndReason::HarnessError
    }
}

impl EpisodeExecutor for ProcessExecutor {
    fn episode(
        self: Arc<Self>,
        task_id: String,
        trial: u32,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<EpisodeRecord, RunError>> + Send>>
    {
        Box::pin(async move {
            let request = Request::Episode {
                job: self.job.clone(),
                task_id: task_id.clone(),
                trial,
                cpu_seconds: self.pool.limits().cpu_per_request.as_secs(),
                // What is left of the run's spending limit: each worker's
                // calls are checked against it before they are sent.
                spend_usd: self.ledger.as_ref().and_then(|l| {
                    l.spend_limit()
                        .map(|limit| (limit - l.summary().total.usd).max(0.0))
                }),
            };
            match self.pool.request(request, None).await {
                Outcome::Reply(Reply::Episode { record, calls }) => {
                    if let Some(ledger) = &self.ledger {
                        ledger.append(calls);
                    }
                    Ok(*record)
                }
                Outcome::Reply(Reply::Error {
                    message,
                    infrastructure: true,
                }) => Ok(lost_episode(
                    &self.job,
                    &task_id,
                    trial,
                    EndReason::InfrastructureError,
                    message,
                    0,
                )),
                Outcome::Reply(Reply::Error { message, .. }) => Err(RunError::Worker(message)),
                Outcome::Reply(other) => Err(RunError::Worker(format!(
                    "unexpected worker reply {other:?}"
                ))),
                Outcome::Died(death) => {
                    let end = death_end(&self.job, &death);
                    tracing::warn!(task = %task_id, trial, "{}", death.describe());
                    let mut record = lost_episode(
                        &self.job,
                        &task_id,
                        trial,
                        end,
                        death.describe(),
                        death.elapsed.as_millis() as u64,
                    );
                    if end != EndReason::InfrastructureError {
                        eval::score(&*self.domain, &mut record)?;
                    }
                    Ok(record)
                }
            }
        })
    }
}
