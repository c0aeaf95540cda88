//! The episode queue in the database: fair claims across tenants, leases,
//! exactly-once completion, cancellation.
//!
//! Fairness: a free worker takes its next episode from the tenant with the
//! fewest episodes running, ties going to the tenant served least recently;
//! within a tenant, evaluations go first come, first served. So a tenant's
//! 10,000-episode job takes at most its share of the workers, and another
//! tenant's small job gets a worker as soon as one frees up. A tenant at
//! its `concurrent_episodes` quota, or past its daily fuel or spend, is
//! skipped.
//!
//! Exactly once: an episode row is keyed by (evaluation, task, trial); a
//! claim bumps its `attempt` and leases it to one worker; only the holder
//! of the current attempt can finish it (`WHERE attempt = $a AND state =
//! 'running'`). A worker that dies stops renewing its lease; once it
//! expires the episode goes back to the queue with a new attempt, and
//! whatever the old holder might still send is refused. An evaluation is
//! finished by the transaction that finishes its last episode, so its
//! `evaluation_finished` audit record is written once.

use std::time::Duration;

use serde::Serialize;
use sqlx::Row;

use super::audit::{self, kind};
use super::db::{Backend, Db, DbError, SqlContext, WriteTx, day_start, now_ms};
use super::evaluations::{add_use, state};
use super::quota::Quotas;
use crate::agent::EpisodeRecord;

/// A claimed episode.
#[derive(Debug, Clone, Serialize)]
pub struct Claim {
    /// The episode row.
    pub episode: i64,
    /// The attempt this claim holds (fences completions).
    pub attempt: i64,
    /// The evaluation.
    pub eval_id: String,
    /// The tenant's id.
    pub tenant_id: i64,
    /// The tenant's name (audit records).
    pub tenant: String,
    /// The task.
    pub task_id: String,
    /// The trial.
    pub trial: u32,
    /// The evaluation's [`crate::isolate::EpisodeJob`], as JSON.
    pub job: String,
}

/// Claim the next episode for `worker`, fairly (see the module docs).
pub async fn claim(
    db: &Db,
    worker: &str,
    lease: Duration,
    defaults: &Quotas,
) -> Result<Option<Claim>, DbError> {
    let (_, claims) = settle_and_claim(db, &[], worker, lease, defaults, 1).await?;
    Ok(claims.into_iter().next())
}

/// How a claimed episode ended, for [`settle_and_claim`].
#[derive(Debug, Clone)]
pub enum Settle {
    /// Scored: recorded as done, its fuel and spend counted.
    Done {
        /// The scored record.
        record: Box<EpisodeRecord>,
        /// Model spend.
        usd: f64,
        /// Fuel.
        fuel: u64,
    },
    /// Its worker could not serve it: back to the queue, or given up after
    /// `max_attempts`.
    Requeue {
        /// The infrastructure-error record (kept if given up).
        record: Box<EpisodeRecord>,
        /// Attempts before it is given up.
        max_attempts: u32,
    },
    /// Its evaluation was cancelled while it ran.
    Stopped,
}

/// A finished claim waiting to be written.
#[derive(Debug, Clone)]
pub struct Completion {
    /// The claim.
    pub claim: Claim,
    /// How it ended.
    pub settle: Settle,
}

