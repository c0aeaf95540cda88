//! The MySQL side of DBBench: a process-wide SQL service and one private
//! schema per episode.
//!
//! **Why a sync facade over a dedicated runtime.** The [`Environment`]
//! trait is synchronous (`call(&mut self, ..) -> ToolOutput`), and it is
//! called both from the async agent loop and from the harness's read-only
//! view on a blocking thread. A MySQL client is async. Making the trait
//! async would ripple through τ², the loop, the sandbox's env view and the
//! CLI for one domain's sake; instead the client runs on its own thread
//! with its own current-thread Tokio runtime, and callers hand it futures
//! and wait on a std channel ([`SqlService::run`]). That works from any
//! thread, inside or outside another runtime, never nests runtimes, and
//! keeps each episode's connection owned by exactly one future at a time
//! (it is moved into the job and back). The private server is started on
//! that same thread, so its parent-death signal fires only when the
//! service is gone.
//!
//! [`Environment`]: ecdysis_env::Environment

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts, OptsBuilder, Pool};
use tokio::sync::Notify;

use super::checker;
use super::error::DbError;
use super::mysql8;
use super::render::{self, Kind, Printer};
use super::server::PrivateServer;

/// The text the original shows when a statement runs too long.
pub const TIMEOUT_TEXT: &str = "Error: SQL execution timed out.";

/// Default per-statement time limit (the original waits 60 s).
pub const DEFAULT_STATEMENT_TIMEOUT: Duration = Duration::from_secs(20);

/// After the printed result is past the cut, how long the rest of a
/// result may drain before the statement is killed.
const CAP_GRACE: Duration = Duration::from_millis(250);

/// After `KILL QUERY`, how long before the connection itself is killed.
const KILL_GRACE: Duration = Duration::from_secs(5);

/// Server error codes of a statement time limit (MariaDB
/// `max_statement_time`, MySQL `max_execution_time`).
const TIMEOUT_CODES: &[u16] = &[1969, 3024];

/// How to reach a server.
#[derive(Clone, Debug)]
pub enum Target {
    /// Start a private server with its directory under this folder.
    Private(PathBuf),
    /// An existing server (`--mysql-url`).
    Url(String),
}

/// Limits of episode sessions.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Per-statement time limit (server-side, with a client-side watchdog
    /// that kills the statement shortly after).
    pub statement_timeout: Duration,
    /// The sessions' `sql_mode` (default: MySQL 8's).
    pub sql_mode: mysql8::SqlMode,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            statement_timeout: DEFAULT_STATEMENT_TIMEOUT,
            sql_mode: mysql8::SqlMode::default(),
        }
    }
}

/// A running SQL service: the worker thread, its runtime and an admin pool.
pub struct SqlService {
    handle: tokio::runtime::Handle,
    shutdown: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    admin: Pool,
    /// Options for episode connections (the server part; user and schema
    /// are set per episode).
    base: OptsBuilder,
    mariadb: bool,
    collation: String,
    /// `localhost` for the private server's socket, `%` for a remote one.
    user_host: String,
    describe: String,
    counter: AtomicU64,
    /// Schema names this process's open episodes use.
    names: Mutex<std::collections::HashSet<String>>,
    limits: Limits,
}

impl std::fmt::Debug for SqlService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlService")
            .field("server", &self.describe)
            .finish_non_exhaustive()
    }
}

/// The one private service of this process, while anyone holds it.
static PRIVATE: Mutex<Weak<SqlService>> = Mutex::new(Weak::new());

struct Ready {
    admin: Pool,
    base: OptsBuilder,
    mariadb: bool,
    collation: String,
    user_host: String,
    describe: String,
}

