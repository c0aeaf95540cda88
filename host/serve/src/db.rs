//! The service's database: SQLite (embedded, WAL) or Postgres, through one
//! runtime query API (`sqlx::Any`; no compile-time checked macros, so no
//! database is needed to build). Queries use `$N` placeholders, which both
//! drivers accept; types are limited to what both decode alike (`BIGINT`,
//! `DOUBLE PRECISION`, `TEXT`, bytes), and sums of integers are cast back to
//! `BIGINT` (Postgres would answer `NUMERIC`).
//!
//! Writes go through [`Db::write`]: a transaction that takes the write lock
//! up front (`BEGIN IMMEDIATE` on SQLite, so a transaction that reads first
//! cannot fail to upgrade; ordinary `BEGIN` on Postgres, where row locks
//! and conditional updates do the serialising).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{Any, AnyPool, Transaction};

/// A database failure, with what was being done.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("database {what}: {source}")]
    /// A statement failed.
    Sql {
        /// What was being done.
        what: &'static str,
        /// The driver's error.
        source: sqlx::Error,
    },
    #[error("database URL `{0}`: expected sqlite:PATH or postgres://…")]
    /// A URL of neither backend.
    BadUrl(String),
    #[error("creating {path}: {source}")]
    /// The SQLite file's directory could not be created.
    Dir {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    #[error("the database holds a newer schema ({found}) than this host knows ({known})")]
    /// The database was written by a newer host.
    Schema {
        /// Its schema version.
        found: i64,
        /// This host's.
        known: i64,
    },
    #[error("corrupt row in {table}: {reason}")]
    /// A stored value does not parse.
    Corrupt {
        /// The table.
        table: &'static str,
        /// What is wrong.
        reason: String,
    },
}

/// Adds what was being done to a sqlx error.
pub trait SqlContext<T> {
    /// Name what was being done.
    fn ctx(self, what: &'static str) -> Result<T, DbError>;
}

impl<T> SqlContext<T> for Result<T, sqlx::Error> {
    fn ctx(self, what: &'static str) -> Result<T, DbError> {
        self.map_err(|source| DbError::Sql { what, source })
    }
}

/// Which database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// SQLite, embedded (one machine).
    Sqlite,
    /// Postgres (workers on several machines).
    Postgres,
}

/// The schema version this host writes.
const SCHEMA_VERSION: i64 = 1;