/// One write transaction for a worker's turn: record `completions` (a
/// group commit: each is fenced by its claim's attempt exactly as alone;
/// `false` where the claim was no longer current), then claim up to
/// `max_claims` episodes, in the fair order one claim at a time would take
/// them (see the module docs). One transaction instead of one per
/// completion and one per claim: on SQLite every transaction takes the
/// single writer's lock.
pub async fn settle_and_claim(
    db: &Db,
    completions: &[Completion],
    worker: &str,
    lease: Duration,
    defaults: &Quotas,
    max_claims: usize,
) -> Result<(Vec<bool>, Vec<Claim>), DbError> {
    let mut w = db.write().await?;
    if max_claims > 0 && db.backend() == Backend::Postgres {
        // Claims from every worker machine take turns (a claim is a few
        // milliseconds): the running counts the fairness order and the
        // `concurrent_episodes` quota read cannot change under us. SQLite's
        // `BEGIN IMMEDIATE` already serialises writers. Taken before the
        // completions' row locks, so two workers never wait on each other
        // in opposite orders.
        sqlx::query("SELECT pg_advisory_xact_lock(727273)")
            .execute(w.conn())
            .await
            .ctx("claim lock")?;
    }
    let mut written = Vec::with_capacity(completions.len());
    let mut touched: Vec<(String, String)> = Vec::new();
    // Fuel and spend of the turn, per tenant: one upsert each.
    let mut used: Vec<(i64, i64, f64)> = Vec::new();
    for c in completions {
        let (ok, ended) = settle_in(&mut w, c).await?;
        written.push(ok);
        if ok && ended && !touched.iter().any(|(e, _)| *e == c.claim.eval_id) {
            touched.push((c.claim.eval_id.clone(), c.claim.tenant.clone()));
        }
        if let (true, Settle::Done { usd, fuel, .. }) = (ok, &c.settle)
            && (*fuel > 0 || *usd > 0.0)
        {
            match used.iter_mut().find(|u| u.0 == c.claim.tenant_id) {
                Some(u) => {
                    u.1 += *fuel as i64;
                    u.2 += usd;
                }
                None => used.push((c.claim.tenant_id, *fuel as i64, *usd)),
            }
        }
    }
    for (tenant_id, fuel, usd) in used {
        add_use(&mut w, tenant_id, 0, fuel, usd).await?;
    }
    // Once per evaluation: its last episode may be among them.
    for (eval_id, tenant) in &touched {
        finish_evaluation_if_done(&mut w, eval_id, tenant).await?;
    }
    let claims = if max_claims > 0 {
        claim_in(&mut w, db.backend(), worker, lease, defaults, max_claims).await?
    } else {
        Vec::new()
    };
    w.commit().await?;
    Ok((written, claims))
}

/// Write one completion; (whether the claim was current, whether the
/// episode left the queue for good).
async fn settle_in(w: &mut WriteTx, c: &Completion) -> Result<(bool, bool), DbError> {
    let claim = &c.claim;
    match &c.settle {
        Settle::Done { record, usd, fuel } => {
            let ok = finish_in(w, claim, state::DONE, Some(record), *usd, *fuel).await?;
            Ok((ok, true))
        }
        Settle::Stopped => Ok((
            finish_in(w, claim, state::CANCELLED, None, 0.0, 0).await?,
            true,
        )),
        Settle::Requeue {
            record,
            max_attempts,
        } => {
            if claim.attempt >= i64::from(*max_attempts) {
                let ok = finish_in(w, claim, state::LOST, Some(record), 0.0, 0).await?;
                return Ok((ok, true));
            }
            Ok((requeue_in(w, claim).await?, false))
        }
    }
}

/// A queued episode read for a claim.
struct Queued {
    eval_id: String,
    episode: i64,
    task_id: String,
    trial: i64,
}

/// A tenant that may be served in this claim transaction.
struct Candidate {
    tenant_id: i64,
    name: String,
    quotas: Quotas,
    running: i64,
    /// The fairness order's "served least recently" key.
    last: i64,
    /// Today's fuel and spend (claims do not change them).
    fuel_today: i64,
    usd_today: f64,
    /// Its next queued episodes, read on first need; `None`: not read yet.
    queue: Option<std::collections::VecDeque<Queued>>,
    /// Out of this transaction: at a quota or nothing queued.
    out: bool,
}

/// An episode picked for a claim, and its place in the fairness order.
struct Pick {
    tenant: usize,
    queued: Queued,
    stamp: i64,
}