fn mask(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &url[s + 3..at];
            match creds.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..s + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

impl SqlService {
    /// Reserve a schema name for an episode of this process (false: one of
    /// its episodes has it).
    fn claim_name(&self, name: &str) -> bool {
        self.names
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string())
    }

    /// Give a schema name back.
    fn release_name(&self, name: &str) {
        self.names
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
    }

    /// The process's private server, started on first use and shared by
    /// every caller until the last handle is dropped.
    pub fn private(root: &Path, limits: Limits) -> Result<Arc<SqlService>, DbError> {
        let mut slot = PRIVATE.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = slot.upgrade() {
            return Ok(s);
        }
        let s = Arc::new(Self::start(Target::Private(root.to_path_buf()), limits)?);
        *slot = Arc::downgrade(&s);
        Ok(s)
    }

    /// A service for `target` (a new private server, or an existing one).
    pub fn start(target: Target, limits: Limits) -> Result<SqlService, DbError> {
        let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel(1);
        let (shutdown_tx, shutdown_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("dbbench-sql".into())
            .spawn(move || worker(target, ready_tx, shutdown_rx))
            .map_err(|e| DbError::Start(format!("spawning the SQL worker thread: {e}")))?;
        let (handle, ready) = match ready_rx.recv() {
            Ok(Ok(pair)) => pair,
            Ok(Err(e)) => {
                let _ = thread.join();
                return Err(e);
            }
            Err(_) => {
                let _ = thread.join();
                return Err(DbError::WorkerGone);
            }
        };
        Ok(SqlService {
            handle,
            shutdown: Mutex::new(Some(shutdown_tx)),
            thread: Mutex::new(Some(thread)),
            admin: ready.admin,
            base: ready.base,
            mariadb: ready.mariadb,
            collation: ready.collation,
            user_host: ready.user_host,
            describe: ready.describe,
            counter: AtomicU64::new(0),
            names: Mutex::new(Default::default()),
            limits,
        })
    }

    /// Runs `fut` on the SQL runtime and waits for its output. Callable
    /// from any thread (see the module docs).
    pub fn run<F, T>(&self, fut: F) -> Result<T, DbError>
    where
        F: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.handle.spawn(async move {
            let _ = tx.send(fut.await);
        });
        rx.recv().map_err(|_| DbError::WorkerGone)
    }

    /// Which server this is, for messages.
    pub fn describe(&self) -> &str {
        &self.describe
    }

    /// The collation sessions and schemas use.
    pub fn collation(&self) -> &str {
        &self.collation
    }

    /// The limits of episode sessions.
    pub fn limits(&self) -> Limits {
        self.limits
    }
}

impl Drop for SqlService {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.lock().ok().and_then(|mut s| s.take()) {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.lock().ok().and_then(|mut t| t.take()) {
            let _ = t.join();
        }
    }
}

type ReadyMsg = Result<(tokio::runtime::Handle, Ready), DbError>;

/// The worker thread: runtime, (private server), admin pool, then wait for
/// the shutdown signal.
fn worker(
    target: Target,
    ready: std::sync::mpsc::SyncSender<ReadyMsg>,
    shutdown: tokio::sync::oneshot::Receiver<()>,
) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let _ = ready.send(Err(DbError::Start(format!("SQL runtime: {e}"))));
            return;
        }
    };
    // Started on this thread: the kernel stops it when the thread ends.
    let (server, base, describe, user_host) = match &target {
        Target::Private(root) => match PrivateServer::start(root) {
            Ok(server) => {
                let base = OptsBuilder::default()
                    .socket(Some(server.socket().display().to_string()))
                    .user(Some("root"))
                    .prefer_socket(true);
                let describe = format!(
                    "private {} ({})",
                    server.version(),
                    server.socket().display()
                );
                (Some(server), base, describe, "localhost".to_string())
            }
            Err(e) => {
                let _ = ready.send(Err(e));
                return;
            }
        },
        Target::Url(url) => match Opts::from_url(url) {
            Ok(opts) => (
                None,
                OptsBuilder::from_opts(opts),
                mask(url),
                "%".to_string(),
            ),
            Err(e) => {
                let _ = ready.send(Err(DbError::BadUrl {
                    url: mask(url),
                    reason: e.to_string(),
                }));
                return;
            }
        },
    };
    let probed = rt.block_on(probe(base.clone(), describe.clone()));
    let admin = match probed {
        Ok((admin, mariadb, collation)) => {
            let r = Ready {
                admin: admin.clone(),
                base,
                mariadb,
                collation,
                user_host,
                describe,
            };
            if ready.send(Ok((rt.handle().clone(), r))).is_err() {
                return;
            }
            admin
        }
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    rt.block_on(async move {
        let _ = shutdown.await;
        let _ = admin.disconnect().await;
    });
    drop(rt);
    drop(server);
}

