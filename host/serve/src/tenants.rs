//! Tenants and their tokens. A token is printed once, when the tenant is
//! added; the database keeps only its SHA-256, so a copy of the database
//! does not let anyone in.

use serde::Serialize;
use sha2::Digest;
use sqlx::Row;

use super::audit::{self, kind};
use super::config::valid_name;
use super::db::{Db, DbError, SqlContext, now_ms, random_hex, rfc3339};
use super::quota::{QuotaError, Quotas};

/// A tenant operation that cannot be done.
#[derive(Debug, thiserror::Error)]
pub enum TenantError {
    #[error(transparent)]
    /// The database failed.
    Db(#[from] DbError),
    #[error(
        "tenant name `{0}`: use 1-64 letters, digits, `-`, `_` or `.`, starting with a letter or digit"
    )]
    /// A name that is not allowed.
    BadName(String),
    #[error("tenant `{0}` already exists")]
    /// The name is taken.
    Exists(String),
    #[error("no tenant `{0}`")]
    /// No such tenant.
    Unknown(String),
    #[error(transparent)]
    /// A quota override that cannot be parsed.
    BadQuota(#[from] QuotaError),
}

/// An authenticated tenant.
#[derive(Debug, Clone, PartialEq)]
pub struct Tenant {
    /// Its row id.
    pub id: i64,
    /// Its name.
    pub name: String,
    /// Its quota overrides (a JSON object).
    pub overrides: serde_json::Value,
}

impl Tenant {
    /// Its quotas: the defaults with its overrides.
    pub fn quotas(&self, defaults: &Quotas) -> Quotas {
        defaults.with(&self.overrides)
    }
}

/// A row of `tenant list`.
#[derive(Debug, Clone, Serialize)]
pub struct TenantInfo {
    /// Its name.
    pub name: String,
    /// When it was added (RFC 3339).
    pub created_at: String,
    /// When its token was revoked, if it was.
    pub revoked_at: Option<String>,
    /// Its quota overrides (the rest are the defaults).
    pub quota_overrides: serde_json::Value,
}

/// The stored form of a token.
fn token_hash(token: &str) -> String {
    format!("sha256:{:x}", sha2::Sha256::digest(token.as_bytes()))
}

/// Whether `name` can be a tenant's. Names travel in URL paths (a grant's
/// `DELETE /v1/harnesses/{hash}/grants/{tenant}`): one a client or a proxy
/// would normalise (`.`, `..`) or read as hidden must not exist, so a name
/// starts with a letter or digit.
pub fn valid_tenant_name(name: &str) -> bool {
    valid_name(name) && name.starts_with(|c: char| c.is_ascii_alphanumeric())
}

/// Add a tenant; returns its token (shown once, never stored).
pub async fn add(db: &Db, name: &str) -> Result<String, TenantError> {
    if !valid_tenant_name(name) {
        return Err(TenantError::BadName(name.into()));
    }
    let token = format!("ecd_{}", random_hex(32));
    let mut w = db.write().await?;
    let exists: Option<i64> = sqlx::query_scalar("SELECT id FROM tenants WHERE name = $1")
        .bind(name)
        .fetch_optional(w.conn())
        .await
        .ctx("look up tenant")?;
    if exists.is_some() {
        return Err(TenantError::Exists(name.into()));
    }
    sqlx::query(
        "INSERT INTO tenants (name, token_hash, quotas, created_ms) VALUES ($1, $2, '{}', $3)",
    )
    .bind(name)
    .bind(token_hash(&token))
    .bind(now_ms())
    .execute(w.conn())
    .await
    .ctx("add tenant")?;
    audit::append(
        &mut w,
        kind::TENANT_ADDED,
        Some(name),
        serde_json::json!({}),
    )
    .await?;
    w.commit().await?;
    Ok(token)
}

/// Every tenant.
pub async fn list(db: &Db) -> Result<Vec<TenantInfo>, TenantError> {
    let rows =
        sqlx::query("SELECT name, created_ms, revoked_ms, quotas FROM tenants ORDER BY name")
            .fetch_all(db.pool())
            .await
            .ctx("list tenants")?;
    rows.iter()
        .map(|r| {
            let revoked: Option<i64> = r.try_get(2).ctx("tenant row")?;
            let quotas: String = r.try_get(3).ctx("tenant row")?;
            Ok(TenantInfo {
                name: r.try_get(0).ctx("tenant row")?,
                created_at: rfc3339(r.try_get(1).ctx("tenant row")?),
                revoked_at: revoked.map(rfc3339),
                quota_overrides: serde_json::from_str(&quotas).unwrap_or_default(),
            })
        })
        .collect()
}

