//! Evaluations: what a tenant asks for (model aliases, never URLs; limits
//! within the operator's caps), admission against the daily quotas, the
//! episode rows, status, results and the result directory.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sqlx::Row;

use super::Service;
use super::audit::{self, kind};
use super::config::ModelAlias;
use super::confined::{Confined, ConfinedError};
use super::db::{Db, DbError, SqlContext, WriteTx, day_start, now_ms, random_hex, rfc3339};
use super::harnesses;
use super::quota::{QuotaExceeded, Quotas, until_midnight_utc};
use super::reports::{ReportVersion, Served};
use super::tenants::Tenant;
use ecdysis_model::{CachePolicy, ModelFlags, SamplingArgs};
use ecdysis_runner::agent::EpisodeRecord;
use ecdysis_runner::eval::{
    self, ModelServices, RunConfig, RunSettings, RunSpec, RunSummary, SIMULATED_LABEL,
};
use ecdysis_runner::isolate::{DomainSource, EpisodeJob};
use ecdysis_sandbox::sandbox::{FailurePolicy, LayerSet, Limits};
use ecdysis_sandbox::store::{ComponentHash, ManifestFacts};

/// `POST /v1/evaluations`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvaluationRequest {
    /// A harness hash the tenant owns or was granted; `null` runs Direct.
    #[serde(default)]
    pub harness: Option<String>,
    #[serde(default = "default_domain")]
    /// The domain (one the operator offers).
    pub domain: String,
    /// The split (default: every task of the domain).
    #[serde(default)]
    pub split: Option<String>,
    /// Only these task ids, in order (left out: every task of the split;
    /// an empty list is refused).
    #[serde(default, deserialize_with = "some_tasks")]
    pub tasks: Vec<String>,
    #[serde(default)]
    /// Trials per task (default from `[limits.default]`).
    pub trials: Option<u32>,
    /// The agent: a model alias of the operator's.
    pub agent: String,
    /// The user simulator: `scripted` (default) or an alias.
    #[serde(default)]
    pub user: Option<String>,
    #[serde(default)]
    /// The run's seed.
    pub seed: u64,
    #[serde(default)]
    /// Sandbox and episode limits.
    pub limits: RequestLimits,
    #[serde(default)]
    /// What a failing hook does (default fail-closed).
    pub policy: Option<FailurePolicy>,
    #[serde(default)]
    /// The harness's layers that run (default all four).
    pub layers: Option<LayerSet>,
}

/// A `tasks` list that names at least one task: an empty one would read
/// as "every task", a whole domain the client did not ask for.
fn some_tasks<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let tasks = Vec::<String>::deserialize(d)?;
    if tasks.is_empty() {
        return Err(serde::de::Error::custom(
            "tasks: the list is empty (name at least one task, or leave `tasks` out for every task)",
        ));
    }
    Ok(tasks)
}

fn default_domain() -> String {
    "tau2/retail".into()
}

/// Limits a tenant may ask for (each within the operator's maximum).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestLimits {
    /// Fuel per hook call.
    pub fuel_per_hook: Option<u64>,
    /// Wall-clock deadline per hook call, in milliseconds.
    pub deadline_ms: Option<u64>,
    /// Guest linear memory, MiB.
    pub memory_mib: Option<u64>,
    /// Agent steps per episode.
    pub max_steps: Option<u32>,
    /// Tool errors per episode.
    pub max_errors: Option<u32>,
}

/// Why an evaluation cannot be created.
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    #[error("no such {0}")]
    /// The harness is not the tenant's (or does not exist): 404.
    NotFound(&'static str),
    #[error("{0}")]
    /// The request cannot work (unknown alias, limit above the cap, unknown task).
    Invalid(String),
    #[error("{}", .0.message())]
    /// A quota refuses it.
    Quota(QuotaExceeded),
    #[error(transparent)]
    /// The database failed.
    Db(#[from] DbError),
    #[error("{0}")]
    /// Something on the server's side failed (logged, not shown in detail).
    Internal(String),
}

/// The episodes done so far, by state.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Progress {
    /// Episodes of the evaluation.
    pub total: i64,
    /// Finished and scored.
    pub done: i64,
    /// Running in a worker.
    pub running: i64,
    /// Waiting for a worker.
    pub queued: i64,
    /// Cancelled before they finished.
    pub cancelled: i64,
    /// Given up after repeated infrastructure failures (not scored).
    pub lost: i64,
}

