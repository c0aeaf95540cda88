//! The worker loop: claim an episode from the database, run it in a worker
//! process, record the result. `serve` runs one in-process (its `[worker]
//! slots`); `ecdysis-host worker --database …` runs one on any machine that
//! reaches the database.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::audit::{self, kind};
use super::db::{Db, DbError};
use super::domains::Domains;
use super::evaluations::{CreateError, ensure_local};
use super::quota::Quotas;
use super::scheduler::{self, Beat, Claim, Completion, Settle};
use ecdysis_env::EnvError;
use ecdysis_runner::agent::EndReason;
use ecdysis_runner::eval::RunError;
use ecdysis_runner::isolate::{
    DomainSource, EpisodeJob, Outcome, Reply, Request, WorkerPool, death_end, lost_episode,
};
use ecdysis_sandbox::store::ComponentStore;

/// Why a claimed episode was not run to a result (logged; its lease puts
/// it back in the queue).
#[derive(Debug, thiserror::Error)]
enum EpisodeError {
    /// The claim's job is not a readable [`EpisodeJob`].
    #[error(transparent)]
    Job(#[from] serde_json::Error),
    /// The component store's path could not be made absolute.
    #[error(transparent)]
    StorePath(std::io::Error),
    /// The harness could not be fetched into this machine's store.
    #[error(transparent)]
    Fetch(#[from] CreateError),
    /// The worker process answered with something other than an episode
    /// or an error.
    #[error("unexpected worker reply {0:?}")]
    UnexpectedReply(Box<Reply>),
    /// The database failed.
    #[error(transparent)]
    Db(#[from] DbError),
    /// The domain that scores a dead worker's episode could not be opened.
    #[error(transparent)]
    Domain(#[from] EnvError),
    /// Scoring a dead worker's episode failed.
    #[error(transparent)]
    Score(#[from] RunError),
}

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

/// Episodes claimed per worker process: the one it runs and two waiting.
/// The second waiting one lets results wait for each other (below) while
/// every process still has its next episode in hand, so one database turn
/// writes several results. The price: a newly arrived tenant may wait up
/// to two episodes per process for its first turn, not one.
const CLAIMS_PER_PROCESS: usize = 3;

/// How long a result may wait for others to share its turn (only while
/// every process is busy with at least two episodes waiting, so no process
/// runs dry meanwhile).
const GROUP_WAIT: Duration = Duration::from_millis(20);

/// How long an idle worker waits before looking for work again.
const IDLE_POLL: Duration = Duration::from_millis(100);

impl WorkerLoop {
    /// Run until `stop` turns true.
    ///
    /// One database transaction per turn, not two per episode: a turn
    /// writes every episode finished since the last one (a group commit)
    /// and claims as many episodes as slots are free, fairly across
    /// tenants ([`scheduler::settle_and_claim`]). A slot is freed as soon as
    /// its episode's result is handed over, so the next turn claims its
    /// replacement in the same transaction that records the result. Crash
    /// safety is unchanged: a result not yet committed when the process
    /// dies is lost with its lease, which expires and puts the episode back
    /// in the queue (scored once, by whoever holds the current attempt).
    pub async fn run(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        // Claims in hand: one running and two waiting per worker process
        // (CLAIMS_PER_PROCESS). A waiting one starts the moment a process
        // frees up (the pool's queue), instead of after a database turn,
        // which would leave a process idle between short episodes. It counts as running for the fairness
        // order and the `concurrent_episodes` quota from its claim on (its
        // lease is renewed while it waits), so quotas hold exactly; a newly
        // arrived tenant waits at most two episodes more per process for
        // its turn.
        let slots = Arc::new(tokio::sync::Semaphore::new(
            CLAIMS_PER_PROCESS * self.pool.workers(),
        ));
        let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<Completion>();
        let mut pending: Vec<Completion> = Vec::new();
        let mut last_reclaim = std::time::Instant::now() - self.lease;
        // Whether the last turn found less work than it had slots for: then
        // wait for news (a result, new work, the poll timer) before asking
        // again.
        let mut idle = false;
        'turns: loop {
            if *stop.borrow() {
                break;
            }
            if pending.is_empty() && (idle || slots.available_permits() == 0) {
                tokio::select! {
                    c = done_rx.recv() => match c {
                        Some(c) => pending.push(c),
                        // Every sender is gone: nothing more will come.
                        None => break,
                    },
                    _ = tokio::time::sleep(IDLE_POLL), if idle => {}
                    _ = self.work.notified(), if idle => {}
                    _ = stop.changed() => break,
                }
            }
            while let Ok(c) = done_rx.try_recv() {
                pending.push(c);
            }
            // Results wait up to GROUP_WAIT for more to share their turn,
            // as long as more than `workers + 1` claims are in hand (every
            // process busy and at least two episodes waiting), so no
            // process runs dry meanwhile. A turn's fixed statements (lock, candidate
            // tenants, queue, claim, claim times, commit) are most of a
            // short episode's database work.
            let workers = self.pool.workers();
            let total = CLAIMS_PER_PROCESS * workers;
            let grouping = tokio::time::Instant::now() + GROUP_WAIT;
            while !pending.is_empty() && !idle && total - slots.available_permits() > workers + 1 {
                tokio::select! {
                    c = done_rx.recv() => match c {
                        Some(c) => pending.push(c),
                        // Every sender is gone: nothing more will come.
                        None => break,
                    },
                    _ = tokio::time::sleep_until(grouping) => break,
                    _ = stop.changed() => break 'turns,
                }
            }
            while let Ok(c) = done_rx.try_recv() {
                pending.push(c);
            }
            if last_reclaim.elapsed() >= self.lease / 4 {
                last_reclaim = std::time::Instant::now();
                if let Err(e) = scheduler::reclaim_expired(&self.db, self.max_attempts).await {
                    tracing::warn!("reclaiming expired leases: {e}");
                }
            }
            let mut permits = Vec::new();
            while let Ok(p) = slots.clone().try_acquire_owned() {
                permits.push(p);
            }
            let turn = scheduler::settle_and_claim(
                &self.db,
                &pending,
                &self.id,
                self.lease,
                &self.quotas,
                permits.len(),
            )
            .await;
            match turn {
                Ok((written, claims)) => {
                    for (c, ok) in pending.drain(..).zip(written) {
                        if !ok {
                            tracing::info!(evaluation = %c.claim.eval_id, task = %c.claim.task_id, "result not recorded: the claim had expired");
                        }
                    }
                    idle = claims.len() < permits.len();
                    for (claim, permit) in claims.into_iter().zip(permits) {
                        let (me, done) = (self.clone(), done_tx.clone());
                        tokio::spawn(async move {
                            let settled = me.serve(claim).await;
                            // The slot is free once the result is known.
                            drop(permit);
                            if let Some(c) = settled {
                                let _ = done.send(c);
                            }
                        });
                    }
                }
                Err(e) => {
                    // The results stay pending for the next turn.
                    drop(permits);
                    tracing::warn!("recording results and claiming episodes: {e}");
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                        _ = stop.changed() => break,
                    }
                }
            }
        }
        // Write what already finished before leaving.
        while let Ok(c) = done_rx.try_recv() {
            pending.push(c);
        }
        if !pending.is_empty()
            && let Err(e) = scheduler::settle_and_claim(
                &self.db,
                &pending,
                &self.id,
                self.lease,
                &self.quotas,
                0,
            )
            .await
        {
            tracing::warn!("recording results at shutdown: {e}");
        }
    }

    /// Run one claimed episode to its result (`None`: nothing to record;
    /// its lease will put it back in the queue).
    async fn serve(&self, claim: Claim) -> Option<Completion> {
        match self.try_serve(&claim).await {
            Ok(settle) => Some(Completion { claim, settle }),
            Err(e) => {
                tracing::warn!(evaluation = %claim.eval_id, task = %claim.task_id, "episode not recorded: {e}");
                None
            }
        }
    }

    async fn try_serve(&self, claim: &Claim) -> Result<Settle, EpisodeError> {
        let mut job: EpisodeJob = serde_json::from_str(&claim.job)?;
        job.store = std::path::absolute(self.store.root()).map_err(EpisodeError::StorePath)?;
        job.source = self.source.clone();
        if let Some(hash) = &job.harness {
            ensure_local(&self.db, &self.store, hash).await?;
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
            spend_usd: Some(claim.spend_allowance),
        };
        let outcome = self.pool.request(request, Some(cancel.clone())).await;
        beat_stop.notify_one();
        let _ = heart.await;
        let db = &self.db;
        let requeue = |record: ecdysis_runner::agent::EpisodeRecord| Settle::Requeue {
            record: Box::new(record),
            max_attempts: self.max_attempts,
        };
        Ok(match outcome {
            Outcome::Reply(Reply::Episode { record, calls }) => {
                if record.end == EndReason::InfrastructureError {
                    requeue(*record)
                } else {
                    let usd: f64 = calls.iter().filter_map(|c| c.usd).sum();
                    let fuel: u64 = record.hooks.iter().map(|h| h.fuel).sum();
                    Settle::Done { record, usd, fuel }
                }
            }
            Outcome::Reply(Reply::Error { message, .. }) => requeue(lost_episode(
                &job,
                &claim.task_id,
                claim.trial,
                EndReason::InfrastructureError,
                message,
                0,
            )),
            Outcome::Reply(other) => return Err(EpisodeError::UnexpectedReply(Box::new(other))),
            Outcome::Died(_) if cancel.load(Ordering::SeqCst) => Settle::Stopped,
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
                .await?;
                let mut record = lost_episode(
                    &job,
                    &claim.task_id,
                    claim.trial,
                    end,
                    detail,
                    death.elapsed.as_millis() as u64,
                );
                if end == EndReason::InfrastructureError {
                    requeue(record)
                } else {
                    let domain = self.domains.get(&job.spec.settings.domain).await?;
                    ecdysis_runner::eval::score(&*domain, &mut record)?;
                    Settle::Done {
                        record: Box::new(record),
                        usd: 0.0,
                        fuel: 0,
                    }
                }
            }
        })
    }
}