/// Claim up to `n` episodes in the caller's transaction: each goes to the
/// tenant with the fewest episodes running, ties to the one served least
/// recently, then the lowest id — the running counts and claim times
/// updated after every pick, so a batch of `n` picks exactly what `n`
/// claims one after another would.
///
/// Round trips (each one a wait on the database's machine): one read of
/// the candidate tenants with their running counts, claim times and daily
/// use; one read of each served tenant's queue; one update taking every
/// picked episode; one write of the claim times. On Postgres the claim
/// transactions of all workers are serialised by the caller's advisory
/// lock, on SQLite by its single writer, so the picks are taken as read;
/// the update still requires `state = 'queued'`, since a cancel does not
/// wait for that lock: an episode cancelled between the read and the
/// update is skipped, and the batch is one claim short (the next turn
/// claims again).
async fn claim_in(
    w: &mut WriteTx,
    backend: Backend,
    worker: &str,
    lease: Duration,
    defaults: &Quotas,
    n: usize,
) -> Result<Vec<Claim>, DbError> {
    let now = now_ms();
    let rows = sqlx::query(
        "SELECT q.tenant_id, t.name, t.quotas, COALESCE(r.n, 0), COALESCE(c.last_claim_ms, 0),
                COALESCE(d.fuel, 0), COALESCE(d.usd, 0.0)
         FROM (SELECT DISTINCT tenant_id FROM evaluations WHERE state = 'running') q
         JOIN tenants t ON t.id = q.tenant_id
         LEFT JOIN (SELECT tenant_id, COUNT(*) AS n FROM episodes WHERE state = 'running' GROUP BY tenant_id) r
           ON r.tenant_id = q.tenant_id
         LEFT JOIN tenant_claims c ON c.tenant_id = q.tenant_id
         LEFT JOIN daily_use d ON d.tenant_id = q.tenant_id AND d.day_ms = $1",
    )
    .bind(day_start(now))
    .fetch_all(w.conn())
    .await
    .ctx("candidate tenants")?;
    let mut tenants = Vec::with_capacity(rows.len());
    for t in &rows {
        let overrides: String = t.try_get(2).ctx("tenant row")?;
        tenants.push(Candidate {
            tenant_id: t.try_get(0).ctx("tenant row")?,
            name: t.try_get(1).ctx("tenant row")?,
            quotas: defaults.with(&serde_json::from_str(&overrides).unwrap_or_default()),
            running: t.try_get(3).ctx("tenant row")?,
            last: t.try_get(4).ctx("tenant row")?,
            fuel_today: t.try_get(5).ctx("tenant row")?,
            usd_today: t.try_get(6).ctx("tenant row")?,
            queue: None,
            out: false,
        });
    }
    // Claim times of this batch: strictly after every stored one, in the
    // order served, so the next transaction continues the round.
    let mut stamp = tenants
        .iter()
        .map(|t| t.last + 1)
        .max()
        .unwrap_or(now)
        .max(now);
    let mut jobs: Vec<(String, String)> = Vec::new();
    let mut picks: Vec<Pick> = Vec::new();
    while picks.len() < n {
        let Some(i) = (0..tenants.len())
            .filter(|&i| !tenants[i].out)
            .min_by_key(|&i| (tenants[i].running, tenants[i].last, tenants[i].tenant_id))
        else {
            break;
        };
        let t = &mut tenants[i];
        if t.running >= t.quotas.concurrent_episodes as i64 {
            t.out = true;
            continue;
        }
        if t.queue.is_none() {
            if t.fuel_today >= t.quotas.fuel_per_day as i64 || t.usd_today >= t.quotas.usd_per_day {
                t.out = true;
                continue;
            }
            t.queue = Some(next_queued(w, backend, t.tenant_id, n - picks.len(), &mut jobs).await?);
        }
        let Some(queued) = t.queue.as_mut().and_then(|q| q.pop_front()) else {
            t.out = true;
            continue;
        };
        t.running += 1;
        t.last = stamp;
        picks.push(Pick {
            tenant: i,
            queued,
            stamp,
        });
        stamp += 1;
    }
    if picks.is_empty() {
        return Ok(Vec::new());
    }
    // Every pick in one statement; the new attempt is the stored one plus
    // one (only claims change a queued episode's attempt, and they are
    // serialised).
    let list = (0..picks.len())
        .map(|k| format!("${}", k + 3))
        .collect::<Vec<_>>()
        .join(", ");
    let sql = format!(
        "UPDATE episodes SET state = 'running', attempt = attempt + 1, worker = $1, lease_ms = $2
         WHERE state = 'queued' AND id IN ({list}) RETURNING id, attempt"
    );
    let mut update = sqlx::query(&sql)
        .bind(worker)
        .bind(now + lease.as_millis() as i64);
    for p in &picks {
        update = update.bind(p.queued.episode);
    }
    let taken: Vec<(i64, i64)> = update
        .fetch_all(w.conn())
        .await
        .ctx("claim episodes")?
        .iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect::<Result<_, sqlx::Error>>()
        .ctx("claimed episode")?;
    let mut claims = Vec::with_capacity(taken.len());
    // Each served tenant's claim time: that of its last pick taken.
    let mut served: Vec<(i64, i64)> = Vec::new();
    for p in picks {
        let Some(&(_, attempt)) = taken.iter().find(|(id, _)| *id == p.queued.episode) else {
            continue;
        };
        let t = &tenants[p.tenant];
        match served.iter_mut().find(|s| s.0 == t.tenant_id) {
            Some(s) => s.1 = p.stamp,
            None => served.push((t.tenant_id, p.stamp)),
        }
        let job = match jobs.iter().find(|(id, _)| *id == p.queued.eval_id) {
            Some((_, job)) => job.clone(),
            None => {
                let job: String = sqlx::query_scalar("SELECT job FROM evaluations WHERE id = $1")
                    .bind(&p.queued.eval_id)
                    .fetch_one(w.conn())
                    .await
                    .ctx("evaluation job")?;
                jobs.push((p.queued.eval_id.clone(), job.clone()));
                job
            }
        };
        claims.push(Claim {
            episode: p.queued.episode,
            attempt,
            eval_id: p.queued.eval_id,
            tenant_id: t.tenant_id,
            tenant: t.name.clone(),
            task_id: p.queued.task_id,
            trial: p.queued.trial as u32,
            job,
        });
    }
    if !served.is_empty() {
        let values = (0..served.len())
            .map(|k| format!("(${}, ${})", 2 * k + 1, 2 * k + 2))
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!(
            "INSERT INTO tenant_claims (tenant_id, last_claim_ms) VALUES {values}
             ON CONFLICT (tenant_id) DO UPDATE SET last_claim_ms = excluded.last_claim_ms"
        );
        let mut upsert = sqlx::query(&sql);
        for (tenant_id, last) in &served {
            upsert = upsert.bind(*tenant_id).bind(*last);
        }
        upsert.execute(w.conn()).await.ctx("claim time")?;
    }
    Ok(claims)
}