/// `GET /v1/evaluations/{id}`.
#[derive(Debug, Clone, Serialize)]
pub struct EvaluationStatus {
    /// The evaluation's id.
    pub id: String,
    /// `running`, `done` or `cancelled`.
    pub state: String,
    /// The harness hash (`null`: Direct).
    pub harness: Option<String>,
    /// The domain.
    pub domain: String,
    /// The agent's model alias.
    pub agent: String,
    /// The user simulator (`scripted` or an alias).
    pub user: String,
    /// When it was created (RFC 3339).
    pub created_at: String,
    /// When it ended (RFC 3339).
    pub finished_at: Option<String>,
    /// Episodes by state.
    pub progress: Progress,
    /// What holds queued episodes back, when a quota does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<String>,
    /// Model spend so far (USD).
    pub usd: f64,
    /// Harness fuel burnt so far.
    pub fuel: i64,
    /// Scores, when done (or cancelled: the finished episodes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<serde_json::Value>,
    /// Present when the agent is a simulated testbed model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<&'static str>,
}

/// Episode states.
pub mod state {
    /// Waiting for a worker.
    pub const QUEUED: &str = "queued";
    /// Claimed by a worker (evaluations: not yet finished).
    pub const RUNNING: &str = "running";
    /// Finished and scored.
    pub const DONE: &str = "done";
    /// Cancelled by the tenant.
    pub const CANCELLED: &str = "cancelled";
    /// Given up after repeated infrastructure failures.
    pub const LOST: &str = "lost";
}

fn flags(alias: &ModelAlias) -> ModelFlags {
    ModelFlags {
        model: Some(alias.model.to_string()),
        base_url: alias.base_url.clone(),
        // No implicit OPENAI_API_KEY: an alias without a key sends none.
        api_key_env: Some(alias.api_key_env.clone().unwrap_or_default()),
        max_concurrency: alias.max_concurrency,
        request_timeout_secs: alias.timeout_seconds,
        ..ModelFlags::default()
    }
}

fn capped<T: PartialOrd + std::fmt::Display + Copy>(
    field: &str,
    asked: Option<T>,
    default: T,
    max: T,
) -> Result<T, CreateError> {
    let v = asked.unwrap_or(default);
    if v > max {
        return Err(CreateError::Invalid(format!(
            "limits.{field} = {v} exceeds the maximum {max} this service allows"
        )));
    }
    Ok(v)
}

/// The run spec of a request, checked against the operator's aliases and
/// caps.
pub fn spec_of(svc: &Service, req: &EvaluationRequest) -> Result<RunSpec, CreateError> {
    let cfg = &svc.config;
    if !cfg.domains.contains(&req.domain) {
        return Err(CreateError::Invalid(format!(
            "domain `{}` is not offered here (offered: {})",
            req.domain,
            cfg.domains.join(", ")
        )));
    }
    let known = || cfg.models.keys().cloned().collect::<Vec<_>>().join(", ");
    let agent = cfg.models.get(&req.agent).ok_or_else(|| {
        CreateError::Invalid(format!(
            "agent: unknown model alias `{}` (known: {})",
            req.agent,
            known()
        ))
    })?;
    let user = match req.user.as_deref().unwrap_or(eval::spec::SCRIPTED_USER) {
        eval::spec::SCRIPTED_USER => ModelFlags {
            model: Some(eval::spec::SCRIPTED_USER.into()),
            ..ModelFlags::default()
        },
        name => {
            let alias = cfg.models.get(name).ok_or_else(|| {
                CreateError::Invalid(format!(
                    "user: unknown model alias `{name}` (known: scripted, {})",
                    known()
                ))
            })?;
            if alias.is_simulated() {
                return Err(CreateError::Invalid(format!(
                    "user: `{name}` is a simulated agent, not a user simulator (use scripted)"
                )));
            }
            flags(alias)
        }
    };
    let d = &cfg.limits.default;
    let m = &cfg.limits.max;
    let l = &req.limits;
    let limits = Limits {
        fuel_per_hook: capped(
            "fuel_per_hook",
            l.fuel_per_hook,
            d.fuel_per_hook,
            m.fuel_per_hook,
        )?,
        deadline: Duration::from_millis(capped(
            "deadline_ms",
            l.deadline_ms,
            d.deadline_ms,
            m.deadline_ms,
        )?),
        memory_bytes: (capped("memory_mib", l.memory_mib, d.memory_mib, m.memory_mib)? << 20)
            as usize,
        wasi: cfg.limits.wasi,
        ..Limits::default()
    };
    let spec = RunSpec {
        settings: RunSettings {
            domain: req.domain.clone(),
            split: req.split.clone(),
            trials: capped("trials", req.trials, d.trials, m.trials)?,
            seed: req.seed,
            max_steps: capped("max_steps", l.max_steps, d.max_steps, m.max_steps)?,
            max_errors: capped("max_errors", l.max_errors, d.max_errors, m.max_errors)?,
            max_request_tokens: agent.max_request_tokens,
            policy: req.policy.unwrap_or_default(),
            layers: req.layers.unwrap_or_default(),
            limits,
            sampling: SamplingArgs::default(),
        },
        tasks: req.tasks.clone(),
        agent: flags(agent),
        user,
        sim_latency: Duration::from_millis(agent.sim_latency_ms),
    };
    spec.validate()
        .map_err(|e| CreateError::Invalid(e.to_string()))?;
    Ok(spec)
}

