//! Tenants' harnesses: who owns which component, grants, and the shared
//! component bytes.
//!
//! Components are stored once per hash (content-addressed), but every
//! tenant's upload is its own row: whether another tenant uploaded the same
//! bytes is never visible — not in the answer (the tenant's own upload time,
//! never the first one), not in the stored-bytes quota (each copy counts in
//! full), not in the time an upload takes (every upload is compiled and
//! checked from its bytes, and writes the component row whether or not it
//! was there).

use serde::Serialize;
use sqlx::Row;

use super::audit::{self, kind};
use super::db::{Backend, Db, DbError, SqlContext, now_ms, rfc3339};
use super::quota::QuotaExceeded;
use ecdysis_runner::isolate::CheckReply;

/// A harness as its tenant sees it.
#[derive(Debug, Clone, Serialize)]
pub struct HarnessInfo {
    /// The component's blake3 hash.
    pub hash: String,
    /// The WIT world it exports.
    pub world: String,
    /// Its size in bytes.
    pub size: i64,
    /// When this tenant uploaded it (RFC 3339; never another tenant's time).
    pub uploaded_at: String,
    /// `owned` or `granted` (by another tenant).
    pub access: &'static str,
    /// Whether `check` passed.
    pub passed: bool,
    /// What `inspect` said.
    pub inspect: serde_json::Value,
    /// What `check` said, per hook.
    pub check: Option<serde_json::Value>,
}

fn info(row: &sqlx::any::AnyRow, viewer: i64) -> Result<HarnessInfo, DbError> {
    let owner: i64 = row.try_get("tenant_id").ctx("harness row")?;
    let report: String = row.try_get("report").ctx("harness row")?;
    let report: CheckReply = serde_json::from_str(&report).map_err(|e| DbError::Corrupt {
        table: "harnesses",
        reason: e.to_string(),
    })?;
    Ok(HarnessInfo {
        hash: row.try_get("hash").ctx("harness row")?,
        world: row.try_get("world").ctx("harness row")?,
        size: row.try_get("size").ctx("harness row")?,
        uploaded_at: rfc3339(row.try_get("uploaded_ms").ctx("harness row")?),
        access: if owner == viewer { "owned" } else { "granted" },
        passed: report.passed,
        inspect: report.inspect,
        check: report.check,
    })
}

/// The harness `hash` if `tenant` owns it or was granted it; `None`
/// otherwise (the same for one that does not exist).
pub async fn visible(db: &Db, tenant: i64, hash: &str) -> Result<Option<HarnessInfo>, DbError> {
    let row = sqlx::query(
        "SELECT h.tenant_id, h.hash, h.world, h.size, h.report, h.uploaded_ms FROM harnesses h
         WHERE h.hash = $2 AND (h.tenant_id = $1 OR EXISTS (
             SELECT 1 FROM grants g WHERE g.hash = h.hash AND g.owner_id = h.tenant_id AND g.grantee_id = $1))
         ORDER BY CASE WHEN h.tenant_id = $1 THEN 0 ELSE 1 END LIMIT 1",
    )
    .bind(tenant)
    .bind(hash)
    .fetch_optional(db.pool())
    .await
    .ctx("look up harness")?;
    row.map(|r| info(&r, tenant)).transpose()
}

/// Every harness `tenant` owns or was granted.
pub async fn list(db: &Db, tenant: i64) -> Result<Vec<HarnessInfo>, DbError> {
    let rows = sqlx::query(
        "SELECT h.tenant_id, h.hash, h.world, h.size, h.report, h.uploaded_ms FROM harnesses h
         WHERE h.tenant_id = $1 OR EXISTS (
             SELECT 1 FROM grants g WHERE g.hash = h.hash AND g.owner_id = h.tenant_id AND g.grantee_id = $1)
         ORDER BY h.uploaded_ms, h.hash",
    )
    .bind(tenant)
    .fetch_all(db.pool())
    .await
    .ctx("list harnesses")?;
    rows.iter().map(|r| info(r, tenant)).collect()
}

/// Bytes of the components `tenant` owns.
pub async fn stored_bytes(db: &Db, tenant: i64) -> Result<i64, DbError> {
    sqlx::query_scalar(
        "SELECT CAST(COALESCE(SUM(size), 0) AS BIGINT) FROM harnesses WHERE tenant_id = $1",
    )
    .bind(tenant)
    .fetch_one(db.pool())
    .await
    .ctx("stored bytes")
}

/// Whether `tenant` owns `hash` already (a re-upload costs no quota).
pub async fn owns(db: &Db, tenant: i64, hash: &str) -> Result<bool, DbError> {
    let n: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM harnesses WHERE tenant_id = $1 AND hash = $2")
            .bind(tenant)
            .bind(hash)
            .fetch_one(db.pool())
            .await
            .ctx("look up harness")?;
    Ok(n > 0)
}