/// The tables. `{id}` and `{blob}` differ by backend.
const SCHEMA: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS tenants (
        id {id},
        name TEXT NOT NULL UNIQUE,
        token_hash TEXT NOT NULL UNIQUE,
        quotas TEXT NOT NULL,
        created_ms BIGINT NOT NULL,
        revoked_ms BIGINT)",
    // Component bytes, once per hash: workers on other machines fetch them
    // from here. Never answered to a tenant directly (ownership is
    // `harnesses`).
    "CREATE TABLE IF NOT EXISTS components (
        hash TEXT PRIMARY KEY,
        bytes {blob} NOT NULL,
        size BIGINT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS harnesses (
        tenant_id BIGINT NOT NULL,
        hash TEXT NOT NULL,
        size BIGINT NOT NULL,
        world TEXT NOT NULL,
        report TEXT NOT NULL,
        uploaded_ms BIGINT NOT NULL,
        PRIMARY KEY (tenant_id, hash))",
    "CREATE TABLE IF NOT EXISTS grants (
        owner_id BIGINT NOT NULL,
        hash TEXT NOT NULL,
        grantee_id BIGINT NOT NULL,
        created_ms BIGINT NOT NULL,
        PRIMARY KEY (owner_id, hash, grantee_id))",
    "CREATE TABLE IF NOT EXISTS evaluations (
        id TEXT PRIMARY KEY,
        tenant_id BIGINT NOT NULL,
        harness TEXT,
        request TEXT NOT NULL,
        job TEXT NOT NULL,
        config TEXT NOT NULL,
        state TEXT NOT NULL,
        total BIGINT NOT NULL,
        done_count BIGINT NOT NULL DEFAULT 0,
        created_ms BIGINT NOT NULL,
        finished_ms BIGINT,
        summary TEXT)",
    "CREATE INDEX IF NOT EXISTS evaluations_tenant ON evaluations (tenant_id, created_ms)",
    // One row per (evaluation, task, trial): the idempotent episode key.
    // `attempt` fences completions: only the holder of the current attempt
    // may finish it.
    "CREATE TABLE IF NOT EXISTS episodes (
        id {id},
        eval_id TEXT NOT NULL,
        tenant_id BIGINT NOT NULL,
        idx BIGINT NOT NULL,
        task_id TEXT NOT NULL,
        trial BIGINT NOT NULL,
        state TEXT NOT NULL,
        attempt BIGINT NOT NULL,
        worker TEXT,
        lease_ms BIGINT,
        finished_ms BIGINT,
        done_seq BIGINT,
        record TEXT,
        reward DOUBLE PRECISION,
        success BIGINT,
        end_reason TEXT,
        fuel BIGINT,
        usd DOUBLE PRECISION,
        UNIQUE (eval_id, task_id, trial))",
    "CREATE INDEX IF NOT EXISTS episodes_state ON episodes (state, tenant_id)",
    "CREATE INDEX IF NOT EXISTS episodes_eval ON episodes (eval_id, idx)",
    "CREATE INDEX IF NOT EXISTS episodes_done ON episodes (eval_id, done_seq)",
    // A claim's next episode of an evaluation, and "is anything still
    // open": index range reads, not scans of a 10,000-episode job.
    "CREATE INDEX IF NOT EXISTS episodes_queue ON episodes (eval_id, state, idx)",
    "CREATE INDEX IF NOT EXISTS evaluations_running ON evaluations (state, tenant_id)",
    // Today's use of the daily quotas, one row per tenant and UTC day,
    // updated in the transactions that admit evaluations and finish
    // episodes (a claim reads one row instead of summing the day).
    "CREATE TABLE IF NOT EXISTS daily_use (
        tenant_id BIGINT NOT NULL,
        day_ms BIGINT NOT NULL,
        episodes BIGINT NOT NULL,
        fuel BIGINT NOT NULL,
        usd DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (tenant_id, day_ms))",
    // Request-rate token buckets shared by every API server on one
    // Postgres database (`quota::take_shared`); unused on SQLite.
    "CREATE TABLE IF NOT EXISTS rate_buckets (
        tenant_id BIGINT PRIMARY KEY,
        tokens DOUBLE PRECISION NOT NULL,
        at_ms BIGINT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS tenant_claims (
        tenant_id BIGINT PRIMARY KEY,
        last_claim_ms BIGINT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS audit (
        seq BIGINT PRIMARY KEY,
        at_ms BIGINT NOT NULL,
        kind TEXT NOT NULL,
        tenant TEXT,
        detail TEXT NOT NULL,
        prev TEXT NOT NULL,
        hash TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS audit_head (id BIGINT PRIMARY KEY, seq BIGINT NOT NULL, hash TEXT NOT NULL)",
];

/// Compress episode records (tens of KB of JSON each, written once per
/// episode) with lz4 where the server has it: Postgres's default, pglz,
/// costs several times its CPU. Only new values are affected; set once, so
/// later starts take no table lock.
async fn fast_record_compression(w: &mut WriteTx) -> Result<(), DbError> {
    let (has_lz4, current): (bool, String) = sqlx::query_as(
        "SELECT EXISTS (SELECT 1 FROM pg_settings WHERE name = 'default_toast_compression'
                        AND 'lz4' = ANY (enumvals)),
                (SELECT CAST(attcompression AS TEXT) FROM pg_attribute
                 WHERE attrelid = CAST('episodes' AS regclass) AND attname = 'record')",
    )
    .fetch_one(w.conn())
    .await
    .ctx("record compression")?;
    if has_lz4 && current != "l" {
        sqlx::query("ALTER TABLE episodes ALTER COLUMN record SET COMPRESSION lz4")
            .execute(w.conn())
            .await
            .ctx("record compression")?;
    }
    Ok(())
}

/// The hash before the first audit record.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// An open database.
#[derive(Clone)]
pub struct Db {
    pool: AnyPool,
    backend: Backend,
    /// SQLite has one writer at a time; waiting here is cheaper than
    /// spinning on SQLITE_BUSY inside the driver.
    write_lock: Arc<tokio::sync::Mutex<()>>,
}