/// Today's use of the daily quotas by `tenant`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DailyUse {
    /// Episodes admitted today.
    pub episodes: i64,
    /// Harness fuel burnt today.
    pub fuel: i64,
    /// Model spend today (USD).
    pub usd: f64,
}

/// Today's (UTC) use of the daily quotas by `tenant`.
pub async fn daily_use(conn: &mut sqlx::AnyConnection, tenant: i64) -> Result<DailyUse, DbError> {
    let row = sqlx::query(
        "SELECT episodes, fuel, usd FROM daily_use WHERE tenant_id = $1 AND day_ms = $2",
    )
    .bind(tenant)
    .bind(day_start(now_ms()))
    .fetch_optional(&mut *conn)
    .await
    .ctx("daily use")?;
    let Some(row) = row else {
        return Ok(DailyUse::default());
    };
    Ok(DailyUse {
        episodes: row.try_get(0).ctx("daily use")?,
        fuel: row.try_get(1).ctx("daily use")?,
        usd: row.try_get(2).ctx("daily use")?,
    })
}

/// Add to `tenant`'s use today, in the caller's transaction.
pub async fn add_use(
    w: &mut WriteTx,
    tenant: i64,
    episodes: i64,
    fuel: i64,
    usd: f64,
) -> Result<(), DbError> {
    sqlx::query(
        "INSERT INTO daily_use (tenant_id, day_ms, episodes, fuel, usd) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (tenant_id, day_ms) DO UPDATE SET episodes = daily_use.episodes + excluded.episodes,
             fuel = daily_use.fuel + excluded.fuel, usd = daily_use.usd + excluded.usd",
    )
    .bind(tenant)
    .bind(day_start(now_ms()))
    .bind(episodes)
    .bind(fuel)
    .bind(usd)
    .execute(w.conn())
    .await
    .ctx("add daily use")?;
    Ok(())
}

/// The first daily quota `used` (plus `adding` episodes) exceeds.
pub fn over_daily(quotas: &Quotas, used: &DailyUse, adding: i64) -> Option<QuotaExceeded> {
    let retry = Some(until_midnight_utc(now_ms()));
    if used.episodes + adding > quotas.episodes_per_day as i64 {
        return Some(QuotaExceeded {
            quota: "episodes_per_day",
            limit: quotas.episodes_per_day as f64,
            used: (used.episodes + adding) as f64,
            retry_after: retry,
            status: 429,
        });
    }
    if used.fuel >= quotas.fuel_per_day as i64 {
        return Some(QuotaExceeded {
            quota: "fuel_per_day",
            limit: quotas.fuel_per_day as f64,
            used: used.fuel as f64,
            retry_after: retry,
            status: 429,
        });
    }
    if used.usd >= quotas.usd_per_day {
        return Some(QuotaExceeded {
            quota: "usd_per_day",
            limit: quotas.usd_per_day,
            used: used.usd,
            retry_after: retry,
            status: 429,
        });
    }
    None
}