/// Up to `n` of a tenant's queued episodes: its running evaluations oldest
/// first, each in its own order (index range reads, not a sort of a
/// 10,000-episode job). On Postgres one statement that also brings the
/// evaluations' jobs (into `jobs`); on SQLite, where a statement is a
/// function call, not a round trip, one per evaluation.
async fn next_queued(
    w: &mut WriteTx,
    backend: Backend,
    tenant_id: i64,
    n: usize,
    jobs: &mut Vec<(String, String)>,
) -> Result<std::collections::VecDeque<Queued>, DbError> {
    let mut out = std::collections::VecDeque::new();
    let queued = |eval_id: String, e: &sqlx::any::AnyRow| -> Result<Queued, DbError> {
        Ok(Queued {
            eval_id,
            episode: e.try_get("id").ctx("episode row")?,
            task_id: e.try_get("task_id").ctx("episode row")?,
            trial: e.try_get("trial").ctx("episode row")?,
        })
    };
    if backend == Backend::Postgres {
        let rows = sqlx::query(
            "SELECT v.id AS eval_id, CASE WHEN e.first THEN v.job END AS job, e.id, e.task_id, e.trial
             FROM (SELECT id, job, created_ms FROM evaluations
                   WHERE tenant_id = $1 AND state = 'running') v
             CROSS JOIN LATERAL (
                 SELECT id, task_id, trial, idx, idx = MIN(idx) OVER () AS first FROM (
                     SELECT id, task_id, trial, idx FROM episodes
                     WHERE eval_id = v.id AND state = 'queued' ORDER BY idx LIMIT $2) l) e
             ORDER BY v.created_ms, v.id, e.idx
             LIMIT $2",
        )
        .bind(tenant_id)
        .bind(n as i64)
        .fetch_all(w.conn())
        .await
        .ctx("next episodes")?;
        for e in &rows {
            let eval_id: String = e.try_get("eval_id").ctx("episode row")?;
            let job: Option<String> = e.try_get("job").ctx("episode row")?;
            if let Some(job) = job
                && !jobs.iter().any(|(id, _)| *id == eval_id)
            {
                jobs.push((eval_id.clone(), job));
            }
            out.push_back(queued(eval_id, e)?);
        }
        return Ok(out);
    }
    let evaluations: Vec<String> = sqlx::query_scalar(
        "SELECT id FROM evaluations WHERE tenant_id = $1 AND state = 'running' ORDER BY created_ms, id",
    )
    .bind(tenant_id)
    .fetch_all(w.conn())
    .await
    .ctx("running evaluations")?;
    for eval_id in evaluations {
        if out.len() >= n {
            break;
        }
        let rows = sqlx::query(
            "SELECT id, task_id, trial FROM episodes
             WHERE eval_id = $1 AND state = 'queued' ORDER BY idx LIMIT $2",
        )
        .bind(&eval_id)
        .bind((n - out.len()) as i64)
        .fetch_all(w.conn())
        .await
        .ctx("next episode")?;
        for e in &rows {
            out.push_back(queued(eval_id.clone(), e)?);
        }
    }
    Ok(out)
}

