//! The worker loop: claim an episode from the database, run it in a worker
//! process, record the result. `serve` runs one in-process (its `[worker]
//! slots`); `ecdysis-host worker --database …` runs one on any machine that
//! reaches the database.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::audit::{self, kind};
use super::db::Db;
use super::domains::Domains;
use super::evaluations::ensure_local;
use super::quota::Quotas;
use super::scheduler::{self, Beat, Claim};
use crate::agent::EndReason;
use crate::isolate::{
    DomainSource, EpisodeJob, Outcome, Reply, Request, WorkerPool, death_end, lost_episode,
};
use crate::store::{ComponentHash, ComponentStore};

/// What a worker loop needs.
pub struct WorkerLoop {
    /// This worker's name in leases and audit records.
    pub id: String,
    /// The shared database.
    pub db: Db,
    /// The episode worker processes.
    pub pool: Arc<WorkerPool>,
    /// This machine's component store.
    pub store: ComponentStore,
    /// Where the worker processes find the domains' data.
    pub source: DomainSource,
    /// Opens domains to score episodes whose worker process died.
    pub domains: Arc<Domains>,
    /// The default quotas (with each tenant's overrides, they gate claims).
    pub quotas: Quotas,
    /// How long a claim lasts without a heartbeat.
    pub lease: Duration,
    /// Attempts of an episode before it is given up.
    pub max_attempts: u32,
    /// Woken when new work is queued (in-process API); otherwise the loop
    /// polls.
    pub work: Arc<tokio::sync::Notify>,
}

/// How long an idle worker waits before looking for work again.
const IDLE_POLL: Duration = Duration::from_millis(100);

impl WorkerLoop {
    /// Run until `stop` turns true.
    pub async fn run(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        let slots = Arc::new(tokio::sync::Semaphore::new(self.pool.workers()));
        let mut last_reclaim = std::time::Instant::now() - self.lease;
        loop {
            if *stop.borrow() {
                break;
            }
            let permit = tokio::select! {
                p = slots.clone().acquire_owned() => p.expect("semaphore open"),
                _ = stop.changed() => break,
            };
            if last_reclaim.elapsed() >= self.lease / 4 {
                last_reclaim = std::time::Instant::now();
                if let Err(e) = scheduler::reclaim_expired(&self.db, self.max_attempts).await {
                    tracing::warn!("reclaiming expired leases: {e}");
                }
            }
            match scheduler::claim(&self.db, &self.id, self.lease, &self.quotas).await {
                Ok(Some(claim)) => {
                    let me = self.clone();
                    tokio::spawn(async move {
                        me.serve(claim).await;
                        drop(permit);
                    });
                }
                Ok(None) => {
                    drop(permit);
                    tokio::select! {
                        _ = tokio::time::sleep(IDLE_POLL) => {}
                        _ = self.work.notified() => {}
                        _ = stop.changed() => break,
                    }
                }
                Err(e) => {
                    drop(permit);
                    tracing::warn!("claiming an episode: {e}");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }

    /// Run one claimed episode to its recorded end.
    async fn serve(&self, claim: Claim) {
        if let Err(e) = self.try_serve(&claim).await {
            tracing::warn!(evaluation = %claim.eval_id, task = %claim.task_id, "episode not recorded: {e}");
        }
    }

    async fn try_serve(&self, claim: &Claim) -> Result<(), String> {
        let mut job: EpisodeJob = serde_json::from_str(&claim.job).map_err(|e| e.to_string())?;
        job.store = std::path::absolute(self.store.root()).map_err(|e| e.to_string())?;
        job.source = self.source.clone();
        if let Some(h) = &job.harness {
            let hash = ComponentHash::parse(h).ok_or("bad harness hash")?;
            ensure_local(&self.db, &self.store, &hash)
                .await
                .map_err(|e| e.to_string())?;
        }
        let cancel = Arc::new(AtomicBool::new(false));
        let beat_stop = Arc::new(tokio::sync::Notify::new());
        let heart = {
            let (db, claim, cancel, lease, stop) = (
                self.db.clone(),
                claim.clone(),
                cancel.clone(),
                self.lease,
                beat_stop.clone(),
            );
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = tokio::time::sleep(lease / 4) => {}
                        _ = stop.notified() => return,
                    }
                    match scheduler::heartbeat(&db, &claim, lease).await {
                        Ok(Beat::Held) => {}
                        Ok(Beat::Cancelled | Beat::Lost) => {
                            cancel.store(true, Ordering::SeqCst);
                            return;
                        }
                        Err(e) => tracing::warn!("heartbeat: {e}"),
                    }
                }
            })
        };
        let request = Request::Episode {
            job: Arc::new(job.clone()),
            task_id: claim.task_id.clone(),
            trial: claim.trial,
            cpu_seconds: self.pool.limits().cpu_per_request.as_secs(),
        };
        let outcome = self.pool.request(request, Some(cancel.clone())).await;
        beat_stop.notify_one();
        let _ = heart.await;
        let db = &self.db;
        let e = |e: super::db::DbError| e.to_string();
        match outcome {
            Outcome::Reply(Reply::Episode { record, calls }) => {
                if record.end == EndReason::InfrastructureError {
                    scheduler::requeue(db, claim, &record, self.max_attempts)
                        .await
                        .map_err(e)?;
                } else {
                    let usd: f64 = calls.iter().filter_map(|c| c.usd).sum();
                    let fuel: u64 = record.hooks.iter().map(|h| h.fuel).sum();
                    scheduler::complete(db, claim, &record, usd, fuel)
                        .await
                        .map_err(e)?;
                }
            }
            Outcome::Reply(Reply::Error { message, .. }) => {
                let record = lost_episode(
                    &job,
                    &claim.task_id,
                    claim.trial,
                    EndReason::InfrastructureError,
                    message,
                    0,
                );
                scheduler::requeue(db, claim, &record, self.max_attempts)
                    .await
                    .map_err(e)?;
            }
            Outcome::Reply(other) => return Err(format!("unexpected worker reply {other:?}")),
            Outcome::Died(_) if cancel.load(Ordering::SeqCst) => {
                scheduler::stopped(db, claim).await.map_err(e)?;
            }
            Outcome::Died(death) => {
                let end = death_end(&job, &death);
                let detail = death.describe();
                audit::record(
                    db,
                    kind::WORKER_CRASH,
                    Some(&claim.tenant),
                    serde_json::json!({
                        "evaluation": claim.eval_id, "task": claim.task_id, "trial": claim.trial,
                        "worker": self.id, "detail": detail,
                        "peak_rss_kib": death.exit.map(|x| x.peak_rss_kib),
                    }),
                )
                .await
                .map_err(e)?;
                let mut record = lost_episode(
                    &job,
                    &claim.task_id,
                    claim.trial,
                    end,
                    detail,
                    death.elapsed.as_millis() as u64,
                );
                if end == EndReason::InfrastructureError {
                    scheduler::requeue(db, claim, &record, self.max_attempts)
                        .await
                        .map_err(e)?;
                } else {
                    let domain = self
                        .domains
                        .get(&job.spec.domain)
                        .await
                        .map_err(|x| x.to_string())?;
                    crate::eval::score(&*domain, &mut record).map_err(|x| x.to_string())?;
                    scheduler::complete(db, claim, &record, 0.0, 0)
                        .await
                        .map_err(e)?;
                }
            }
        }
        Ok(())
    }
}