/// A created evaluation.
#[derive(Debug, Clone, Serialize)]
pub struct Created {
    /// Its id.
    pub id: String,
    /// `running` (queued for workers).
    pub state: &'static str,
    /// How many episodes it has.
    pub episodes: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// Present when the agent is a simulated testbed model.
    pub note: Option<&'static str>,
}

/// Create an evaluation: check, admit, insert its episodes.
pub async fn create(
    svc: &Service,
    tenant: &Tenant,
    req: EvaluationRequest,
) -> Result<Created, CreateError> {
    let spec = spec_of(svc, &req)?;
    let harness = match req.harness.as_deref() {
        None | Some("none") => None,
        Some(h) => {
            let hash = ComponentHash::parse(h).ok_or(CreateError::NotFound("harness"))?;
            if harnesses::visible(&svc.db, tenant.id, hash.as_str())
                .await?
                .is_none()
            {
                return Err(CreateError::NotFound("harness"));
            }
            ensure_local(&svc.db, &svc.store, &hash).await?;
            Some(hash)
        }
    };
    let domain = svc
        .domains
        .get(&spec.settings.domain)
        .await
        .map_err(|e| CreateError::Internal(format!("opening {}: {e}", spec.settings.domain)))?;
    let tasks = spec
        .task_ids(&*domain)
        .map_err(|e| CreateError::Invalid(e.to_string()))?;
    let total = tasks.len() as i64 * i64::from(spec.settings.trials);
    let cap = svc.config.http.max_episodes_per_evaluation as i64;
    if total > cap {
        return Err(CreateError::Quota(QuotaExceeded {
            quota: "episodes_per_evaluation",
            limit: cap as f64,
            used: total as f64,
            retry_after: None,
            status: 413,
        }));
    }
    let job = EpisodeJob {
        spec: spec.clone(),
        harness: harness.clone(),
        // Each worker puts in its own store and data.
        store: PathBuf::new(),
        native_cache: None,
        source: DomainSource::default(),
        services: ModelServices {
            // No response cache across tenants: a hit would tell one tenant
            // what another asked.
            cache: CachePolicy::Off,
            cache_dir: PathBuf::new(),
            prices: None,
        },
        prices: Some(svc.config.price_table()),
    };
    let config = spec.config(harness.clone(), tasks.clone());
    let quotas = tenant.quotas(&svc.config.quotas);
    let id = format!("ev_{}", random_hex(12));
    let mut w = svc.db.write().await?;
    let used = daily_use(w.conn(), tenant.id).await?;
    if let Some(q) = over_daily(&quotas, &used, total) {
        drop(w);
        refuse(&svc.db, tenant, &q, "create evaluation").await?;
        return Err(CreateError::Quota(q));
    }
    let now = now_ms();
    sqlx::query(
        "INSERT INTO evaluations (id, tenant_id, harness, request, job, config, state, total, created_ms)
         VALUES ($1, $2, $3, $4, $5, $6, 'running', $7, $8)",
    )
    .bind(&id)
    .bind(tenant.id)
    .bind(harness.as_ref().map(ComponentHash::to_string))
    .bind(serde_json::to_string(&req).expect("request serializes"))
    .bind(serde_json::to_string(&job).expect("job serializes"))
    .bind(serde_json::to_string(&config).expect("config serializes"))
    .bind(total)
    .bind(now)
    .execute(w.conn())
    .await
    .ctx("create evaluation")?;
    insert_episodes(&mut w, &id, tenant.id, &tasks, spec.settings.trials).await?;
    add_use(&mut w, tenant.id, total, 0, 0.0).await?;
    audit::append(
        &mut w,
        kind::EVALUATION_STARTED,
        Some(&tenant.name),
        serde_json::json!({"evaluation": id, "harness": harness, "domain": spec.settings.domain, "episodes": total, "agent": req.agent}),
    )
    .await?;
    w.commit().await?;
    svc.work.notify_waiters();
    // The summary's floor, worked out while the episodes run rather than
    // after the last one, where it would add to the evaluation's wall time.
    let (domains, name) = (svc.domains.clone(), spec.settings.domain.clone());
    tokio::spawn(async move {
        if let Err(e) = domains.floor_solved(&name, &tasks).await {
            tracing::warn!("working out the floor of {name}'s tasks: {e}");
        }
    });
    Ok(Created {
        id,
        state: state::RUNNING,
        episodes: total,
        note: spec.is_simulated().then_some(SIMULATED_LABEL),
    })
}