/// Connects the admin pool and picks the flavour and collation.
async fn probe(base: OptsBuilder, describe: String) -> Result<(Pool, bool, String), DbError> {
    let server_err = |reason: String| DbError::Server {
        server: describe.clone(),
        reason,
    };
    let admin = Pool::new(base);
    let mut conn = admin
        .get_conn()
        .await
        .map_err(|e| server_err(format!("connecting: {e}")))?;
    let version: Option<String> = conn
        .query_first("SELECT VERSION()")
        .await
        .map_err(|e| server_err(e.to_string()))?;
    let mariadb = version.as_deref().unwrap_or("").contains("MariaDB");
    let mut collation = None;
    for c in mysql8::COLLATIONS {
        if conn
            .query_drop(format!("SET NAMES utf8mb4 COLLATE {c}"))
            .await
            .is_ok()
        {
            collation = Some(c.to_string());
            break;
        }
    }
    drop(conn);
    let collation = collation.ok_or_else(|| {
        server_err(format!(
            "none of the collations {} is available",
            mysql8::COLLATIONS.join(", ")
        ))
    })?;
    Ok((admin, mariadb, collation))
}

/// One table as the original creates it.
#[derive(Clone, Debug)]
pub struct TableSpec {
    /// The table's name, as given in the task.
    pub name: String,
    /// Column names, in order; every column is created as `TEXT`.
    pub columns: Vec<String>,
    /// Cells already as the text the original inserts (`str(cell)`).
    pub rows: Vec<Vec<String>>,
}

/// What `execute_sql` returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Executed {
    /// The text the agent reads.
    pub printed: String,
    /// The statement failed (server error, time limit, client error).
    pub error: bool,
}

