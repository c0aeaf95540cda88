//! `ecdysis-host serve`: the multi-tenant evaluation service. Tenants
//! upload harness components and evaluate them on the benchmark domains,
//! isolated (every episode in a worker process under memory and CPU
//! limits, [`ecdysis_runner::isolate`]), metered (quotas), and audited (a
//! hash-chained log), over HTTP + JSON (the OpenAPI document is served at
//! `/v1/openapi.json`).
//!
//! - [`config`]: `serve.toml` (model aliases, limits, quotas, workers).
//! - [`db`]: SQLite (embedded, WAL) or Postgres through `sqlx`'s runtime
//!   API; the schema.
//! - [`tenants`]: tenants and hashed tokens (`tenant add|list|set-quota|revoke`).
//! - [`audit`]: the hash-chained audit log (`audit verify`).
//! - [`quota`]: quota values, refusals, the request-rate bucket.
//! - [`harnesses`]: uploads, ownership, grants, the shared component bytes;
//!   [`staging`]: uploads under check, removed however their request ends;
//!   [`confined`]: the state directory, which no name or planted symlink
//!   leaves.
//! - [`evaluations`]: requests, admission, status, results, result
//!   directories and reports.
//! - [`scheduler`]: the episode queue: fair claims, leases, exactly-once
//!   completion, cancellation.
//! - [`worker`]: the claim → run → record loop (in `serve`, and
//!   `ecdysis-host worker` on other machines).
//! - [`api`]: the HTTP routes, authentication, errors, hardening;
//!   [`openapi`]: the API's description; [`listen`]: connections (header
//!   timeout, connection caps); [`events`]: the event streams' poller;
//!   [`reports`]: rendered reports, cached by evaluation version.
//!
//! TLS is left to a reverse proxy in front (nginx, Caddy, a cloud load
//! balancer): the service speaks plain HTTP/1.1 and by default listens on
//! loopback only.
//!
//! It is the top library: it uses the registry, the runner, the sandbox,
//! the model and the report; only the CLI uses it.

pub mod api;
pub mod audit;
pub mod config;
pub mod confined;
pub mod db;
pub mod domains;
pub mod evaluations;
pub mod events;
pub mod harnesses;
pub mod listen;
pub mod openapi;
pub mod quota;
pub mod reports;
pub mod scheduler;
pub mod staging;
pub mod tenants;
pub mod worker;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use config::ServeConfig;
pub use db::Db;

use domains::Domains;
use ecdysis_runner::isolate::{DomainSource, PoolConfig, WorkerLimits, WorkerPool};
use ecdysis_sandbox::store::ComponentStore;
use quota::RateLimiter;