async fn insert_episodes(
    w: &mut WriteTx,
    id: &str,
    tenant: i64,
    tasks: &[String],
    trials: u32,
) -> Result<(), DbError> {
    // Trial-major order: every task's first trial before any second one, so
    // a cancelled evaluation has covered as many tasks as it could.
    let mut rows = Vec::new();
    for trial in 0..trials {
        for t in tasks {
            rows.push((t.clone(), i64::from(trial)));
        }
    }
    for (chunk_no, chunk) in rows.chunks(200).enumerate() {
        // Placeholders: $1 eval, $2 tenant, then (idx, task, trial) per row.
        let mut sql = String::from(
            "INSERT INTO episodes (eval_id, tenant_id, idx, task_id, trial, state, attempt) VALUES ",
        );
        for i in 0..chunk.len() {
            let b = 3 + i * 3;
            if i > 0 {
                sql.push(',');
            }
            sql += &format!("($1, $2, ${b}, ${}, ${}, 'queued', 0)", b + 1, b + 2);
        }
        let mut q = sqlx::query(&sql).bind(id.to_string()).bind(tenant);
        for (i, (task, trial)) in chunk.iter().enumerate() {
            q = q
                .bind((chunk_no * 200 + i) as i64)
                .bind(task.clone())
                .bind(*trial);
        }
        q.execute(w.conn()).await.ctx("create episodes")?;
    }
    Ok(())
}

/// Record a quota refusal in the audit log.
pub async fn refuse(
    db: &Db,
    tenant: &Tenant,
    q: &QuotaExceeded,
    what: &str,
) -> Result<(), DbError> {
    audit::record(
        db,
        kind::QUOTA_REFUSED,
        Some(&tenant.name),
        serde_json::json!({"quota": q.quota, "limit": q.limit, "used": q.used, "request": what}),
    )
    .await
}

/// Put a component the database holds into the local store (a worker on
/// another machine, or a store that lost it), checking its hash.
pub async fn ensure_local(
    db: &Db,
    store: &ecdysis_sandbox::store::ComponentStore,
    hash: &ComponentHash,
) -> Result<(), CreateError> {
    if store
        .manifest(hash)
        .map_err(|e| CreateError::Internal(e.to_string()))?
        .is_some()
    {
        return Ok(());
    }
    let bytes = harnesses::component_bytes(db, hash.as_str())
        .await?
        .ok_or(CreateError::NotFound("harness"))?;
    if &ComponentHash::of(&bytes) != hash {
        return Err(CreateError::Internal(format!(
            "component {} in the database does not hash to its name",
            hash.short()
        )));
    }
    store
        .put(
            &bytes,
            ManifestFacts {
                origin: "serve upload".into(),
                ..ManifestFacts::default()
            },
        )
        .map_err(|e| CreateError::Internal(e.to_string()))?;
    Ok(())
}

/// One evaluation row, if `tenant` owns it.
struct Row_ {
    state: String,
    harness: Option<String>,
    request: EvaluationRequest,
    config: RunConfig,
    total: i64,
    created_ms: i64,
    finished_ms: Option<i64>,
    summary: Option<String>,
}

async fn row(db: &Db, tenant: i64, id: &str) -> Result<Option<Row_>, DbError> {
    let r = sqlx::query(
        "SELECT state, harness, request, config, total, created_ms, finished_ms, summary FROM evaluations
         WHERE id = $1 AND tenant_id = $2",
    )
    .bind(id)
    .bind(tenant)
    .fetch_optional(db.pool())
    .await
    .ctx("look up evaluation")?;
    let Some(r) = r else { return Ok(None) };
    let corrupt = |e: serde_json::Error| DbError::Corrupt {
        table: "evaluations",
        reason: e.to_string(),
    };
    let request: String = r.try_get(2).ctx("evaluation row")?;
    let config: String = r.try_get(3).ctx("evaluation row")?;
    Ok(Some(Row_ {
        state: r.try_get(0).ctx("evaluation row")?,
        harness: r.try_get(1).ctx("evaluation row")?,
        request: serde_json::from_str(&request).map_err(corrupt)?,
        config: serde_json::from_str(&config).map_err(corrupt)?,
        total: r.try_get(4).ctx("evaluation row")?,
        created_ms: r.try_get(5).ctx("evaluation row")?,
        finished_ms: r.try_get(6).ctx("evaluation row")?,
        summary: r.try_get(7).ctx("evaluation row")?,
    }))
}