/// A write transaction (rolled back if dropped without [`WriteTx::commit`]).
pub struct WriteTx {
    tx: Transaction<'static, Any>,
    _guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl WriteTx {
    /// The connection to run statements on.
    pub fn conn(&mut self) -> &mut sqlx::AnyConnection {
        &mut self.tx
    }

    /// Commit the transaction.
    pub async fn commit(self) -> Result<(), DbError> {
        self.tx.commit().await.ctx("commit")
    }
}

impl Db {
    /// Open (creating, for SQLite) the database at `url` and bring its
    /// schema up to date.
    pub async fn open(url: &str) -> Result<Db, DbError> {
        sqlx::any::install_default_drivers();
        let (backend, connect_url) = if let Some(path) = url.strip_prefix("sqlite:") {
            let path = path.trim_start_matches("//");
            let path = PathBuf::from(path);
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|source| DbError::Dir {
                    path: dir.to_path_buf(),
                    source,
                })?;
            }
            let abs = std::path::absolute(&path).unwrap_or(path);
            (
                Backend::Sqlite,
                format!("sqlite://{}?mode=rwc", abs.display()),
            )
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            (Backend::Postgres, url.to_string())
        } else {
            return Err(DbError::BadUrl(url.to_string()));
        };
        let options: AnyConnectOptions = connect_url
            .parse()
            .map_err(|_| DbError::BadUrl(url.to_string()))?;
        let mut pool_options = AnyPoolOptions::new()
            .max_connections(if backend == Backend::Sqlite { 8 } else { 16 })
            .acquire_timeout(Duration::from_secs(60))
            // No ping before each use: on Postgres it is a round trip per
            // statement outside a transaction (a status poll makes four).
            // A connection that broke while idle fails its statement
            // instead, which every caller already reports or retries, and
            // the pool then drops it.
            .test_before_acquire(false);
        if backend == Backend::Sqlite {
            pool_options = pool_options.after_connect(|conn, _| {
                Box::pin(async move {
                    // Writers wait for each other instead of failing;
                    // foreign processes (`tenant add`, a second worker)
                    // share the file safely.
                    sqlx::query("PRAGMA busy_timeout = 60000")
                        .execute(&mut *conn)
                        .await?;
                    // In WAL mode, NORMAL loses no committed transaction
                    // when a process dies (kill -9: the WAL is in the OS's
                    // page cache); only a power cut may lose the last
                    // commits. FULL would fsync every claim and completion.
                    sqlx::query("PRAGMA synchronous = NORMAL")
                        .execute(&mut *conn)
                        .await?;
                    Ok(())
                })
            });
        }
        let pool = pool_options.connect_with(options).await.ctx("connect")?;
        let db = Db {
            pool,
            backend,
            write_lock: Arc::new(tokio::sync::Mutex::new(())),
        };
        if backend == Backend::Sqlite {
            // Persistent: readers never block the writer and vice versa.
            sqlx::query("PRAGMA journal_mode = WAL")
                .execute(&db.pool)
                .await
                .ctx("WAL mode")?;
        }
        db.migrate().await?;
        Ok(db)
    }

    async fn migrate(&self) -> Result<(), DbError> {
        let (id, blob) = match self.backend {
            Backend::Sqlite => ("INTEGER PRIMARY KEY AUTOINCREMENT", "BLOB"),
            Backend::Postgres => ("BIGSERIAL PRIMARY KEY", "BYTEA"),
        };
        let mut w = self.write().await?;
        if self.backend == Backend::Postgres {
            // Two processes creating the schema at once would race.
            sqlx::query("SELECT pg_advisory_xact_lock(727272)")
                .execute(w.conn())
                .await
                .ctx("schema lock")?;
        }
        for stmt in SCHEMA {
            let sql = stmt.replace("{id}", id).replace("{blob}", blob);
            sqlx::query(&sql)
                .execute(w.conn())
                .await
                .ctx("create schema")?;
        }
        let found: Option<String> =
            sqlx::query_scalar("SELECT value FROM meta WHERE key = 'schema'")
                .fetch_optional(w.conn())
                .await
                .ctx("read schema version")?;
        match found.and_then(|v| v.parse::<i64>().ok()) {
            Some(v) if v > SCHEMA_VERSION => {
                return Err(DbError::Schema {
                    found: v,
                    known: SCHEMA_VERSION,
                });
            }
            Some(_) => {}
            None => {
                sqlx::query("INSERT INTO meta (key, value) VALUES ('schema', $1)")
                    .bind(SCHEMA_VERSION.to_string())
                    .execute(w.conn())
                    .await
                    .ctx("write schema version")?;
            }
        }
        sqlx::query(
            "INSERT INTO audit_head (id, seq, hash) VALUES (1, 0, $1) ON CONFLICT (id) DO NOTHING",
        )
        .bind(GENESIS)
        .execute(w.conn())
        .await
        .ctx("audit head")?;
        if self.backend == Backend::Postgres {
            fast_record_compression(&mut w).await?;
        }
        w.commit().await
    }

    /// Which database this is.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The pool, for reads.
    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// Begin a write transaction.
    pub async fn write(&self) -> Result<WriteTx, DbError> {
        match self.backend {
            Backend::Sqlite => {
                let guard = self.write_lock.clone().lock_owned().await;
                let tx = self.pool.begin_with("BEGIN IMMEDIATE").await.ctx("begin")?;
                Ok(WriteTx {
                    tx,
                    _guard: Some(guard),
                })
            }
            Backend::Postgres => Ok(WriteTx {
                tx: self.pool.begin().await.ctx("begin")?,
                _guard: None,
            }),
        }
    }

    /// Close the pool (tests reopen the same file).
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The start of the UTC day holding `ms`.
pub fn day_start(ms: i64) -> i64 {
    ms.div_euclid(86_400_000) * 86_400_000
}

/// RFC 3339 UTC for a millisecond timestamp.
pub fn rfc3339(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = ecdysis_sys::date::civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms.rem_euclid(1000)
    )
}

/// Random bytes from the kernel, as hex.
pub fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    let mut filled = 0;
    while filled < bytes {
        match rustix::rand::getrandom(&mut buf[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => filled += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => panic!("the kernel's random source failed: {e}"),
        }
    }
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_render_as_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(day_start(86_400_000 + 5), 86_400_000);
    }

    #[test]
    fn random_ids_differ() {
        assert_ne!(random_hex(16), random_hex(16));
        assert_eq!(random_hex(16).len(), 32);
    }
}
