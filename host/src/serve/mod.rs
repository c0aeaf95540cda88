//! `ecdysis-host serve`: the multi-tenant evaluation service. Tenants
//! upload harness components and evaluate them on the benchmark domains,
//! isolated (every episode in a worker process under memory and CPU
//! limits, [`crate::isolate`]), metered (quotas), and audited (a
//! hash-chained log), over HTTP + JSON (the OpenAPI document is served at
//! `/v1/openapi.json`).
//!
//! - [`config`]: `serve.toml` (model aliases, limits, quotas, workers).
//! - [`db`]: SQLite (embedded, WAL) or Postgres through `sqlx`'s runtime
//!   API; the schema.
//! - [`tenants`]: tenants and hashed tokens (`tenant add|list|set-quota|revoke`).
//! - [`audit`]: the hash-chained audit log (`audit verify`).
//! - [`quota`]: quota values, refusals, the request-rate bucket.
//! - [`harnesses`]: uploads, ownership, grants, the shared component bytes.
//! - [`evaluations`]: requests, admission, status, results, result
//!   directories and reports.
//! - [`scheduler`]: the episode queue: fair claims, leases, exactly-once
//!   completion, cancellation.
//! - [`worker`]: the claim → run → record loop (in `serve`, and
//!   `ecdysis-host worker` on other machines).
//! - [`api`]: the HTTP routes, authentication, errors, hardening;
//!   [`openapi`]: the API's description.
//!
//! TLS is left to a reverse proxy in front (nginx, Caddy, a cloud load
//! balancer): the service speaks plain HTTP/1.1 and by default listens on
//! loopback only.

pub mod api;
pub mod audit;
pub mod config;
pub mod db;
pub mod domains;
pub mod evaluations;
pub mod harnesses;
pub mod openapi;
pub mod quota;
pub mod scheduler;
pub mod tenants;
pub mod worker;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use config::ServeConfig;
pub use db::Db;

use crate::isolate::{DomainSource, PoolConfig, WorkerLimits, WorkerPool};
use crate::store::ComponentStore;
use domains::Domains;
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

    fn pool(&self, workers: usize, limits: WorkerLimits) -> Arc<WorkerPool> {
        WorkerPool::start(PoolConfig {
            program: self.program.clone(),
            args: self.args.clone(),
            env: self.env.clone(),
            workers,
            limits,
        })
    }
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
    /// Woken when episodes are queued.
    pub work: Arc<tokio::sync::Notify>,
}

impl Service {
    /// The domain data of this machine, for workers.
    pub fn source(config: &ServeConfig) -> DomainSource {
        DomainSource {
            data: config
                .data
                .as_deref()
                .map(|d| std::path::absolute(d).unwrap_or_else(|_| d.to_path_buf())),
            mysql_url: config.mysql_url.clone(),
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
    let db = Db::open(&config.database_url()).await?;
    let store = ComponentStore::open(config.store_dir());
    std::fs::create_dir_all(config.state_dir.join("uploads"))
        .map_err(|e| ServeError::Io(format!("creating {}: {e}", config.state_dir.display())))?;
    let w = &config.worker;
    let check_pool = program.pool(
        w.check_slots.max(1),
        WorkerLimits {
            memory_bytes: w.check_memory_mib << 20,
            cpu_per_request: Duration::from_secs(w.check_cpu_seconds),
            wall_per_request: Duration::from_secs(w.check_wall_seconds),
            ..WorkerLimits::default()
        },
    );
    let domains = Arc::new(Domains::new(Service::source(&config)));
    let service = Arc::new(Service {
        db: db.clone(),
        store: store.clone(),
        domains: domains.clone(),
        check_pool,
        rate: RateLimiter::default(),
        audit_rate: RateLimiter::default(),
        work: Arc::new(tokio::sync::Notify::new()),
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
            pool: program.pool(service.config.worker.slots, episode_limits(&service.config)),
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
    let app = api::router(service.clone());
    let mut shutdown = stop_rx.clone();
    tasks.push(tokio::spawn(async move {
        let _ = axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(async move {
            let _ = shutdown.wait_for(|s| *s).await;
        })
        .await;
    }));
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
        id: id.unwrap_or_else(|| format!("worker-{}-{}", hostname(), std::process::id())),
        db,
        pool: program.pool(config.worker.slots.max(1), episode_limits(&config)),
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