/// Whether `tenant` owns evaluation `id`.
pub async fn owned(db: &Db, tenant: i64, id: &str) -> Result<bool, DbError> {
    let n: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM evaluations WHERE id = $1 AND tenant_id = $2")
            .bind(id)
            .bind(tenant)
            .fetch_one(db.pool())
            .await
            .ctx("look up evaluation")?;
    Ok(n > 0)
}

/// Episode counts by state, and the model spend and fuel of its episodes
/// so far: one read of the evaluation's episodes (a status poll's main
/// cost; clients poll while evaluations run).
pub async fn progress(db: &Db, id: &str, total: i64) -> Result<(Progress, f64, i64), DbError> {
    let rows = sqlx::query(
        "SELECT state, COUNT(*), COALESCE(SUM(usd), 0.0), CAST(COALESCE(SUM(fuel), 0) AS BIGINT)
         FROM episodes WHERE eval_id = $1 GROUP BY state",
    )
    .bind(id)
    .fetch_all(db.pool())
    .await
    .ctx("progress")?;
    let mut p = Progress {
        total,
        ..Progress::default()
    };
    let (mut usd, mut fuel) = (0.0, 0);
    for r in rows {
        let s: String = r.try_get(0).ctx("progress")?;
        let n: i64 = r.try_get(1).ctx("progress")?;
        usd += r.try_get::<f64, _>(2).ctx("progress")?;
        fuel += r.try_get::<i64, _>(3).ctx("progress")?;
        match s.as_str() {
            state::DONE => p.done = n,
            state::RUNNING => p.running = n,
            state::QUEUED => p.queued = n,
            state::CANCELLED => p.cancelled = n,
            state::LOST => p.lost = n,
            _ => {}
        }
    }
    Ok((p, usd, fuel))
}

/// The status of `tenant`'s evaluation `id` (`None`: not theirs, or none).
pub async fn status(
    svc: &Service,
    tenant: &Tenant,
    id: &str,
) -> Result<Option<EvaluationStatus>, CreateError> {
    let Some(r) = row(&svc.db, tenant.id, id).await? else {
        return Ok(None);
    };
    let (progress, usd, fuel) = progress(&svc.db, id, r.total).await?;
    let summary = if r.state == state::RUNNING {
        None
    } else {
        match r.summary {
            Some(s) => serde_json::from_str(&s).ok(),
            None => {
                Some(serde_json::to_value(materialize(svc, tenant.id, id).await?).expect("summary"))
            }
        }
    };
    let waiting_for = if r.state == state::RUNNING && progress.queued > 0 {
        waiting_for(svc, tenant, progress.running).await?
    } else {
        None
    };
    Ok(Some(EvaluationStatus {
        id: id.to_string(),
        state: r.state,
        harness: r.harness,
        domain: r.config.settings.domain.clone(),
        agent: r.request.agent.clone(),
        user: r
            .request
            .user
            .clone()
            .unwrap_or_else(|| eval::spec::SCRIPTED_USER.into()),
        created_at: rfc3339(r.created_ms),
        finished_at: r.finished_ms.map(rfc3339),
        progress,
        waiting_for,
        usd,
        fuel,
        summary,
        note: r
            .config
            .agent_model
            .is_simulated()
            .then_some(SIMULATED_LABEL),
    }))
}

/// Which quota holds a tenant's queued episodes back, if one does.
async fn waiting_for(
    svc: &Service,
    tenant: &Tenant,
    running: i64,
) -> Result<Option<String>, DbError> {
    let quotas = tenant.quotas(&svc.config.quotas);
    let tenant_running: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM episodes WHERE tenant_id = $1 AND state = 'running'",
    )
    .bind(tenant.id)
    .fetch_one(svc.db.pool())
    .await
    .ctx("running episodes")?;
    let _ = running;
    if tenant_running >= quotas.concurrent_episodes as i64 {
        return Ok(Some("quota concurrent_episodes".into()));
    }
    let mut conn = svc.db.pool().acquire().await.ctx("connection")?;
    let used = daily_use(&mut conn, tenant.id).await?;
    if used.fuel >= quotas.fuel_per_day as i64 {
        return Ok(Some("quota fuel_per_day (until midnight UTC)".into()));
    }
    if used.usd >= quotas.usd_per_day {
        return Ok(Some("quota usd_per_day (until midnight UTC)".into()));
    }
    Ok(None)
}