fn ident(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

/// A string literal the way the original's client escapes parameters.
fn literal(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('\'');
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\0' => out.push_str("\\0"),
            '\u{1a}' => out.push_str("\\Z"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// The original's `_build_init_sql`: every column `TEXT`, one multi-row
/// INSERT per table.
pub fn init_statements(tables: &[TableSpec]) -> Vec<String> {
    let mut out = Vec::new();
    for t in tables {
        let cols: Vec<String> = t
            .columns
            .iter()
            .map(|c| format!("{} TEXT", ident(c)))
            .collect();
        out.push(format!(
            "CREATE TABLE IF NOT EXISTS {} ({})",
            ident(&t.name),
            cols.join(",")
        ));
        if t.rows.is_empty() {
            continue;
        }
        let names: Vec<String> = t.columns.iter().map(|c| ident(c)).collect();
        let rows: Vec<String> = t
            .rows
            .iter()
            .map(|r| {
                format!(
                    "({})",
                    r.iter().map(|c| literal(c)).collect::<Vec<_>>().join(",")
                )
            })
            .collect();
        out.push(format!(
            "INSERT INTO {} ({}) VALUES {}",
            ident(&t.name),
            names.join(","),
            rows.join(",")
        ));
    }
    out
}

/// The original's table-hash query.
pub fn hash_statement(table: &TableSpec) -> String {
    let cols: Vec<String> = table.columns.iter().map(|c| ident(c)).collect();
    format!(
        "select md5(group_concat(rowhash order by rowhash)) as hash from( SELECT substring(MD5(CONCAT_WS(',', {})), 1, 5) AS rowhash FROM {}) as sub;",
        cols.join(","),
        ident(&table.name)
    )
}

/// One episode's private schema, user and connection.
pub struct EpisodeDb {
    service: Arc<SqlService>,
    schema: String,
    user: String,
    password: String,
    conn: Mutex<Option<Conn>>,
    /// The opening domain's limits: the private server is shared by every
    /// domain of the process, so session settings belong to the episode,
    /// not to the server.
    limits: Limits,
    /// The schema and user are this episode's (created by it): dropped
    /// with it. False for a name found taken on the server.
    owned: bool,
}

impl std::fmt::Debug for EpisodeDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EpisodeDb")
            .field("schema", &self.schema)
            .finish_non_exhaustive()
    }
}

fn server_error(service: &SqlService, reason: impl std::fmt::Display) -> DbError {
    DbError::Server {
        server: service.describe.clone(),
        reason: reason.to_string(),
    }
}

/// The session settings of an episode connection.
fn session_setup(service: &SqlService, limits: Limits) -> Vec<String> {
    let secs = limits.statement_timeout.as_secs_f64();
    let mut s = vec![
        format!("SET NAMES utf8mb4 COLLATE {}", service.collation),
        format!(
            "SET SESSION sql_mode = '{}'",
            mysql8::sql_mode_value(limits.sql_mode)
        ),
        format!(
            "SET SESSION group_concat_max_len = {}",
            mysql8::GROUP_CONCAT_MAX_LEN
        ),
        // mysql-connector's default: each statement is committed (or
        // rolled back) explicitly by the caller.
        "SET SESSION autocommit = 0".to_string(),
    ];
    if service.mariadb {
        s.push(format!("SET SESSION max_statement_time = {secs}"));
    } else {
        s.push(format!(
            "SET SESSION max_execution_time = {}",
            (secs * 1000.0) as u64
        ));
    }
    s
}

impl EpisodeDb {
    /// Creates the schema and its user, connects, and loads `tables`.
    pub fn open(
        service: Arc<SqlService>,
        task_id: &str,
        tables: &[TableSpec],
        limits: Limits,
    ) -> Result<EpisodeDb, DbError> {
        let n = service.counter.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let password =
            blake3::hash(format!("{pid}/{n}/{:?}", std::time::SystemTime::now()).as_bytes())
                .to_hex()[..24]
                .to_string();
        // The schema's name shows in some error texts the agent reads, so it
        // is a function of the task: the same episode reads the same text in
        // every run (and its replies replay from the response cache). A name
        // in use in this process, or left on a shared server, gets a suffix.
        let base = format!(
            "ecdysis_dbb_{}",
            &blake3::hash(task_id.as_bytes()).to_hex()[..16]
        );
        let mut k = 1u32;
        let db = loop {
            let name = if k == 1 {
                base.clone()
            } else {
                format!("{base}_{k}")
            };
            k += 1;
            if !service.claim_name(&name) {
                continue;
            }
            let mut db = EpisodeDb {
                service: service.clone(),
                schema: name.clone(),
                user: name,
                password: password.clone(),
                conn: Mutex::new(None),
                limits,
                // Dropped on any failure below but a name taken elsewhere.
                owned: true,
            };
            let admin = service.admin.clone();
            let create = db.create_statements();
            let s2 = service.clone();
            let created = service.run(async move {
                let mut c = admin.get_conn().await.map_err(|e| server_error(&s2, e))?;
                for (i, stmt) in create.iter().enumerate() {
                    if let Err(e) = c.query_drop(stmt).await {
                        // 1007: the database exists (another process's).
                        let exists =
                            matches!(&e, mysql_async::Error::Server(se) if se.code == 1007);
                        if exists && i == 0 {
                            return Ok(false);
                        }
                        return Err(server_error(&s2, format!("{stmt}: {e}")));
                    }
                }
                Ok::<bool, DbError>(true)
            })??;
            if created {
                break db;
            }
            // Taken on the server (another process): not ours to drop.
            db.owned = false;
            drop(db);
            if k > 64 {
                return Err(server_error(
                    &service,
                    format!("no free schema name for task {task_id} after 64 tries"),
                ));
            }
        };
        let conn = db.connect()?;
        let init = init_statements(tables);
        let s3 = service.clone();
        let conn = service.run(async move {
            let mut conn = conn;
            for stmt in &init {
                match conn.query_drop(stmt).await {
                    Ok(()) => {}
                    // The server refused the task's own statement (e.g. an
                    // empty column name): a property of the task.
                    Err(e @ mysql_async::Error::Server(_)) => {
                        let _ = conn.disconnect().await;
                        return Err(DbError::TaskSetup(error_text(&e)));
                    }
                    Err(e) => {
                        return Err(server_error(&s3, format!("loading the task's table: {e}")));
                    }
                }
            }
            conn.query_drop("COMMIT")
                .await
                .map_err(|e| server_error(&s3, e))?;
            Ok(conn)
        })??;
        *db.conn.lock().unwrap_or_else(|p| p.into_inner()) = Some(conn);
        Ok(db)
    }

    fn create_statements(&self) -> Vec<String> {
        let s = &self.service;
        let account = format!("'{}'@'{}'", self.user, s.user_host);
        let limits = if s.mariadb {
            format!(
                " WITH MAX_USER_CONNECTIONS 4 MAX_STATEMENT_TIME {}",
                self.limits.statement_timeout.as_secs_f64()
            )
        } else {
            " WITH MAX_USER_CONNECTIONS 4".to_string()
        };
        vec![
            format!(
                "CREATE DATABASE {} CHARACTER SET utf8mb4 COLLATE {}",
                ident(&self.schema),
                s.collation
            ),
            format!(
                "CREATE USER {account} IDENTIFIED BY '{}'{limits}",
                self.password
            ),
            format!(
                "GRANT ALL PRIVILEGES ON {}.* TO {account}",
                ident(&self.schema)
            ),
        ]
    }

    /// A fresh session of the episode user on its schema.
    fn connect(&self) -> Result<Conn, DbError> {
        let opts = self
            .service
            .base
            .clone()
            .user(Some(self.user.clone()))
            .pass(Some(self.password.clone()))
            .db_name(Some(self.schema.clone()))
            .init(session_setup(&self.service, self.limits));
        let s = self.service.clone();
        self.service.run(async move {
            Conn::new(opts)
                .await
                .map_err(|e| server_error(&s, format!("connecting as the episode user: {e}")))
        })?
    }

    /// The schema's name (it appears in some error messages).
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// Runs one statement as the original's `execute` does.
    pub fn execute(&self, sql: &str) -> Executed {
        let mut slot = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let conn = match slot.take() {
            Some(c) => c,
            // A connection lost earlier (killed, server restart): reconnect.
            None => match self.connect() {
                Ok(c) => c,
                Err(e) => {
                    return Executed {
                        printed: format!("Error executing query: {e}"),
                        error: true,
                    };
                }
            },
        };
        let admin = self.service.admin.clone();
        let timeout = self.limits.statement_timeout;
        let sql = sql.to_string();
        match self
            .service
            .run(async move { execute(conn, sql, admin, timeout).await })
        {
            Ok((conn, out)) => {
                *slot = conn;
                out
            }
            Err(e) => Executed {
                printed: format!("Error executing query: {e}"),
                error: true,
            },
        }
    }

    /// The original's table hash after the episode: one hash query per
    /// table through [`EpisodeDb::execute`], extracted and combined.
    pub fn tables_hash(&self, tables: &[TableSpec]) -> String {
        let hashes = tables
            .iter()
            .map(|t| checker::extract_hash(&self.execute(&hash_statement(t)).printed))
            .collect();
        checker::combine_hashes(hashes)
    }
}

impl Drop for EpisodeDb {
    fn drop(&mut self) {
        if !self.owned {
            self.service.release_name(&self.schema);
            return;
        }
        let conn = self.conn.lock().ok().and_then(|mut c| c.take());
        let admin = self.service.admin.clone();
        let drops = vec![
            format!("DROP DATABASE IF EXISTS {}", ident(&self.schema)),
            format!(
                "DROP USER IF EXISTS '{}'@'{}'",
                self.user, self.service.user_host
            ),
        ];
        // Bounded: a dead server must not hang the caller.
        let _ = self.service.run(async move {
            let work = async move {
                if let Some(c) = conn {
                    let _ = c.disconnect().await;
                }
                if let Ok(mut a) = admin.get_conn().await {
                    for d in drops {
                        let _ = a.query_drop(d).await;
                    }
                }
            };
            let _ = tokio::time::timeout(Duration::from_secs(10), work).await;
        });
        // Only now: another episode of the same task (a concurrent trial)
        // may take the name as soon as it is free, and its CREATE USER
        // fails while this episode's user still exists.
        self.service.release_name(&self.schema);
    }
}

/// Why the watchdog killed a statement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Killed {
    Timeout,
    Capped,
}

