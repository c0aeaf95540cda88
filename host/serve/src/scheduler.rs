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
use ecdysis_runner::agent::EpisodeRecord;

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
    /// The evaluation's [`ecdysis_runner::isolate::EpisodeJob`], as JSON.
    pub job: String,
    /// Dollars this episode may spend on model calls: the tenant's
    /// `usd_per_day` left at claim time, shared among the episodes it may
    /// run at once (each call is checked against it before it is sent).
    pub spend_allowance: f64,
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
    let written = settle_all(&mut w, completions).await?;
    // Fuel and spend of the turn, per tenant: one upsert each.
    let mut used: Vec<(i64, i64, f64)> = Vec::new();
    for (c, ok) in completions.iter().zip(&written) {
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
    let claims = if max_claims > 0 {
        claim_in(&mut w, db.backend(), worker, lease, defaults, max_claims).await?
    } else {
        Vec::new()
    };
    w.commit().await?;
    Ok((written, claims))
}

/// Write a turn's completions; whether each claim was current. Finishes
/// are written per evaluation with two statements however many there are
/// ([`finish_group`]); requeues (rare: a worker that could not serve its
/// episode) one by one. Evaluations whose last episode is among them are
/// closed.
async fn settle_all(w: &mut WriteTx, completions: &[Completion]) -> Result<Vec<bool>, DbError> {
    let mut written = vec![false; completions.len()];
    let mut groups: Vec<EvaluationFinishes> = Vec::new();
    for (i, c) in completions.iter().enumerate() {
        let claim = &c.claim;
        let finish = |state, record: Option<&EpisodeRecord>, usd, fuel| Finish {
            episode: claim.episode,
            attempt: claim.attempt,
            state,
            record: record.map(|r| serde_json::to_string(r).expect("record serializes")),
            reward: record.map(|r| r.reward),
            success: record.map(|r| i64::from(r.success)),
            end: record.map(|r| r.end.as_str()),
            fuel: fuel as i64,
            usd,
        };
        let f = match &c.settle {
            Settle::Done { record, usd, fuel } => finish(state::DONE, Some(record), *usd, *fuel),
            Settle::Stopped => finish(state::CANCELLED, None, 0.0, 0),
            Settle::Requeue {
                record,
                max_attempts,
            } => {
                if claim.attempt < i64::from(*max_attempts) {
                    written[i] = requeue_in(w, claim).await?;
                    continue;
                }
                finish(state::LOST, Some(record), 0.0, 0)
            }
        };
        match groups.iter_mut().find(|g| g.eval_id == claim.eval_id) {
            Some(g) => g.finishes.push((i, f)),
            None => groups.push(EvaluationFinishes {
                eval_id: &claim.eval_id,
                tenant: &claim.tenant,
                finishes: vec![(i, f)],
            }),
        }
    }
    for EvaluationFinishes {
        eval_id,
        tenant,
        finishes,
    } in groups
    {
        let (places, rows): (Vec<usize>, Vec<Finish>) = finishes.into_iter().unzip();
        let mut all_done = false;
        // Ten parameters a row: chunks stay far below both databases'
        // parameter limits whatever a worker's slot count.
        for (places, rows) in places.chunks(FINISH_CHUNK).zip(rows.chunks(FINISH_CHUNK)) {
            let (ok, done) = finish_group(w, eval_id, rows).await?;
            for (&i, ok) in places.iter().zip(ok) {
                written[i] = ok;
            }
            all_done = done;
        }
        if all_done {
            finish_evaluation_if_done(w, eval_id, tenant).await?;
        }
    }
    Ok(written)
}

/// Most rows one [`finish_group`] statement writes.
const FINISH_CHUNK: usize = 256;

/// A turn's finishes of one evaluation, with their places in the turn.
struct EvaluationFinishes<'a> {
    eval_id: &'a str,
    tenant: &'a str,
    finishes: Vec<(usize, Finish)>,
}

/// One claimed episode's end, as [`finish_group`] writes it.
struct Finish {
    episode: i64,
    attempt: i64,
    state: &'static str,
    record: Option<String>,
    reward: Option<f64>,
    success: Option<i64>,
    end: Option<&'static str>,
    fuel: i64,
    usd: f64,
}

