//! The audit log: append-only, hash-chained records of every authentication
//! failure, upload, grant, evaluation start/finish/cancel, quota refusal,
//! worker crash and tenant change.
//!
//! Record `n` stores `hash_n = blake3(hash_{n-1} ‖ seq ‖ time ‖ kind ‖
//! tenant ‖ detail)` and `prev = hash_{n-1}`; a head row holds the last
//! sequence number and hash. [`verify`] recomputes the chain: an edited
//! record breaks its own hash, a removed one leaves a gap (or a head that
//! points past the end), a reordered one breaks the links. Someone who can
//! rewrite the whole table and its head can forge a consistent chain, so
//! `audit verify` prints the head hash: an operator who records it
//! elsewhere (a ticket, another machine) can check later that nothing
//! before it was rewritten (`--expect-head`).
//!
//! Appends happen inside the caller's write transaction, so a record and
//! the change it describes commit together (or not at all).

use serde::Serialize;
use sqlx::Row;

use super::db::{Db, DbError, GENESIS, SqlContext, WriteTx, now_ms};

/// What kinds of event are recorded.
pub mod kind {
    /// A request with no, an unknown or a revoked token.
    pub const AUTH_FAILURE: &str = "auth_failure";
    /// A component a tenant uploaded (checked and stored).
    pub const UPLOAD: &str = "upload";
    /// An upload refused by the check (not a runnable component).
    pub const UPLOAD_REFUSED: &str = "upload_refused";
    /// A harness shared with another tenant.
    pub const GRANT: &str = "grant";
    /// A grant withdrawn.
    pub const GRANT_REVOKED: &str = "grant_revoked";
    /// An evaluation created (queued).
    pub const EVALUATION_STARTED: &str = "evaluation_started";
    /// An evaluation whose last episode finished.
    pub const EVALUATION_FINISHED: &str = "evaluation_finished";
    /// An evaluation cancelled by its tenant.
    pub const EVALUATION_CANCELLED: &str = "evaluation_cancelled";
    /// A request refused by a quota.
    pub const QUOTA_REFUSED: &str = "quota_refused";
    /// A worker process that died serving a tenant's episode or upload.
    pub const WORKER_CRASH: &str = "worker_crash";
    /// An episode whose worker stopped renewing its lease (taken up again or given up).
    pub const LEASE_EXPIRED: &str = "lease_expired";
    /// `tenant add`.
    pub const TENANT_ADDED: &str = "tenant_added";
    /// `tenant revoke`.
    pub const TENANT_REVOKED: &str = "tenant_revoked";
    /// `tenant set-quota`.
    pub const QUOTA_SET: &str = "quota_set";
}

