//! Per-tenant quotas: their values (the operator's defaults, overridden per
//! tenant with `tenant set-quota`), the refusal a request gets, and the
//! request-rate token bucket.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::db::{Db, DbError, SqlContext};

/// Every quota of a tenant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Quotas {
    /// Episodes of the tenant running at once.
    pub concurrent_episodes: u64,
    /// Episodes admitted per UTC day (counted when an evaluation is
    /// created).
    pub episodes_per_day: u64,
    /// Harness fuel burnt per UTC day.
    pub fuel_per_day: u64,
    /// Bytes of harness components stored (each tenant's own copy counts
    /// in full, however many tenants uploaded the same bytes).
    pub stored_bytes: u64,
    /// Largest single upload.
    pub upload_bytes: u64,
    /// Model spend per UTC day, from the usage ledger and the aliases'
    /// prices.
    pub usd_per_day: f64,
    /// Requests per second (token bucket; bursts up to twice the rate).
    pub requests_per_second: f64,
}

impl Default for Quotas {
    fn default() -> Self {
        Quotas {
            concurrent_episodes: 8,
            episodes_per_day: 10_000,
            fuel_per_day: 1_000_000_000_000,
            stored_bytes: 256 << 20,
            upload_bytes: 32 << 20,
            usd_per_day: 10.0,
            requests_per_second: 20.0,
        }
    }
}

/// The quota names, as `tenant set-quota` and refusals spell them.
pub const QUOTA_NAMES: &[&str] = &[
    "concurrent_episodes",
    "episodes_per_day",
    "fuel_per_day",
    "stored_bytes",
    "upload_bytes",
    "usd_per_day",
    "requests_per_second",
];

/// A quota value, or a `name=value` override, that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuotaError {
    /// `usd_per_day` is negative or not a number.
    #[error("quota usd_per_day must be a finite number ≥ 0")]
    UsdPerDay,
    /// `requests_per_second` is not positive.
    #[error("quota requests_per_second must be a positive number")]
    RequestsPerSecond,
    /// An override without `=` (the item as given).
    #[error("`{0}`: expected name=value")]
    NotNameValue(String),
    /// An override of a quota that does not exist (the name given).
    #[error("unknown quota `{0}` (known: {known})", known = QUOTA_NAMES.join(", "))]
    Unknown(String),
    /// An override whose value is not an amount of that quota.
    #[error("quota {name}: `{value}` is not a valid amount")]
    BadAmount {
        /// The quota.
        name: String,
        /// The value given.
        value: String,
    },
}

impl Quotas {
    /// Refuse values that cannot work.
    pub fn validate(&self) -> Result<(), QuotaError> {
        if !(self.usd_per_day.is_finite() && self.usd_per_day >= 0.0) {
            return Err(QuotaError::UsdPerDay);
        }
        if !(self.requests_per_second.is_finite() && self.requests_per_second > 0.0) {
            return Err(QuotaError::RequestsPerSecond);
        }
        Ok(())
    }

    /// These quotas with `overrides` (a JSON object of some fields) on top.
    pub fn with(&self, overrides: &serde_json::Value) -> Quotas {
        let mut base = serde_json::to_value(self).expect("quotas serialize");
        if let (Some(b), Some(o)) = (base.as_object_mut(), overrides.as_object()) {
            for (k, v) in o {
                if b.contains_key(k) {
                    b.insert(k.clone(), v.clone());
                }
            }
        }
        serde_json::from_value(base).unwrap_or_else(|_| self.clone())
    }
}

/// Parse `name=value` into an override object entry, checking the name
/// and the value's type.
pub fn parse_override(item: &str) -> Result<(String, serde_json::Value), QuotaError> {
    let (name, value) = item
        .split_once('=')
        .ok_or_else(|| QuotaError::NotNameValue(item.to_string()))?;
    let name = name.trim();
    if !QUOTA_NAMES.contains(&name) {
        return Err(QuotaError::Unknown(name.to_string()));
    }
    let value = value.trim();
    let parsed = if matches!(name, "usd_per_day" | "requests_per_second") {
        value
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && *v >= 0.0)
            .map(serde_json::Value::from)
    } else {
        value.parse::<u64>().ok().map(serde_json::Value::from)
    };
    let parsed = parsed.ok_or_else(|| QuotaError::BadAmount {
        name: name.to_string(),
        value: value.to_string(),
    })?;
    Ok((name.to_string(), parsed))
}

/// A refused request: which quota, its limit, what is used, and when to
/// retry.
#[derive(Debug, Clone, PartialEq)]
pub struct QuotaExceeded {
    /// The quota's name (see [`QUOTA_NAMES`]).
    pub quota: &'static str,
    /// Its value for the tenant.
    pub limit: f64,
    /// What is in use, or what the request would bring it to.
    pub used: f64,
    /// `None`: retrying will not help (the request is too big).
    pub retry_after: Option<Duration>,
    /// 413 (a size) or 429 (a rate or an amount).
    pub status: u16,
}