/// `tenant`'s evaluations, newest first.
pub async fn list(svc: &Service, tenant: &Tenant) -> Result<Vec<serde_json::Value>, DbError> {
    let rows = sqlx::query(
        "SELECT id, state, harness, total, created_ms, finished_ms FROM evaluations
         WHERE tenant_id = $1 ORDER BY created_ms DESC, id LIMIT 1000",
    )
    .bind(tenant.id)
    .fetch_all(svc.db.pool())
    .await
    .ctx("list evaluations")?;
    rows.iter()
        .map(|r| {
            let finished: Option<i64> = r.try_get(5).ctx("evaluation row")?;
            Ok(serde_json::json!({
                "id": r.try_get::<String, _>(0).ctx("evaluation row")?,
                "state": r.try_get::<String, _>(1).ctx("evaluation row")?,
                "harness": r.try_get::<Option<String>, _>(2).ctx("evaluation row")?,
                "episodes": r.try_get::<i64, _>(3).ctx("evaluation row")?,
                "created_at": rfc3339(r.try_get(4).ctx("evaluation row")?),
                "finished_at": finished.map(rfc3339),
            }))
        })
        .collect()
}

/// Finished episode records of an evaluation, in episode order, from
/// position `after` (exclusive), at most `limit`.
pub async fn records_page(
    db: &Db,
    id: &str,
    after: i64,
    limit: i64,
) -> Result<Vec<(i64, String)>, DbError> {
    let rows = sqlx::query(
        "SELECT idx, record FROM episodes WHERE eval_id = $1 AND state = 'done' AND idx > $2 ORDER BY idx LIMIT $3",
    )
    .bind(id)
    .bind(after)
    .bind(limit)
    .fetch_all(db.pool())
    .await
    .ctx("read trajectories")?;
    rows.iter()
        .map(|r| {
            Ok((
                r.try_get(0).ctx("episode row")?,
                r.try_get(1).ctx("episode row")?,
            ))
        })
        .collect()
}

/// Every finished record of an evaluation: its JSON as stored (the result
/// directory gets it unchanged) and its outline (what the summary needs;
/// see [`EpisodeRecord::outline_from_json`]).
async fn all_records(db: &Db, id: &str) -> Result<(Vec<String>, Vec<EpisodeRecord>), DbError> {
    let (mut texts, mut outlines) = (Vec::new(), Vec::new());
    let mut after = -1;
    loop {
        let page = records_page(db, id, after, 500).await?;
        let Some((last, _)) = page.last() else { break };
        after = *last;
        for (_, text) in page {
            outlines.push(EpisodeRecord::outline_from_json(&text).map_err(|e| {
                DbError::Corrupt {
                    table: "episodes",
                    reason: e.to_string(),
                }
            })?);
            texts.push(text);
        }
    }
    Ok((texts, outlines))
}

/// The result directory of an evaluation.
pub fn run_dir(state_dir: &Path, id: &str) -> PathBuf {
    state_dir.join("evaluations").join(id)
}