/// What a heartbeat learned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Beat {
    /// Still ours; carry on.
    Held,
    /// The evaluation was cancelled: stop.
    Cancelled,
    /// The claim is no longer ours (expired and re-claimed): stop; nothing
    /// we send would count.
    Lost,
}

/// Renew a claim's lease and learn whether to go on.
pub async fn heartbeat(db: &Db, c: &Claim, lease: Duration) -> Result<Beat, DbError> {
    let mut w = db.write().await?;
    let n = sqlx::query(
        "UPDATE episodes SET lease_ms = $1 WHERE id = $2 AND attempt = $3 AND state = 'running'",
    )
    .bind(now_ms() + lease.as_millis() as i64)
    .bind(c.episode)
    .bind(c.attempt)
    .execute(w.conn())
    .await
    .ctx("heartbeat")?
    .rows_affected();
    let eval_state: Option<String> =
        sqlx::query_scalar("SELECT state FROM evaluations WHERE id = $1")
            .bind(&c.eval_id)
            .fetch_optional(w.conn())
            .await
            .ctx("heartbeat")?;
    w.commit().await?;
    Ok(if eval_state.as_deref() == Some(state::CANCELLED) {
        Beat::Cancelled
    } else if n == 0 {
        Beat::Lost
    } else {
        Beat::Held
    })
}

/// Finish a claimed episode with its scored record. `false`: the claim was
/// no longer current, nothing was written (someone else owns the episode).
pub async fn complete(
    db: &Db,
    c: &Claim,
    record: &EpisodeRecord,
    usd: f64,
    fuel: u64,
) -> Result<bool, DbError> {
    finish(db, c, state::DONE, Some(record), usd, fuel).await
}