fn chain_hash(
    prev: &str,
    seq: i64,
    at_ms: i64,
    kind: &str,
    tenant: Option<&str>,
    detail: &str,
) -> String {
    let mut h = blake3::Hasher::new();
    for part in [
        prev,
        &seq.to_string(),
        &at_ms.to_string(),
        kind,
        tenant.unwrap_or("\u{0}"),
        detail,
    ] {
        // Length-prefixed, so no two field splits hash alike.
        h.update(&(part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    h.finalize().to_hex().to_string()
}

/// The longest string a record's detail keeps. A longer one (a request
/// path, an error message) is cut at a character boundary and the record
/// says so: `truncated` maps each cut field (a JSON pointer) to its length
/// in bytes. Strangers can make the service write records, so no record
/// may grow with what they send.
pub const MAX_FIELD_BYTES: usize = 512;

/// Cut every string of `detail` to [`MAX_FIELD_BYTES`], naming what was
/// cut.
pub fn bounded(mut detail: serde_json::Value) -> serde_json::Value {
    fn clip(
        v: &mut serde_json::Value,
        at: String,
        cut: &mut serde_json::Map<String, serde_json::Value>,
    ) {
        match v {
            serde_json::Value::String(s) if s.len() > MAX_FIELD_BYTES => {
                let mut end = MAX_FIELD_BYTES;
                while !s.is_char_boundary(end) {
                    end -= 1;
                }
                cut.insert(at, s.len().into());
                s.truncate(end);
            }
            serde_json::Value::Array(items) => {
                for (i, item) in items.iter_mut().enumerate() {
                    clip(item, format!("{at}/{i}"), cut);
                }
            }
            serde_json::Value::Object(fields) => {
                for (k, item) in fields.iter_mut() {
                    let key = k.replace('~', "~0").replace('/', "~1");
                    clip(item, format!("{at}/{key}"), cut);
                }
            }
            _ => {}
        }
    }
    let mut cut = serde_json::Map::new();
    clip(&mut detail, String::new(), &mut cut);
    if cut.is_empty() {
        return detail;
    }
    match detail {
        serde_json::Value::Object(mut fields) => {
            fields.insert("truncated".into(), cut.into());
            serde_json::Value::Object(fields)
        }
        other => serde_json::json!({"value": other, "truncated": cut}),
    }
}

/// Append one record in the caller's transaction; its detail is
/// [`bounded`].
pub async fn append(
    w: &mut WriteTx,
    kind: &str,
    tenant: Option<&str>,
    detail: serde_json::Value,
) -> Result<(), DbError> {
    let detail = bounded(detail);
    // Bumping the head first takes its row lock (Postgres) before anything
    // is read, so concurrent appenders queue up here.
    let row = sqlx::query("UPDATE audit_head SET seq = seq + 1 WHERE id = 1 RETURNING seq, hash")
        .fetch_one(w.conn())
        .await
        .ctx("audit head")?;
    let seq: i64 = row.try_get(0).ctx("audit head")?;
    let prev: String = row.try_get(1).ctx("audit head")?;
    let at = now_ms();
    let detail = detail.to_string();
    let hash = chain_hash(&prev, seq, at, kind, tenant, &detail);
    sqlx::query(
        "INSERT INTO audit (seq, at_ms, kind, tenant, detail, prev, hash) VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(seq)
    .bind(at)
    .bind(kind)
    .bind(tenant.map(str::to_string))
    .bind(detail)
    .bind(prev)
    .bind(hash.clone())
    .execute(w.conn())
    .await
    .ctx("audit append")?;
    sqlx::query("UPDATE audit_head SET hash = $1 WHERE id = 1")
        .bind(hash)
        .execute(w.conn())
        .await
        .ctx("audit head")?;
    Ok(())
}

/// Append one record in a transaction of its own.
pub async fn record(
    db: &Db,
    kind: &str,
    tenant: Option<&str>,
    detail: serde_json::Value,
) -> Result<(), DbError> {
    let mut w = db.write().await?;
    append(&mut w, kind, tenant, detail).await?;
    w.commit().await
}

/// One stored record.
#[derive(Debug, Clone, Serialize)]
pub struct AuditRecord {
    /// Position in the chain, from 1.
    pub seq: i64,
    /// When it was appended (milliseconds since the Unix epoch).
    pub at_ms: i64,
    /// What happened (one of [`kind`]).
    pub kind: String,
    /// The tenant concerned, if any.
    pub tenant: Option<String>,
    /// The details, as JSON text (hashed as stored).
    pub detail: String,
    /// The hash of the record before it.
    pub prev: String,
    /// This record's hash (see the module docs).
    pub hash: String,
}

/// What [`verify`] found.
#[derive(Debug, Clone, Serialize)]
pub struct Verification {
    /// Records read.
    pub records: u64,
    /// The head: the last record's sequence number and hash.
    pub head_seq: i64,
    /// The hash the head row holds (write it down to check for rewrites later).
    pub head_hash: String,
    /// Every break in the chain, in order; empty when it verifies.
    pub problems: Vec<String>,
}

impl Verification {
    /// Whether the chain verified.
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Every record, in sequence order.
pub async fn records(db: &Db) -> Result<Vec<AuditRecord>, DbError> {
    let rows =
        sqlx::query("SELECT seq, at_ms, kind, tenant, detail, prev, hash FROM audit ORDER BY seq")
            .fetch_all(db.pool())
            .await
            .ctx("read audit log")?;
    rows.iter()
        .map(|r| {
            Ok(AuditRecord {
                seq: r.try_get(0).ctx("audit row")?,
                at_ms: r.try_get(1).ctx("audit row")?,
                kind: r.try_get(2).ctx("audit row")?,
                tenant: r.try_get(3).ctx("audit row")?,
                detail: r.try_get(4).ctx("audit row")?,
                prev: r.try_get(5).ctx("audit row")?,
                hash: r.try_get(6).ctx("audit row")?,
            })
        })
        .collect()
}

/// Recompute the chain.
pub async fn verify(db: &Db) -> Result<Verification, DbError> {
    let records = records(db).await?;
    let head = sqlx::query("SELECT seq, hash FROM audit_head WHERE id = 1")
        .fetch_one(db.pool())
        .await
        .ctx("audit head")?;
    let head_seq: i64 = head.try_get(0).ctx("audit head")?;
    let head_hash: String = head.try_get(1).ctx("audit head")?;
    Ok(check_chain(&records, head_seq, &head_hash))
}

/// The chain check itself, on records in sequence order.
pub fn check_chain(records: &[AuditRecord], head_seq: i64, head_hash: &str) -> Verification {
    let mut problems = Vec::new();
    let mut prev = GENESIS.to_string();
    let mut expected_seq = 1;
    for r in records {
        if r.seq != expected_seq {
            problems.push(format!(
                "record {}: expected sequence number {expected_seq} (a record is missing or was moved)",
                r.seq
            ));
            expected_seq = r.seq;
        }
        if r.prev != prev {
            problems.push(format!(
                "record {}: does not follow the record before it (removed or reordered records)",
                r.seq
            ));
        }
        let actual = chain_hash(
            &r.prev,
            r.seq,
            r.at_ms,
            &r.kind,
            r.tenant.as_deref(),
            &r.detail,
        );
        if actual != r.hash {
            problems.push(format!(
                "record {} ({}): its contents do not match its hash (edited)",
                r.seq, r.kind
            ));
        }
        prev = r.hash.clone();
        expected_seq += 1;
    }
    let last_seq = records.last().map(|r| r.seq).unwrap_or(0);
    if head_seq != last_seq || head_hash != prev {
        problems.push(format!(
            "the head says record {head_seq} is last, the log ends at record {last_seq} (records removed from the end, or the head was edited)"
        ));
    }
    Verification {
        records: records.len() as u64,
        head_seq,
        head_hash: head_hash.to_string(),
        problems,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(n: i64) -> Vec<AuditRecord> {
        let mut prev = GENESIS.to_string();
        (1..=n)
            .map(|seq| {
                let detail = format!("{{\"n\":{seq}}}");
                let hash = chain_hash(&prev, seq, 1000 + seq, "upload", Some("a"), &detail);
                let r = AuditRecord {
                    seq,
                    at_ms: 1000 + seq,
                    kind: "upload".into(),
                    tenant: Some("a".into()),
                    detail,
                    prev: prev.clone(),
                    hash: hash.clone(),
                };
                prev = hash;
                r
            })
            .collect()
    }

    #[test]
    fn long_strings_are_cut_and_the_record_says_so() {
        let path = format!("/v1/{}", "é".repeat(30_000));
        let d =
            bounded(serde_json::json!({"path": path, "method": "GET", "list": ["x".repeat(600)]}));
        assert!(d.to_string().len() < 4 * MAX_FIELD_BYTES, "{d}");
        assert!(d["path"].as_str().unwrap().len() <= MAX_FIELD_BYTES);
        assert!(path.starts_with(d["path"].as_str().unwrap()));
        assert_eq!(d["truncated"]["/path"], path.len());
        assert_eq!(d["truncated"]["/list/0"], 600);
        assert_eq!(d["method"], "GET");
        // Short details are left as they are.
        let short = serde_json::json!({"path": "/v1/usage"});
        assert_eq!(bounded(short.clone()), short);
    }

    #[test]
    fn an_intact_chain_verifies_and_each_tampering_is_named() {
        let c = chain(4);
        let head = c[3].hash.clone();
        assert!(check_chain(&c, 4, &head).ok());
        let mut edited = c.clone();
        edited[1].detail = "{\"n\":99}".into();
        assert!(check_chain(&edited, 4, &head).problems[0].contains("edited"));
        let mut removed = c.clone();
        removed.remove(1);
        assert!(!check_chain(&removed, 4, &head).ok());
        let truncated = &c[..3];
        let v = check_chain(truncated, 4, &head);
        assert!(v.problems.iter().any(|p| p.contains("head")), "{v:?}");
        let mut swapped = c.clone();
        swapped.swap(1, 2);
        assert!(!check_chain(&swapped, 4, &head).ok());
    }
}