/// A service that cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    /// `serve.toml` is wrong.
    Config(#[from] config::ConfigError),
    #[error(transparent)]
    /// The database failed.
    Db(#[from] db::DbError),
    #[error("listening on {addr}: {source}")]
    /// The address cannot be listened on.
    Listen {
        /// The address.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    #[error("{0}")]
    /// A file or directory of the state cannot be used.
    Io(String),
    /// Something the configuration names cannot be used (a domain whose
    /// data or database server is missing, a model alias whose key
    /// variable is unset): refused at start, not per request.
    #[error("the configuration cannot be served:\n{}", .0.join("\n"))]
    Preflight(Vec<String>),
}

/// What a configuration needs besides its own fields, checked before the
/// service starts: every domain opens (its data and, for DBBench, its
/// database server), every endpoint alias has its key. Returns one line
/// per check that passed; every failure together in the error.
pub async fn preflight(config: &ServeConfig) -> Result<Vec<String>, ServeError> {
    let mut ok = Vec::new();
    let mut bad = Vec::new();
    let domains = Domains::new(Service::source(config));
    for name in &config.domains {
        // Opening an episode's environment reaches what the domain needs
        // at run time (DBBench's database server), not only its data.
        let checked = match domains.get(name).await {
            Ok(d) => tokio::task::spawn_blocking(move || {
                let tasks = d.tasks(None)?;
                if let Some(first) = tasks.first() {
                    d.new_env_for(first)?;
                }
                Ok::<usize, ecdysis_env::EnvError>(tasks.len())
            })
            .await
            .map_err(|e| e.to_string())
            .and_then(|r| r.map_err(|e| e.to_string())),
            Err(e) => Err(e.to_string()),
        };
        match checked {
            Ok(n) => ok.push(format!("domain {name}: {n} tasks, an episode opens")),
            Err(e) => bad.push(format!("domain {name}: {e}")),
        }
    }
    for (alias, m) in &config.models {
        if m.is_simulated() {
            ok.push(format!("model {alias}: {} (simulated)", m.model));
            continue;
        }
        match m.api_key_env.as_deref().filter(|v| !v.is_empty()) {
            Some(var) if std::env::var_os(var).is_none() => bad.push(format!(
                "model {alias}: its key variable ${var} is not set in this process (workers read it from here)"
            )),
            _ => ok.push(format!(
                "model {alias}: {} at {}",
                m.model,
                m.base_url.as_deref().unwrap_or("?")
            )),
        }
    }
    if bad.is_empty() {
        Ok(ok)
    } else {
        Err(ServeError::Preflight(bad))
    }
}

/// How this process starts worker processes (the binary and the argument
/// that makes it a worker).
#[derive(Debug, Clone)]
pub struct WorkerProgram {
    /// The binary.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
}

impl WorkerProgram {
    /// This binary's `episode-worker`.
    pub fn this_binary() -> std::io::Result<WorkerProgram> {
        let c = PoolConfig::this_binary(1, WorkerLimits::default())?;
        Ok(WorkerProgram {
            program: c.program,
            args: c.args,
            env: Vec::new(),
        })
    }

    /// Worker processes with a scrubbed environment: the allow-list
    /// ([`WORKER_ENV_ALLOW`]), the key variables in `keys`, and this
    /// program's own `env`; nothing else of the server's.
    fn pool(&self, workers: usize, limits: WorkerLimits, keys: &[String]) -> Arc<WorkerPool> {
        let mut env = worker_env(keys, |name| std::env::var(name).ok());
        env.extend(self.env.iter().cloned());
        WorkerPool::start(PoolConfig {
            program: self.program.clone(),
            args: self.args.clone(),
            env,
            clear_env: true,
            workers,
            limits,
        })
    }
}

/// What a worker process reads from its environment besides model keys:
/// the executable search path and home (the dbbench server's binaries, the
/// precompiled-artifact key under `~/.config`), the temporary directory,
/// locale and time zone, log and backtrace settings, the artifact key file,
/// the τ² data directory, and the test-fault hook (read only by builds
/// with the `testing` feature). Everything else the server was started
/// with — database passwords, cloud credentials, keys no alias names —
/// never reaches a worker, where an untrusted harness runs.
pub const WORKER_ENV_ALLOW: &[&str] = &[
    "PATH",
    "HOME",
    "TMPDIR",
    "LANG",
    "LC_ALL",
    "TZ",
    "RUST_LOG",
    "RUST_BACKTRACE",
    ecdysis_sandbox::store::artifact::KEY_FILE_ENV,
    ecdysis_tau2::data::DATA_ENV_VAR,
    ecdysis_runner::isolate::TEST_FAULT_ENV,
];

/// The key variables the model aliases name (`api_key_env`): the only
/// secrets episode workers receive.
pub fn alias_key_vars(config: &ServeConfig) -> Vec<String> {
    let mut vars: Vec<String> = config
        .models
        .values()
        .filter_map(|a| a.api_key_env.clone())
        .filter(|v| !v.is_empty())
        .collect();
    vars.sort();
    vars.dedup();
    vars
}

/// A worker's whole environment: each allowed variable and each of `keys`
/// that `lookup` finds set.
pub fn worker_env(
    keys: &[String],
    lookup: impl Fn(&str) -> Option<String>,
) -> Vec<(String, String)> {
    WORKER_ENV_ALLOW
        .iter()
        .map(|v| v.to_string())
        .chain(keys.iter().cloned())
        .filter_map(|name| lookup(&name).map(|value| (name, value)))
        .collect()
}

/// The running service's shared state.
pub struct Service {
    /// The operator's configuration.
    pub config: ServeConfig,
    /// The database.
    pub db: Db,
    /// This machine's component store.
    pub store: ComponentStore,
    /// Domains opened by this process.
    pub domains: Arc<Domains>,
    /// Workers that compile and check uploads.
    pub check_pool: Arc<WorkerPool>,
    /// Per-tenant request rates.
    pub rate: RateLimiter,
    /// Caps how often refusals of the same kind are audited (a client
    /// hammering the API cannot flood the log).
    pub audit_rate: RateLimiter,
    /// Caps how often authentication failures are audited: one bucket for
    /// requests without a token, one for unknown tokens, one per tenant
    /// whose revoked token is used.
    pub auth_audit_rate: RateLimiter,
    /// Woken when episodes are queued.
    pub work: Arc<tokio::sync::Notify>,
    /// The open event streams and the one poller that wakes them.
    pub events: Arc<events::EventHub>,
    /// Rendered reports by evaluation version.
    pub reports: reports::ReportCache,
    /// `state_dir`, through which everything the service writes there goes.
    pub state: confined::Confined,
}

impl Service {
    /// Take one request token of `tenant`'s `requests_per_second` bucket:
    /// in the database on Postgres, where several API servers may share
    /// the tenants; in this process's memory on SQLite. `Ok(Err(wait))`:
    /// refused.
    pub async fn take_request_token(
        &self,
        tenant: i64,
        rate: f64,
    ) -> Result<Result<(), Duration>, db::DbError> {
        match self.db.backend() {
            db::Backend::Postgres => quota::take_shared(&self.db, tenant, rate).await,
            db::Backend::Sqlite => Ok(self.rate.take(tenant, rate)),
        }
    }

    /// How this machine opens domains (its data, DBBench's server and
    /// `sql_mode`): the service's own and its workers'.
    pub fn source(config: &ServeConfig) -> DomainSource {
        DomainSource {
            data: config
                .data
                .as_deref()
                .map(|d| std::path::absolute(d).unwrap_or_else(|_| d.to_path_buf())),
            mysql_url: config.mysql_url.clone(),
            sql_mode: config.sql_mode.unwrap_or_default(),
        }
    }
}

/// The limits of episode workers from `[worker]`.
pub fn episode_limits(config: &ServeConfig) -> WorkerLimits {
    let w = &config.worker;
    WorkerLimits {
        memory_bytes: w.memory_mib << 20,
        cpu_per_request: Duration::from_secs(w.cpu_seconds),
        wall_per_request: Duration::from_secs(w.wall_seconds),
        ..WorkerLimits::default()
    }
}

/// A service started by [`start`].
pub struct Running {
    /// The service's state.
    pub service: Arc<Service>,
    /// The address it listens on.
    pub addr: SocketAddr,
    stop: tokio::sync::watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Running {
    /// Stop accepting requests and claiming episodes; wait for both.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

/// Open the database, start the embedded worker (when `[worker] slots` >
/// 0) and serve the API on `listener`.
pub async fn start(
    config: ServeConfig,
    listener: tokio::net::TcpListener,
    program: WorkerProgram,
) -> Result<Running, ServeError> {
    config.validate()?;
    preflight(&config).await?;
    let db = Db::open(&config.database_url()).await?;
    let store = ComponentStore::open(config.store_dir());
    let state = confined::Confined::open(&config.state_dir)
        .map_err(|e| ServeError::Io(format!("opening the state directory: {e}")))?;
    let uploads = state
        .dir("uploads")
        .map_err(|e| ServeError::Io(format!("opening the uploads directory: {e}")))?;
    match staging::sweep(&uploads) {
        Ok(0) => {}
        Ok(n) => tracing::info!("removed {n} upload(s) a stopped server left staged"),
        Err(e) => {
            return Err(ServeError::Io(format!(
                "sweeping {}: {e}",
                uploads.path().display()
            )));
        }
    }
    let w = &config.worker;
    // Checking an upload calls no model: no key at all.
    let check_pool = program.pool(
        w.check_slots.max(1),
        WorkerLimits {
            memory_bytes: w.check_memory_mib << 20,
            cpu_per_request: Duration::from_secs(w.check_cpu_seconds),
            wall_per_request: Duration::from_secs(w.check_wall_seconds),
            ..WorkerLimits::default()
        },
        &[],
    );
    let domains = Arc::new(Domains::new(Service::source(&config)));
    let service = Arc::new(Service {
        db: db.clone(),
        store: store.clone(),
        domains: domains.clone(),
        check_pool,
        rate: RateLimiter::default(),
        audit_rate: RateLimiter::default(),
        auth_audit_rate: RateLimiter::default(),
        work: Arc::new(tokio::sync::Notify::new()),
        events: events::EventHub::new(db.clone(), config.http.event_streams_per_tenant),
        reports: reports::ReportCache::new(config.http.report_cache_bytes),
        state,
        config,
    });
    let addr = listener
        .local_addr()
        .map_err(|e| ServeError::Io(e.to_string()))?;
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let mut tasks = Vec::new();
    if service.config.worker.slots > 0 {
        let worker = Arc::new(worker::WorkerLoop {
            id: format!("serve-{}-{}", hostname(), std::process::id()),
            db,
            pool: program.pool(
                service.config.worker.slots,
                episode_limits(&service.config),
                &alias_key_vars(&service.config),
            ),
            store,
            source: Service::source(&service.config),
            domains,
            quotas: service.config.quotas.clone(),
            lease: Duration::from_secs(service.config.worker.lease_seconds),
            max_attempts: service.config.worker.max_attempts,
            work: service.work.clone(),
        });
        tasks.push(tokio::spawn(worker.run(stop_rx.clone())));
    }
    tasks.push(tokio::spawn(service.events.clone().run(stop_rx.clone())));
    let app = api::router(service.clone());
    tasks.push(tokio::spawn(listen::serve(
        listener,
        app,
        service.config.http.clone(),
        stop_rx,
    )));
    Ok(Running {
        service,
        addr,
        stop,
        tasks,
    })
}

/// Run a worker loop against `database` until `stop` (`ecdysis-host
/// worker`): the same claim → run → record loop as `serve`'s, for other
/// machines.
pub async fn run_worker(
    config: ServeConfig,
    id: Option<String>,
    program: WorkerProgram,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<(), ServeError> {
    let db = Db::open(&config.database_url()).await?;
    let source = Service::source(&config);
    let worker = Arc::new(worker::WorkerLoop {
        id: id.unwrap_or_else(default_worker_id),
        db,
        pool: program.pool(
            config.worker.slots.max(1),
            episode_limits(&config),
            &alias_key_vars(&config),
        ),
        store: ComponentStore::open(config.store_dir()),
        domains: Arc::new(Domains::new(source.clone())),
        source,
        quotas: config.quotas.clone(),
        lease: Duration::from_secs(config.worker.lease_seconds),
        max_attempts: config.worker.max_attempts,
        work: Arc::new(tokio::sync::Notify::new()),
    });
    worker.run(stop).await;
    Ok(())
}

/// This machine's name, for worker ids.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "host".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_get_the_allow_list_and_the_aliases_keys_only() {
        let mut config = ServeConfig::default();
        config.models.insert(
            "gpt".into(),
            config::ModelAlias {
                model: "gpt-4o-mini".into(),
                base_url: Some("http://127.0.0.1:1/v1".into()),
                api_key_env: Some("GPT_KEY".into()),
                ..config::ModelAlias::default()
            },
        );
        let keys = alias_key_vars(&config);
        assert_eq!(keys, vec!["GPT_KEY".to_string()]);
        let server_env = |name: &str| match name {
            "PATH" => Some("/usr/bin".to_string()),
            "GPT_KEY" => Some("k-123".to_string()),
            "AWS_SECRET_ACCESS_KEY" | "DATABASE_PASSWORD" => Some("secret".to_string()),
            _ => None,
        };
        let env = worker_env(&keys, server_env);
        assert_eq!(
            env,
            vec![
                ("PATH".to_string(), "/usr/bin".to_string()),
                ("GPT_KEY".to_string(), "k-123".to_string()),
            ]
        );
        // The check workers get no key at all.
        assert_eq!(worker_env(&[], server_env).len(), 1);
    }

    /// serve.toml's `sql_mode` reaches the options the service opens its
    /// domains with and sends its workers in each job (the worker
    /// protocol's JSON names it); left out, the default `mysql8`.
    #[test]
    fn the_sql_mode_reaches_the_domains_and_the_workers() {
        use ecdysis_env::SqlMode;
        let config: ServeConfig = toml::from_str("sql_mode = \"lenient\"\n").unwrap();
        assert_eq!(config.sql_mode, Some(SqlMode::Lenient));
        let source = Service::source(&config);
        assert_eq!(source.sql_mode, SqlMode::Lenient);
        assert_eq!(
            serde_json::to_value(&source).unwrap()["sql_mode"],
            "lenient"
        );
        let default = Service::source(&ServeConfig::default());
        assert_eq!(default.sql_mode, SqlMode::Mysql8);
        let e = toml::from_str::<ServeConfig>("sql_mode = \"strict\"\n").unwrap_err();
        assert!(e.to_string().contains("strict"), "{e}");
    }
}

/// A worker's name when none is given: `worker-<host>-<pid>`, or under a
/// Slurm job `slurm-<job>[_<array task>]-<host>-<pid>`, so that the job
/// that ran each episode is on its row (`episodes.worker`) and in the
/// audit log.
pub fn default_worker_id() -> String {
    worker_id_from(|k| std::env::var(k).ok(), &hostname(), std::process::id())
}

fn worker_id_from(var: impl Fn(&str) -> Option<String>, host: &str, pid: u32) -> String {
    let job = var("SLURM_ARRAY_JOB_ID")
        .zip(var("SLURM_ARRAY_TASK_ID"))
        .map(|(job, task)| format!("{job}_{task}"))
        .or_else(|| var("SLURM_JOB_ID"));
    match job {
        Some(job) => format!("slurm-{job}-{host}-{pid}"),
        None => format!("worker-{host}-{pid}"),
    }
}

#[cfg(test)]
mod worker_id_tests {
    use super::worker_id_from;

    #[test]
    fn a_slurm_job_names_the_worker() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(worker_id_from(env(&[]), "h", 7), "worker-h-7");
        assert_eq!(
            worker_id_from(env(&[("SLURM_JOB_ID", "42")]), "h", 7),
            "slurm-42-h-7"
        );
        assert_eq!(
            worker_id_from(
                env(&[
                    ("SLURM_JOB_ID", "43"),
                    ("SLURM_ARRAY_JOB_ID", "42"),
                    ("SLURM_ARRAY_TASK_ID", "1")
                ]),
                "h",
                7
            ),
            "slurm-42_1-h-7"
        );
    }
}