/// Give up an episode after repeated infrastructure failures: not scored,
/// listed as unfinished.
pub async fn give_up(db: &Db, c: &Claim, record: &EpisodeRecord) -> Result<bool, DbError> {
    finish(db, c, state::LOST, Some(record), 0.0, 0).await
}

/// A cancelled evaluation's in-flight episode, stopped.
pub async fn stopped(db: &Db, c: &Claim) -> Result<bool, DbError> {
    finish(db, c, state::CANCELLED, None, 0.0, 0).await
}

async fn finish(
    db: &Db,
    c: &Claim,
    new_state: &str,
    record: Option<&EpisodeRecord>,
    usd: f64,
    fuel: u64,
) -> Result<bool, DbError> {
    let mut w = db.write().await?;
    if !finish_in(&mut w, c, new_state, record, usd, fuel).await? {
        return Ok(false);
    }
    if fuel > 0 || usd > 0.0 {
        add_use(&mut w, c.tenant_id, 0, fuel as i64, usd).await?;
    }
    finish_evaluation_if_done(&mut w, &c.eval_id, &c.tenant).await?;
    w.commit().await?;
    Ok(true)
}

/// Finish a claimed episode in the caller's transaction (the evaluation's
/// end and the tenant's daily use are the caller's to update); `false`:
/// the claim was not current.
async fn finish_in(
    w: &mut WriteTx,
    c: &Claim,
    new_state: &str,
    record: Option<&EpisodeRecord>,
    usd: f64,
    fuel: u64,
) -> Result<bool, DbError> {
    // The evaluation's own completion counter (event ids): per evaluation,
    // so a tenant's event stream says nothing about other tenants' work;
    // bumping it locks the evaluation's row, so two workers finishing
    // episodes of one evaluation never share a number.
    let seq: i64 = sqlx::query_scalar(
        "UPDATE evaluations SET done_count = done_count + 1 WHERE id = $1 RETURNING done_count",
    )
    .bind(&c.eval_id)
    .fetch_one(w.conn())
    .await
    .ctx("completion counter")?;
    let n = sqlx::query(
        "UPDATE episodes SET state = $1, record = $2, reward = $3, success = $4, end_reason = $5,
             fuel = $6, usd = $7, finished_ms = $8, done_seq = $9, lease_ms = NULL
         WHERE id = $10 AND attempt = $11 AND state = 'running'",
    )
    .bind(new_state)
    .bind(record.map(|r| serde_json::to_string(r).expect("record serializes")))
    .bind(record.map(|r| r.reward))
    .bind(record.map(|r| i64::from(r.success)))
    .bind(record.map(|r| r.end.as_str().to_string()))
    .bind(fuel as i64)
    .bind(usd)
    .bind(now_ms())
    .bind(seq)
    .bind(c.episode)
    .bind(c.attempt)
    .execute(w.conn())
    .await
    .ctx("finish episode")?
    .rows_affected();
    if n == 0 {
        // Not ours any more: give the number back (the row stays locked by
        // this transaction, so no later number was handed out), keeping
        // event ids 1, 2, 3, … without gaps in a group commit too.
        sqlx::query("UPDATE evaluations SET done_count = done_count - 1 WHERE id = $1")
            .bind(&c.eval_id)
            .execute(w.conn())
            .await
            .ctx("completion counter")?;
        return Ok(false);
    }
    Ok(true)
}

/// Put a claimed episode back in the queue (its worker could not serve
/// it), unless it has had `max_attempts`: then give it up.
pub async fn requeue(
    db: &Db,
    c: &Claim,
    record: &EpisodeRecord,
    max_attempts: u32,
) -> Result<bool, DbError> {
    if c.attempt >= i64::from(max_attempts) {
        return give_up(db, c, record).await;
    }
    let mut w = db.write().await?;
    let requeued = requeue_in(&mut w, c).await?;
    w.commit().await?;
    Ok(requeued)
}