impl QuotaExceeded {
    /// The refusal in words.
    pub fn message(&self) -> String {
        format!(
            "quota {} exceeded: limit {}, in use or requested {}",
            self.quota,
            fmt_amount(self.limit),
            fmt_amount(self.used)
        )
    }
}

fn fmt_amount(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v:.4}")
    }
}

/// Time until the next UTC midnight (when the daily quotas reset).
pub fn until_midnight_utc(now_ms: i64) -> Duration {
    let day = 86_400_000;
    let next = (now_ms.div_euclid(day) + 1) * day;
    Duration::from_millis((next - now_ms).max(1000) as u64)
}

/// Per-tenant request-rate token buckets in this server's memory (SQLite:
/// one machine, usually one API server; with Postgres the bucket is shared
/// through the database, [`take_shared`]).
#[derive(Default)]
pub struct RateLimiter {
    buckets: Mutex<HashMap<i64, Bucket>>,
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

impl RateLimiter {
    /// Take one token for `tenant` at `rate` per second (burst: twice the
    /// rate, at least one), or say how long until one is available.
    pub fn take(&self, tenant: i64, rate: f64) -> Result<(), Duration> {
        let burst = (rate * 2.0).max(1.0);
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let b = buckets.entry(tenant).or_insert(Bucket {
            tokens: burst,
            at: now,
        });
        b.tokens = (b.tokens + now.duration_since(b.at).as_secs_f64() * rate).min(burst);
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - b.tokens) / rate))
        }
    }
}

/// The database clock in milliseconds (Postgres: the statement's start),
/// so API servers on machines whose clocks differ fill one bucket alike.
const DB_NOW_MS: &str = "CAST(EXTRACT(EPOCH FROM statement_timestamp()) * 1000 AS BIGINT)";

/// Take one token from `tenant`'s bucket in the database (Postgres), shared
/// by every API server process on it: several `serve` processes behind a
/// load balancer do not multiply a tenant's `requests_per_second`. The
/// same bucket as [`RateLimiter::take`] (burst twice the rate, at least
/// one), refilled from the database's clock; one upsert, which holds the
/// tenant's row lock, so concurrent requests on different servers take
/// turns. `Ok(Err(wait))`: refused, retry after `wait`.
pub async fn take_shared(db: &Db, tenant: i64, rate: f64) -> Result<Result<(), Duration>, DbError> {
    let burst = (rate * 2.0).max(1.0);
    let now = DB_NOW_MS;
    let refilled = format!("LEAST($2, b.tokens + GREATEST(0, {now} - b.at_ms) * $3 / 1000.0)");
    let taken: Option<f64> = sqlx::query_scalar(&format!(
        "INSERT INTO rate_buckets AS b (tenant_id, tokens, at_ms) VALUES ($1, $2 - 1.0, {now})
         ON CONFLICT (tenant_id) DO UPDATE SET tokens = {refilled} - 1.0, at_ms = GREATEST({now}, b.at_ms)
         WHERE {refilled} >= 1.0
         RETURNING tokens"
    ))
    .bind(tenant)
    .bind(burst)
    .bind(rate)
    .fetch_optional(db.pool())
    .await
    .ctx("request rate")?;
    if taken.is_some() {
        return Ok(Ok(()));
    }
    let left: f64 = sqlx::query_scalar(&format!(
        "SELECT {refilled} FROM rate_buckets b WHERE b.tenant_id = $1"
    ))
    .bind(tenant)
    .bind(burst)
    .bind(rate)
    .fetch_optional(db.pool())
    .await
    .ctx("request rate")?
    .unwrap_or(0.0);
    Ok(Err(Duration::from_secs_f64(
        ((1.0 - left) / rate).max(0.001),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_replace_only_their_fields() {
        let q = Quotas::default().with(&serde_json::json!({"concurrent_episodes": 2, "bogus": 1}));
        assert_eq!(q.concurrent_episodes, 2);
        assert_eq!(q.episodes_per_day, Quotas::default().episodes_per_day);
        assert!(parse_override("nope=1").is_err());
        assert!(parse_override("fuel_per_day=-1").is_err());
        assert_eq!(
            parse_override("usd_per_day=0.5").unwrap(),
            ("usd_per_day".into(), serde_json::json!(0.5))
        );
    }

    #[test]
    fn the_bucket_allows_a_burst_then_paces() {
        let r = RateLimiter::default();
        for _ in 0..4 {
            r.take(1, 2.0).unwrap();
        }
        let wait = r.take(1, 2.0).unwrap_err();
        assert!(wait <= Duration::from_millis(500), "{wait:?}");
        r.take(2, 2.0).unwrap();
    }

    #[test]
    fn daily_quotas_reset_at_midnight() {
        assert_eq!(
            until_midnight_utc(86_400_000 - 5_000),
            Duration::from_secs(5)
        );
    }
}