/// Set some of a tenant's quotas (`name=value` items, see
/// [`super::quota::parse_override`]).
pub async fn set_quota(
    db: &Db,
    name: &str,
    items: &[String],
) -> Result<serde_json::Value, TenantError> {
    let mut w = db.write().await?;
    let current: Option<String> = sqlx::query_scalar("SELECT quotas FROM tenants WHERE name = $1")
        .bind(name)
        .fetch_optional(w.conn())
        .await
        .ctx("look up tenant")?;
    let current = current.ok_or_else(|| TenantError::Unknown(name.into()))?;
    let mut overrides: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&current).unwrap_or_default();
    let mut changed = serde_json::Map::new();
    for item in items {
        let (k, v) = super::quota::parse_override(item)?;
        overrides.insert(k.clone(), v.clone());
        changed.insert(k, v);
    }
    let value = serde_json::Value::Object(overrides);
    sqlx::query("UPDATE tenants SET quotas = $1 WHERE name = $2")
        .bind(value.to_string())
        .bind(name)
        .execute(w.conn())
        .await
        .ctx("set quota")?;
    audit::append(
        &mut w,
        kind::QUOTA_SET,
        Some(name),
        serde_json::Value::Object(changed),
    )
    .await?;
    w.commit().await?;
    Ok(value)
}

/// Revoke a tenant's token: it authenticates no more, and what it left
/// running is cancelled in the same transaction (queued episodes never
/// run; open event streams end). Its data stays.
pub async fn revoke(db: &Db, name: &str) -> Result<(), TenantError> {
    let mut w = db.write().await?;
    let id: Option<i64> =
        sqlx::query_scalar("SELECT id FROM tenants WHERE name = $1 AND revoked_ms IS NULL")
            .bind(name)
            .fetch_optional(w.conn())
            .await
            .ctx("look up tenant")?;
    let Some(id) = id else {
        return Err(TenantError::Unknown(name.into()));
    };
    sqlx::query("UPDATE tenants SET revoked_ms = $1 WHERE id = $2")
        .bind(now_ms())
        .bind(id)
        .execute(w.conn())
        .await
        .ctx("revoke tenant")?;
    let cancelled = super::scheduler::cancel_all_in(&mut w, id, name, "tenant revoked").await?;
    audit::append(
        &mut w,
        kind::TENANT_REVOKED,
        Some(name),
        serde_json::json!({"evaluations_cancelled": cancelled}),
    )
    .await?;
    w.commit().await?;
    Ok(())
}

/// The live tenant a token belongs to, if any.
pub async fn authenticate(db: &Db, token: &str) -> Result<Option<Tenant>, DbError> {
    let row = sqlx::query(
        "SELECT id, name, quotas FROM tenants WHERE token_hash = $1 AND revoked_ms IS NULL",
    )
    .bind(token_hash(token))
    .fetch_optional(db.pool())
    .await
    .ctx("authenticate")?;
    row.map(|r| {
        let quotas: String = r.try_get(2).ctx("tenant row")?;
        Ok(Tenant {
            id: r.try_get(0).ctx("tenant row")?,
            name: r.try_get(1).ctx("tenant row")?,
            overrides: serde_json::from_str(&quotas).unwrap_or_default(),
        })
    })
    .transpose()
}

/// The revoked tenant a token belonged to, if any (its id and name):
/// refusals of such a token are audited under the tenant's name.
pub async fn revoked_owner(db: &Db, token: &str) -> Result<Option<(i64, String)>, DbError> {
    sqlx::query_as("SELECT id, name FROM tenants WHERE token_hash = $1 AND revoked_ms IS NOT NULL")
        .bind(token_hash(token))
        .fetch_optional(db.pool())
        .await
        .ctx("look up revoked token")
}

/// A live tenant's id by name.
pub async fn id_of(db: &Db, name: &str) -> Result<Option<i64>, DbError> {
    sqlx::query_scalar("SELECT id FROM tenants WHERE name = $1 AND revoked_ms IS NULL")
        .bind(name)
        .fetch_optional(db.pool())
        .await
        .ctx("look up tenant")
}

#[cfg(test)]
mod tests {
    use super::valid_tenant_name;

    #[test]
    fn path_like_tenant_names_are_refused() {
        for bad in [".", "..", ".hidden", "-x", "_x", "a/b", "..%2f", "", "a b"] {
            assert!(!valid_tenant_name(bad), "{bad:?} accepted");
        }
        assert!(!valid_tenant_name(&"a".repeat(65)));
        for good in ["alice", "team-7", "b.c_d", "0"] {
            assert!(valid_tenant_name(good), "{good:?} refused");
        }
    }
}