/// Put a running episode back in the queue inside `w`; false when its
/// claim is stale (another attempt owns it, or it is no longer running).
async fn requeue_in(w: &mut WriteTx, c: &Claim) -> Result<bool, DbError> {
    let n = sqlx::query(
        "UPDATE episodes SET state = 'queued', worker = NULL, lease_ms = NULL
         WHERE id = $1 AND attempt = $2 AND state = 'running'",
    )
    .bind(c.episode)
    .bind(c.attempt)
    .execute(w.conn())
    .await
    .ctx("requeue episode")?
    .rows_affected();
    Ok(n > 0)
}

/// Mark an evaluation done if none of its episodes is queued or running
/// (in the caller's transaction; once).
pub async fn finish_evaluation_if_done(
    w: &mut WriteTx,
    eval_id: &str,
    tenant: &str,
) -> Result<(), DbError> {
    // Whether one is open (stops at the first: no count over the job).
    let open: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM (SELECT 1 FROM episodes WHERE eval_id = $1 AND state IN ('queued', 'running') LIMIT 1) o",
    )
    .bind(eval_id)
    .fetch_one(w.conn())
    .await
    .ctx("open episodes")?;
    if open > 0 {
        return Ok(());
    }
    let n = sqlx::query(
        "UPDATE evaluations SET state = 'done', finished_ms = $1 WHERE id = $2 AND state = 'running'",
    )
    .bind(now_ms())
    .bind(eval_id)
    .execute(w.conn())
    .await
    .ctx("finish evaluation")?
    .rows_affected();
    if n == 1 {
        let counts = sqlx::query(
            "SELECT COUNT(*), CAST(COALESCE(SUM(success), 0) AS BIGINT), COALESCE(SUM(usd), 0.0) FROM episodes
             WHERE eval_id = $1 AND state = 'done'",
        )
        .bind(eval_id)
        .fetch_one(w.conn())
        .await
        .ctx("evaluation totals")?;
        let episodes: i64 = counts.try_get(0).ctx("evaluation totals")?;
        let solved: i64 = counts.try_get(1).ctx("evaluation totals")?;
        let usd: f64 = counts.try_get(2).ctx("evaluation totals")?;
        audit::append(
            w,
            kind::EVALUATION_FINISHED,
            Some(tenant),
            serde_json::json!({"evaluation": eval_id, "episodes": episodes, "solved": solved, "usd": usd}),
        )
        .await?;
    }
    Ok(())
}

/// Cancel `tenant`'s running evaluation: queued episodes are cancelled now,
/// in-flight ones are stopped by their workers at the next heartbeat,
/// finished ones are kept. `None`: no such evaluation of the tenant's;
/// `Some(false)`: it had already ended.
pub async fn cancel(
    db: &Db,
    tenant_id: i64,
    tenant: &str,
    eval_id: &str,
) -> Result<Option<bool>, DbError> {
    let mut w = db.write().await?;
    let found: Option<String> =
        sqlx::query_scalar("SELECT state FROM evaluations WHERE id = $1 AND tenant_id = $2")
            .bind(eval_id)
            .bind(tenant_id)
            .fetch_optional(w.conn())
            .await
            .ctx("look up evaluation")?;
    match found.as_deref() {
        None => return Ok(None),
        Some(state::RUNNING) => {}
        Some(_) => return Ok(Some(false)),
    }
    let now = now_ms();
    sqlx::query("UPDATE evaluations SET state = 'cancelled', finished_ms = $1 WHERE id = $2")
        .bind(now)
        .bind(eval_id)
        .execute(w.conn())
        .await
        .ctx("cancel evaluation")?;
    let dropped = sqlx::query(
        "UPDATE episodes SET state = 'cancelled', finished_ms = $1 WHERE eval_id = $2 AND state = 'queued'",
    )
    .bind(now)
    .bind(eval_id)
    .execute(w.conn())
    .await
    .ctx("cancel episodes")?
    .rows_affected();
    audit::append(
        &mut w,
        kind::EVALUATION_CANCELLED,
        Some(tenant),
        serde_json::json!({"evaluation": eval_id, "queued_cancelled": dropped}),
    )
    .await?;
    w.commit().await?;
    Ok(Some(true))
}