/// Compute a finished (or cancelled) evaluation's summary, store it, and
/// write its result directory as `run` would (`config.json`,
/// `trajectories.jsonl`, `summary.json`). Idempotent: a pure function of
/// the finished episodes.
pub async fn materialize(svc: &Service, tenant: i64, id: &str) -> Result<RunSummary, CreateError> {
    let r = row(&svc.db, tenant, id)
        .await?
        .ok_or(CreateError::NotFound("evaluation"))?;
    let (texts, records) = all_records(&svc.db, id).await?;
    let lost = sqlx::query(
        "SELECT task_id, trial FROM episodes WHERE eval_id = $1 AND state = 'lost' ORDER BY idx",
    )
    .bind(id)
    .fetch_all(svc.db.pool())
    .await
    .ctx("lost episodes")?;
    let unfinished = lost
        .iter()
        .map(|r| {
            Ok((
                r.try_get(0).ctx("episode row")?,
                r.try_get::<i64, _>(1).ctx("episode row")? as u32,
            ))
        })
        .collect::<Result<Vec<(String, u32)>, DbError>>()?;
    let floor = svc
        .domains
        .floor_solved(&r.config.settings.domain, &r.config.tasks)
        .await
        .map_err(|e| CreateError::Internal(e.to_string()))?;
    let summary = RunSummary {
        config: r.config.clone(),
        metrics: eval::metrics::compute(&records),
        unfinished,
        floor_solved: floor,
        floor_tasks: r.config.tasks.len() as u64,
        wall_seconds: (r.finished_ms.unwrap_or_else(now_ms) - r.created_ms) as f64 / 1000.0,
        ran_now: records.len() as u64,
        ledger: None,
        concurrency: None,
    };
    // Stored once nothing can change any more: a cancelled evaluation's
    // in-flight episodes may still finish (and are kept) until their
    // workers notice.
    let open: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM episodes WHERE eval_id = $1 AND state IN ('queued', 'running')",
    )
    .bind(id)
    .fetch_one(svc.db.pool())
    .await
    .ctx("open episodes")?;
    if r.state != state::RUNNING && open == 0 {
        sqlx::query("UPDATE evaluations SET summary = $1 WHERE id = $2")
            .bind(serde_json::to_string(&summary).expect("summary serializes"))
            .bind(id)
            .execute(svc.db.pool())
            .await
            .ctx("store summary")?;
    }
    // Megabytes for a large evaluation: written where blocking cannot
    // stall the requests sharing this thread.
    let evaluations = svc.state.dir("evaluations");
    let (id, written) = (id.to_string(), summary.clone());
    tokio::task::spawn_blocking(move || {
        write_run_dir(&evaluations?.dir(&id)?, &r.config, &texts, &written)
    })
    .await
    .map_err(|e| CreateError::Internal(e.to_string()))?
    .map_err(|e| CreateError::Internal(e.to_string()))?;
    Ok(summary)
}

/// Write a result directory as `run` does, each file replaced whole.
fn write_run_dir(
    dir: &Confined,
    config: &RunConfig,
    records: &[String],
    summary: &RunSummary,
) -> Result<(), ConfinedError> {
    dir.replace(
        eval::rundir::CONFIG_FILE,
        &serde_json::to_vec_pretty(config).expect("config serializes"),
    )?;
    let mut lines = Vec::new();
    for r in records {
        lines.extend_from_slice(r.as_bytes());
        lines.push(b'\n');
    }
    dir.replace(eval::rundir::TRAJECTORIES_FILE, &lines)?;
    dir.replace(
        eval::rundir::SUMMARY_FILE,
        &serde_json::to_vec_pretty(summary).expect("summary serializes"),
    )?;
    Ok(())
}

/// What an evaluation's report is a function of ([`ReportVersion`]).
async fn report_version(db: &Db, id: &str) -> Result<Option<ReportVersion>, DbError> {
    let row = sqlx::query(
        "SELECT e.state, e.done_count, e.finished_ms,
                (SELECT MAX(done_seq) FROM episodes WHERE eval_id = e.id)
         FROM evaluations e WHERE e.id = $1",
    )
    .bind(id)
    .fetch_optional(db.pool())
    .await
    .ctx("report version")?;
    row.map(|r| {
        Ok(ReportVersion {
            state: r.try_get(0).ctx("evaluation row")?,
            done: r.try_get(1).ctx("evaluation row")?,
            finished_ms: r.try_get(2).ctx("evaluation row")?,
            last_seq: r.try_get(3).ctx("evaluation row")?,
        })
    })
    .transpose()
}

/// The HTML report of an evaluation (`report::render` on its result
/// directory, refreshed first), rendered once per version of the
/// evaluation and kept in [`Service::reports`].
pub async fn report(
    svc: &Arc<Service>,
    tenant: i64,
    id: &str,
) -> Result<(axum::body::Bytes, Served), CreateError> {
    let version = report_version(&svc.db, id)
        .await?
        .ok_or(CreateError::NotFound("evaluation"))?;
    svc.reports
        .get_or_render(id, version, || async {
            materialize(svc, tenant, id).await?;
            let dir = run_dir(&svc.config.state_dir, id);
            tokio::task::spawn_blocking(move || {
                ecdysis_report::render(&[dir], &ecdysis_report::ReportOptions::default())
            })
            .await
            .map_err(|e| CreateError::Internal(e.to_string()))?
            .map_err(|e| CreateError::Internal(e.to_string()))
        })
        .await
}