async fn kill(admin: &Pool, what: &str, id: u32) {
    if let Ok(mut a) = admin.get_conn().await {
        let _ = a.query_drop(format!("KILL {what} {id}")).await;
    }
}

/// The statement's rows printed (up to the cut), or its error.
struct Work {
    printed: Option<String>,
    error: Option<mysql_async::Error>,
}

async fn read_result(conn: &mut Conn, sql: &str, capped: &Notify) -> Work {
    let mut result = match conn.query_iter(sql).await {
        Ok(r) => r,
        Err(e) => {
            return Work {
                printed: None,
                error: Some(e),
            };
        }
    };
    let mut printer = Printer::new();
    let columns = result.columns();
    if let Some(cols) = columns.filter(|c| !c.is_empty()) {
        let kinds: Vec<Kind> = cols
            .iter()
            .map(|c| Kind::of(c.column_type(), c.character_set(), c.flags()))
            .collect();
        loop {
            match result.next().await {
                Ok(Some(row)) => {
                    let values = kinds
                        .iter()
                        .enumerate()
                        .map(|(i, k)| match row.as_ref(i) {
                            Some(mysql_async::Value::Bytes(b)) => k.convert(Some(b)),
                            Some(mysql_async::Value::NULL) | None => k.convert(None),
                            Some(other) => {
                                let text = other.as_sql(true);
                                k.convert(Some(text.as_bytes()))
                            }
                        })
                        .collect();
                    if !printer.push_row(values) {
                        capped.notify_one();
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    return Work {
                        printed: None,
                        error: Some(e),
                    };
                }
            }
        }
    }
    let printed = printer.finish();
    // Later result sets (multi-statement calls) and the rest of a capped
    // one are read and dropped.
    let error = result.drop_result().await.err();
    Work {
        printed: Some(printed),
        error,
    }
}

fn error_text(e: &mysql_async::Error) -> String {
    match e {
        mysql_async::Error::Server(s) => format!("{} ({}): {}", s.code, s.state, s.message),
        other => format!("Error executing query: {other}"),
    }
}

fn is_timeout(e: &mysql_async::Error) -> bool {
    matches!(e, mysql_async::Error::Server(s) if TIMEOUT_CODES.contains(&s.code))
}

/// One statement with the watchdog; returns the connection (if still
/// usable) and what the agent reads.
async fn execute(
    mut conn: Conn,
    sql: String,
    admin: Pool,
    timeout: Duration,
) -> (Option<Conn>, Executed) {
    // mysql-connector returns without a round trip for an empty string.
    if sql.is_empty() {
        return (
            Some(conn),
            Executed {
                printed: "[]".into(),
                error: false,
            },
        );
    }
    let id = conn.id();
    let capped = Notify::new();
    let mut killed = None;
    let mut conn_killed = false;
    let work = {
        let work = read_result(&mut conn, &sql, &capped);
        tokio::pin!(work);
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let first = tokio::select! {
            w = &mut work => Some(w),
            _ = &mut deadline => { killed = Some(Killed::Timeout); None }
            _ = capped.notified() => {
                tokio::select! {
                    w = &mut work => Some(w),
                    _ = tokio::time::sleep(CAP_GRACE) => { killed = Some(Killed::Capped); None }
                }
            }
        };
        match first {
            Some(w) => w,
            None => {
                kill(&admin, "QUERY", id).await;
                match tokio::time::timeout(KILL_GRACE, &mut work).await {
                    Ok(w) => w,
                    Err(_) => {
                        kill(&admin, "CONNECTION", id).await;
                        conn_killed = true;
                        work.await
                    }
                }
            }
        }
    };
    // Once the first result set is printed, what follows (the rest of a
    // capped result, later statements of a multi-statement call) cannot
    // change what the original shows.
    let (out, ok) = match (killed, work) {
        (Some(Killed::Timeout), _) => (TIMEOUT_TEXT.to_string(), false),
        (
            _,
            Work {
                printed: Some(p), ..
            },
        ) => (p, true),
        (_, Work { error: Some(e), .. }) if is_timeout(&e) => (TIMEOUT_TEXT.to_string(), false),
        (_, Work { error: Some(e), .. }) => (render::truncate(&error_text(&e)), false),
        (
            _,
            Work {
                printed: None,
                error: None,
            },
        ) => ("[]".into(), true),
    };
    if conn_killed {
        return (
            None,
            Executed {
                printed: out,
                error: !ok,
            },
        );
    }
    let end = if ok { "COMMIT" } else { "ROLLBACK" };
    let conn = match conn.query_drop(end).await {
        Ok(()) => Some(conn),
        // The connection is gone: the next call reconnects.
        Err(_) => None,
    };
    (
        conn,
        Executed {
            printed: out,
            error: !ok,
        },
    )
}