/// Put episodes whose lease expired (their worker died or lost the
/// database) back in the queue, or give them up after `max_attempts`;
/// audit which worker lost them. Returns how many.
pub async fn reclaim_expired(db: &Db, max_attempts: u32) -> Result<u64, DbError> {
    let now = now_ms();
    let mut w = db.write().await?;
    let rows = sqlx::query(
        "SELECT e.id, e.worker, e.eval_id, e.attempt, t.name, e.task_id, e.trial FROM episodes e
         JOIN tenants t ON t.id = e.tenant_id
         WHERE e.state = 'running' AND e.lease_ms < $1",
    )
    .bind(now)
    .fetch_all(w.conn())
    .await
    .ctx("expired leases")?;
    if rows.is_empty() {
        return Ok(0);
    }
    let mut count = 0;
    for r in &rows {
        let id: i64 = r.try_get(0).ctx("episode row")?;
        let worker: Option<String> = r.try_get(1).ctx("episode row")?;
        let eval_id: String = r.try_get(2).ctx("episode row")?;
        let attempt: i64 = r.try_get(3).ctx("episode row")?;
        let tenant: String = r.try_get(4).ctx("episode row")?;
        let task: String = r.try_get(5).ctx("episode row")?;
        let trial: i64 = r.try_get(6).ctx("episode row")?;
        let give_up = attempt >= i64::from(max_attempts);
        let n = sqlx::query(
            "UPDATE episodes SET state = $1, worker = NULL, lease_ms = NULL, finished_ms = $2
             WHERE id = $3 AND attempt = $4 AND state = 'running'",
        )
        .bind(if give_up { state::LOST } else { state::QUEUED })
        .bind(give_up.then_some(now))
        .bind(id)
        .bind(attempt)
        .execute(w.conn())
        .await
        .ctx("reclaim episode")?
        .rows_affected();
        if n == 0 {
            continue;
        }
        count += 1;
        audit::append(
            &mut w,
            kind::LEASE_EXPIRED,
            Some(&tenant),
            serde_json::json!({"evaluation": eval_id, "task": task, "trial": trial, "worker": worker, "attempt": attempt, "given_up": give_up}),
        )
        .await?;
        if give_up {
            finish_evaluation_if_done(&mut w, &eval_id, &tenant).await?;
        }
    }
    w.commit().await?;
    Ok(count)
}

/// Completed episodes of an evaluation after `after` (completion order),
/// for the event stream: (sequence, task, trial, state, reward, success,
/// end).
pub async fn completions(
    db: &Db,
    eval_id: &str,
    after: i64,
) -> Result<Vec<serde_json::Value>, DbError> {
    let rows = sqlx::query(
        "SELECT done_seq, task_id, trial, state, reward, success, end_reason FROM episodes
         WHERE eval_id = $1 AND done_seq > $2 ORDER BY done_seq LIMIT 500",
    )
    .bind(eval_id)
    .bind(after)
    .fetch_all(db.pool())
    .await
    .ctx("completions")?;
    rows.iter()
        .map(|r| {
            Ok(serde_json::json!({
                "seq": r.try_get::<i64, _>(0).ctx("episode row")?,
                "task_id": r.try_get::<String, _>(1).ctx("episode row")?,
                "trial": r.try_get::<i64, _>(2).ctx("episode row")?,
                "state": r.try_get::<String, _>(3).ctx("episode row")?,
                "reward": r.try_get::<Option<f64>, _>(4).ctx("episode row")?,
                "success": r.try_get::<Option<i64>, _>(5).ctx("episode row")?.map(|s| s != 0),
                "end": r.try_get::<Option<String>, _>(6).ctx("episode row")?,
            }))
        })
        .collect()
}