/// Finish claimed episodes of one evaluation in the caller's transaction:
/// which claims were current, and whether every episode of the evaluation
/// has now finished (its `done_count` reached its `total`; the caller
/// closes it).
///
/// Two statements for the group, not two per episode (each statement is a
/// round trip and most of a short episode's database work): the
/// evaluation's completion counter takes the group's numbers at once, then
/// one multi-row update finishes every episode whose claim is current. The
/// counter is per evaluation, so a tenant's event stream says nothing about
/// other tenants' work; bumping it locks the evaluation's row, so two
/// workers finishing episodes of one evaluation never share a number. If a
/// claim was stale (rare: its lease had expired), the numbers of the
/// others are closed up and the unused ones given back — the row is still
/// locked by this transaction, so no later number was handed out — which
/// keeps event ids 1, 2, 3, … without gaps.
async fn finish_group(
    w: &mut WriteTx,
    eval_id: &str,
    rows: &[Finish],
) -> Result<(Vec<bool>, bool), DbError> {
    let k = rows.len() as i64;
    let (count, total): (i64, i64) = sqlx::query_as(
        "UPDATE evaluations SET done_count = done_count + $2 WHERE id = $1 RETURNING done_count, total",
    )
    .bind(eval_id)
    .bind(k)
    .fetch_one(w.conn())
    .await
    .ctx("completion counter")?;
    let first = count - k + 1;
    const COLUMNS: usize = 10;
    let values: Vec<String> = (0..rows.len())
        .map(|r| {
            let p: Vec<String> = (1..=COLUMNS)
                .map(|c| format!("${}", r * COLUMNS + c + 1))
                .collect();
            format!("({})", p.join(", "))
        })
        .collect();
    // A CTE with named columns, not `(VALUES …) AS v(…)`: SQLite takes
    // only the former. `RETURNING` names only the updated table's columns,
    // as SQLite requires of `UPDATE … FROM`.
    let sql = format!(
        "WITH v (eid, att, st, rec, rw, sc, er, fu, us, sq) AS (VALUES {})
         UPDATE episodes SET state = v.st, record = v.rec, reward = v.rw, success = v.sc,
             end_reason = v.er, fuel = v.fu, usd = v.us, finished_ms = $1, done_seq = v.sq,
             lease_ms = NULL
         FROM v WHERE episodes.id = v.eid AND episodes.attempt = v.att AND episodes.state = 'running'
         RETURNING id, attempt",
        values.join(", ")
    );
    let mut q = sqlx::query_as::<_, (i64, i64)>(&sql).bind(now_ms());
    for (n, f) in rows.iter().enumerate() {
        q = q
            .bind(f.episode)
            .bind(f.attempt)
            .bind(f.state)
            .bind(f.record.as_deref())
            .bind(f.reward)
            .bind(f.success)
            .bind(f.end)
            .bind(f.fuel)
            .bind(f.usd)
            .bind(first + n as i64);
    }
    let updated = q.fetch_all(w.conn()).await.ctx("finish episodes")?;
    let ok: Vec<bool> = rows
        .iter()
        .map(|f| updated.contains(&(f.episode, f.attempt)))
        .collect();
    let stale = ok.iter().filter(|o| !**o).count() as i64;
    if stale == 0 {
        return Ok((ok, count >= total));
    }
    // Close up the numbers: the n-th current one takes `first + n`.
    let mut next = first;
    for (n, f) in rows.iter().enumerate() {
        if !ok[n] {
            continue;
        }
        if first + n as i64 != next {
            sqlx::query("UPDATE episodes SET done_seq = $1 WHERE id = $2 AND attempt = $3")
                .bind(next)
                .bind(f.episode)
                .bind(f.attempt)
                .execute(w.conn())
                .await
                .ctx("completion counter")?;
        }
        next += 1;
    }
    sqlx::query("UPDATE evaluations SET done_count = done_count - $2 WHERE id = $1")
        .bind(eval_id)
        .bind(stale)
        .execute(w.conn())
        .await
        .ctx("completion counter")?;
    Ok((ok, count - stale >= total))
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
            spend_allowance: (t.quotas.usd_per_day - t.usd_today).max(0.0)
                / t.quotas.concurrent_episodes.max(1) as f64,
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

/// Write one claimed episode's end in its own transaction (a worker loop
/// writes a turn's at once with [`settle_and_claim`]). `false`: the claim
/// was no longer current, nothing was written (someone else owns the
/// episode).
pub async fn settle(db: &Db, completion: Completion) -> Result<bool, DbError> {
    let (written, _) =
        settle_and_claim(db, &[completion], "", Duration::ZERO, &Quotas::default(), 0).await?;
    Ok(written[0])
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

/// Cancel every running evaluation of `tenant_id` in the caller's
/// transaction, as [`cancel`] does one (queued episodes cancelled, running
/// ones stopped at their next heartbeat, event streams ended): what a
/// revoked tenant leaves running. Returns how many evaluations.
pub async fn cancel_all_in(
    w: &mut WriteTx,
    tenant_id: i64,
    tenant: &str,
    why: &str,
) -> Result<u64, DbError> {
    let running: Vec<String> =
        sqlx::query_scalar("SELECT id FROM evaluations WHERE tenant_id = $1 AND state = 'running'")
            .bind(tenant_id)
            .fetch_all(w.conn())
            .await
            .ctx("running evaluations")?;
    let now = now_ms();
    for eval_id in &running {
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
            w,
            kind::EVALUATION_CANCELLED,
            Some(tenant),
            serde_json::json!({"evaluation": eval_id, "queued_cancelled": dropped, "by": why}),
        )
        .await?;
    }
    Ok(running.len() as u64)
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
        // A given-up episode is a completion like any other: it takes the
        // evaluation's next event number, and may be its last.
        let (current, all_done) = if give_up {
            let lost = Finish {
                episode: id,
                attempt,
                state: state::LOST,
                record: None,
                reward: None,
                success: None,
                end: None,
                fuel: 0,
                usd: 0.0,
            };
            let (ok, all_done) = finish_group(&mut w, &eval_id, &[lost]).await?;
            (ok[0], all_done)
        } else {
            let n = sqlx::query(
                "UPDATE episodes SET state = 'queued', worker = NULL, lease_ms = NULL
                 WHERE id = $1 AND attempt = $2 AND state = 'running'",
            )
            .bind(id)
            .bind(attempt)
            .execute(w.conn())
            .await
            .ctx("reclaim episode")?
            .rows_affected();
            (n > 0, false)
        };
        if !current {
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
        if all_done {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A database with one running evaluation of `n` episodes, each
    /// claimed (running, attempt 1); the claims.
    async fn running_evaluation(dir: &std::path::Path, n: i64) -> (Db, Vec<Claim>) {
        let db = Db::open(&format!("sqlite:{}", dir.join("q.db").display()))
            .await
            .unwrap();
        let mut w = db.write().await.unwrap();
        sqlx::query(
            "INSERT INTO tenants (id, name, token_hash, quotas, created_ms) VALUES (7, 't', 'h', '{}', 0)",
        )
        .execute(w.conn())
        .await
        .unwrap();
        sqlx::query(
            "INSERT INTO evaluations (id, tenant_id, request, job, config, state, total, created_ms)
             VALUES ('e1', 7, '{}', '{}', '{}', 'running', $1, 0)",
        )
        .bind(n)
        .execute(w.conn())
        .await
        .unwrap();
        let mut claims = Vec::new();
        for i in 0..n {
            let id: i64 = sqlx::query_scalar(
                "INSERT INTO episodes (eval_id, tenant_id, idx, task_id, trial, state, attempt, worker, lease_ms)
                 VALUES ('e1', 7, $1, $2, 0, 'running', 1, 'w', 0) RETURNING id",
            )
            .bind(i)
            .bind(i.to_string())
            .fetch_one(w.conn())
            .await
            .unwrap();
            claims.push(Claim {
                episode: id,
                attempt: 1,
                eval_id: "e1".into(),
                tenant_id: 7,
                tenant: "t".into(),
                task_id: i.to_string(),
                trial: 0,
                job: "{}".into(),
                spend_allowance: 1.0,
            });
        }
        w.commit().await.unwrap();
        (db, claims)
    }

    fn done(claim: &Claim, reward: f64) -> Completion {
        Completion {
            claim: claim.clone(),
            settle: Settle::Done {
                record: Box::new(EpisodeRecord::bare(&claim.task_id, 0, reward)),
                usd: 0.0,
                fuel: 3,
            },
        }
    }

    /// Write a worker's turn of results (claiming nothing); which were
    /// current.
    async fn write_turn(db: &Db, turn: &[Completion]) -> Vec<bool> {
        let (written, claimed) = settle_and_claim(
            db,
            turn,
            "w",
            Duration::from_secs(30),
            &Quotas::default(),
            0,
        )
        .await
        .unwrap();
        assert!(claimed.is_empty());
        written
    }

    async fn seqs(db: &Db) -> Vec<(String, String, Option<i64>)> {
        sqlx::query_as("SELECT task_id, state, done_seq FROM episodes ORDER BY idx")
            .fetch_all(db.pool())
            .await
            .unwrap()
    }

    async fn evaluation(db: &Db) -> (String, i64) {
        sqlx::query_as("SELECT state, done_count FROM evaluations WHERE id = 'e1'")
            .fetch_one(db.pool())
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_turns_finishes_take_consecutive_event_numbers_around_a_stale_claim() {
        let dir = tempfile::tempdir().unwrap();
        let (db, claims) = running_evaluation(dir.path(), 5).await;
        // Episode 1's lease expired and another worker holds attempt 2: this
        // worker's result for it must be refused, and its number not used.
        let mut stale = claims[1].clone();
        sqlx::query("UPDATE episodes SET attempt = 2 WHERE id = $1")
            .bind(stale.episode)
            .execute(db.pool())
            .await
            .unwrap();
        stale.attempt = 1;
        let turn = [
            done(&claims[0], 1.0),
            done(&stale, 1.0),
            Completion {
                claim: claims[2].clone(),
                settle: Settle::Stopped,
            },
            done(&claims[3], 0.0),
        ];
        let written = write_turn(&db, &turn).await;
        assert_eq!(written, [true, false, true, true]);
        let rows = seqs(&db).await;
        let r = |t: &str, s: &str, q: Option<i64>| (t.to_string(), s.to_string(), q);
        assert_eq!(
            rows,
            [
                r("0", "done", Some(1)),
                r("1", "running", None),
                r("2", "cancelled", Some(2)),
                r("3", "done", Some(3)),
                r("4", "running", None),
            ]
        );
        assert_eq!(evaluation(&db).await, ("running".into(), 3));
        let reward: f64 = sqlx::query_scalar("SELECT reward FROM episodes WHERE task_id = '0'")
            .fetch_one(db.pool())
            .await
            .unwrap();
        assert_eq!(reward, 1.0);
        let fuel: i64 = sqlx::query_scalar("SELECT SUM(fuel) FROM daily_use WHERE tenant_id = 7")
            .fetch_one(db.pool())
            .await
            .unwrap();
        assert_eq!(fuel, 6, "fuel of the two written results only");

        // The current holder of episode 1 and the last episode finish: the
        // evaluation closes with numbers 4 and 5.
        stale.attempt = 2;
        let last = [done(&stale, 0.5), done(&claims[4], 0.0)];
        let written = write_turn(&db, &last).await;
        assert_eq!(written, [true, true]);
        let numbers: Vec<Option<i64>> = seqs(&db).await.into_iter().map(|r| r.2).collect();
        assert_eq!(numbers, [Some(1), Some(4), Some(2), Some(3), Some(5)]);
        assert_eq!(evaluation(&db).await, ("done".into(), 5));
    }

    #[tokio::test]
    async fn a_turn_larger_than_one_statement_numbers_its_results_in_order() {
        let n = 2 * FINISH_CHUNK as i64 + 3;
        let dir = tempfile::tempdir().unwrap();
        let (db, claims) = running_evaluation(dir.path(), n).await;
        let turn: Vec<Completion> = claims.iter().map(|c| done(c, 1.0)).collect();
        let written = write_turn(&db, &turn).await;
        assert!(written.iter().all(|w| *w));
        let numbers: Vec<Option<i64>> = seqs(&db).await.into_iter().map(|r| r.2).collect();
        assert_eq!(numbers, (1..=n).map(Some).collect::<Vec<_>>());
        assert_eq!(evaluation(&db).await, ("done".into(), n));
    }

    #[tokio::test]
    async fn an_episode_given_up_at_lease_expiry_takes_a_number_and_can_close_the_evaluation() {
        let dir = tempfile::tempdir().unwrap();
        let (db, claims) = running_evaluation(dir.path(), 2).await;
        assert!(settle(&db, done(&claims[0], 1.0)).await.unwrap());
        assert_eq!(evaluation(&db).await, ("running".into(), 1));
        // Episode 1's lease (0 ms) has expired and its one attempt is used.
        assert_eq!(reclaim_expired(&db, 1).await.unwrap(), 1);
        let rows = seqs(&db).await;
        assert_eq!(rows[1], ("1".into(), "lost".into(), Some(2)));
        assert_eq!(evaluation(&db).await, ("done".into(), 2));
    }
}