/// Record a checked upload of `bytes` by `tenant` (name `tenant_name`),
/// with its audit record, in one transaction, if it fits the tenant's
/// `stored_bytes` quota (`stored_limit`); `Ok(Err(_))`: it does not, and
/// nothing was written.
///
/// The quota is read in the transaction that commits the bytes: a check
/// made earlier (before the slow compile) lets parallel uploads of one
/// tenant each see the same free space and together exceed it.
pub async fn save(
    db: &Db,
    tenant: i64,
    tenant_name: &str,
    bytes: &[u8],
    report: &CheckReply,
    stored_limit: u64,
) -> Result<Result<HarnessInfo, QuotaExceeded>, DbError> {
    let mut w = db.write().await?;
    if db.backend() == Backend::Postgres {
        // The tenant's row lock serialises its uploads (SQLite's single
        // writer already does): two transactions summing the same rows
        // would otherwise both see room for their bytes.
        sqlx::query("SELECT id FROM tenants WHERE id = $1 FOR UPDATE")
            .bind(tenant)
            .execute(w.conn())
            .await
            .ctx("lock tenant")?;
    }
    let (owned, stored): (i64, i64) = sqlx::query_as(
        "SELECT CAST(COALESCE(SUM(CASE WHEN hash = $2 THEN 1 ELSE 0 END), 0) AS BIGINT),
                CAST(COALESCE(SUM(size), 0) AS BIGINT)
         FROM harnesses WHERE tenant_id = $1",
    )
    .bind(tenant)
    .bind(&report.hash)
    .fetch_one(w.conn())
    .await
    .ctx("stored bytes")?;
    // A re-upload of bytes the tenant owns costs nothing.
    let after = stored + bytes.len() as i64;
    if owned == 0 && after > stored_limit.min(i64::MAX as u64) as i64 {
        return Ok(Err(stored_bytes_exceeded(stored_limit, after)));
    }
    // Rewritten when already there (same bytes, same hash): an upload of
    // bytes another tenant stored writes as much as one of new bytes, so
    // its timing tells nothing.
    sqlx::query(
        "INSERT INTO components (hash, bytes, size) VALUES ($1, $2, $3)
         ON CONFLICT (hash) DO UPDATE SET bytes = excluded.bytes, size = excluded.size",
    )
    .bind(&report.hash)
    .bind(bytes.to_vec())
    .bind(bytes.len() as i64)
    .execute(w.conn())
    .await
    .ctx("store component")?;
    sqlx::query(
        "INSERT INTO harnesses (tenant_id, hash, size, world, report, uploaded_ms) VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (tenant_id, hash) DO NOTHING",
    )
    .bind(tenant)
    .bind(&report.hash)
    .bind(bytes.len() as i64)
    .bind(&report.world)
    .bind(serde_json::to_string(report).expect("report serializes"))
    .bind(now_ms())
    .execute(w.conn())
    .await
    .ctx("record upload")?;
    audit::append(
        &mut w,
        kind::UPLOAD,
        Some(tenant_name),
        serde_json::json!({"hash": report.hash, "size": bytes.len(), "world": report.world, "passed": report.passed}),
    )
    .await?;
    w.commit().await?;
    visible(db, tenant, &report.hash)
        .await?
        .ok_or(DbError::Corrupt {
            table: "harnesses",
            reason: "an upload vanished after it was recorded".into(),
        })
        .map(Ok)
}

/// The refusal of an upload that would bring the tenant's stored bytes to
/// `after`.
pub fn stored_bytes_exceeded(limit: u64, after: i64) -> QuotaExceeded {
    QuotaExceeded {
        quota: "stored_bytes",
        limit: limit as f64,
        used: after as f64,
        retry_after: None,
        status: 413,
    }
}

/// Let `grantee` use `owner`'s harness `hash`. `false`: the owner does not
/// own it. A grantee that is no live tenant (`None`) gets nothing, but the
/// grant is audited and answered alike, so the answer never tells which
/// tenant names exist.
pub async fn grant(
    db: &Db,
    owner: i64,
    owner_name: &str,
    hash: &str,
    grantee: Option<i64>,
    grantee_name: &str,
) -> Result<bool, DbError> {
    let mut w = db.write().await?;
    let owned: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM harnesses WHERE tenant_id = $1 AND hash = $2")
            .bind(owner)
            .bind(hash)
            .fetch_one(w.conn())
            .await
            .ctx("look up harness")?;
    if owned == 0 {
        return Ok(false);
    }
    if let Some(grantee) = grantee {
        sqlx::query(
            "INSERT INTO grants (owner_id, hash, grantee_id, created_ms) VALUES ($1, $2, $3, $4)
             ON CONFLICT (owner_id, hash, grantee_id) DO NOTHING",
        )
        .bind(owner)
        .bind(hash)
        .bind(grantee)
        .bind(now_ms())
        .execute(w.conn())
        .await
        .ctx("grant")?;
    }
    audit::append(
        &mut w,
        kind::GRANT,
        Some(owner_name),
        serde_json::json!({"hash": hash, "grantee": grantee_name, "grantee_exists": grantee.is_some()}),
    )
    .await?;
    w.commit().await?;
    Ok(true)
}

/// Withdraw a grant. `false`: no such grant of the owner's (the same
/// statement runs whether or not `grantee` is a live tenant's name).
pub async fn revoke_grant(
    db: &Db,
    owner: i64,
    owner_name: &str,
    hash: &str,
    grantee: Option<i64>,
    grantee_name: &str,
) -> Result<bool, DbError> {
    let mut w = db.write().await?;
    let n = sqlx::query("DELETE FROM grants WHERE owner_id = $1 AND hash = $2 AND grantee_id = $3")
        .bind(owner)
        .bind(hash)
        .bind(grantee.unwrap_or(-1))
        .execute(w.conn())
        .await
        .ctx("revoke grant")?
        .rows_affected();
    if n == 0 {
        return Ok(false);
    }
    audit::append(
        &mut w,
        kind::GRANT_REVOKED,
        Some(owner_name),
        serde_json::json!({"hash": hash, "grantee": grantee_name}),
    )
    .await?;
    w.commit().await?;
    Ok(true)
}

/// A component's bytes (workers on other machines fetch them).
pub async fn component_bytes(db: &Db, hash: &str) -> Result<Option<Vec<u8>>, DbError> {
    sqlx::query_scalar("SELECT bytes FROM components WHERE hash = $1")
        .bind(hash)
        .fetch_optional(db.pool())
        .await
        .ctx("read component")
}
