//! `serve`, `worker`, `tenant` and `audit`: the evaluation service from the
//! command line.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};

use ecdysis_serve::{self as serve, Db, ServeConfig, WorkerProgram, audit, tenants};

/// Where the service's configuration and database are.
#[derive(Args, Debug, Clone)]
pub struct ServiceArgs {
    /// serve.toml (model aliases, limits, quotas, workers); default: the
    /// built-in defaults.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The database: sqlite:PATH (default .ecdysis/serve/serve.db) or
    /// postgres://user:password@host/db (several machines).
    #[arg(long, env = "ECDYSIS_DATABASE")]
    pub database: Option<String>,
}

impl ServiceArgs {
    /// The configuration with the flags applied.
    pub fn config(&self, data: &super::env::DataArgs) -> Result<ServeConfig> {
        let mut c = ServeConfig::load(self.config.as_deref())?;
        if let Some(d) = &self.database {
            c.database = Some(d.clone());
        }
        if c.data.is_none() {
            c.data = data.data.clone();
        }
        if c.mysql_url.is_none() {
            c.mysql_url = data.mysql_url.clone();
        }
        if c.sql_mode.is_none() {
            c.sql_mode = Some(data.sql_mode);
        }
        Ok(c)
    }

    /// The service's database (the tenant and audit commands need no data).
    async fn db(&self) -> Result<Db> {
        let c = ServeConfig::load(self.config.as_deref())?;
        let c = ServeConfig {
            database: self.database.clone().or(c.database),
            ..c
        };
        Db::open(&c.database_url())
            .await
            .with_context(|| format!("opening the database {}", redact(&c.database_url())))
    }
}

/// A database URL without its password, for messages.
pub fn redact(url: &str) -> String {
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

/// Flags of `serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on (plain HTTP; put TLS in a reverse proxy).
    /// Default: serve.toml's `listen`, else 127.0.0.1:8787.
    #[arg(long)]
    pub listen: Option<String>,
    /// Episodes this server runs at once in its own worker processes
    /// (0: remote `ecdysis-host worker`s run them). Default: serve.toml's
    /// `[worker] slots`.
    #[arg(long)]
    pub slots: Option<usize>,
    /// Check the configuration and what it names (every domain opens an
    /// episode, every endpoint alias has its key variable), print the
    /// resolved configuration as JSON and each check, and exit (1 when a
    /// check fails) without listening.
    #[arg(long)]
    pub check_config: bool,
    #[command(flatten)]
    pub service: ServiceArgs,
}

/// `serve`: run the service until interrupted.
pub async fn serve(args: ServeArgs, data: &super::env::DataArgs, quiet: bool) -> Result<()> {
    let mut config = args.service.config(data)?;
    if let Some(l) = args.listen {
        config.listen = l;
    }
    if let Some(s) = args.slots {
        config.worker.slots = s;
    }
    if args.check_config {
        config.validate()?;
        // The database URL may carry a password: shown redacted, as below.
        let mut shown = config.clone();
        shown.database = Some(redact(&config.database_url()));
        println!("{}", serde_json::to_string_pretty(&shown)?);
        for line in serve::preflight(&config).await? {
            eprintln!("ok: {line}");
        }
        return Ok(());
    }
    let mut stop = StopSignal::listen()?;
    let listener = tokio::net::TcpListener::bind(&config.listen)
        .await
        .with_context(|| format!("listening on {}", config.listen))?;
    let url = redact(&config.database_url());
    let running = serve::start(config, listener, WorkerProgram::this_binary()?).await?;
    // The address goes to stdout (a script may have asked for port 0).
    println!("listening on http://{}", running.addr);
    if !quiet {
        eprintln!(
            "ecdysis-host serve: database {url}, {} worker slot(s); plain HTTP — put TLS in a reverse proxy in front",
            running.service.config.worker.slots
        );
    }
    use std::io::Write;
    let _ = std::io::stdout().flush();
    stop.received().await;
    if !quiet {
        eprintln!("stopping: finishing requests; in-flight episodes are taken up again on restart");
    }
    running.stop().await;
    Ok(())
}

/// SIGINT and SIGTERM, caught from the moment this is made. `serve` makes
/// it before printing its address: a script that signals the server as soon
/// as it reads the address stops it cleanly instead of killing it with the
/// signal's default action.
struct StopSignal {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl StopSignal {
    fn listen() -> Result<StopSignal> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(StopSignal {
            interrupt: signal(SignalKind::interrupt()).context("catching SIGINT")?,
            terminate: signal(SignalKind::terminate()).context("catching SIGTERM")?,
        })
    }

    async fn received(&mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
    }
}

/// Flags of `worker`.
#[derive(Args, Debug)]
pub struct WorkerArgs {
    /// Episodes at once on this machine (default: serve.toml's `[worker]
    /// slots`).
    #[arg(long)]
    pub slots: Option<usize>,
    /// This worker's name in leases, on the episodes it ran and in the
    /// audit log (default worker-<host>-<pid>; under Slurm
    /// slurm-<job>[_<array task>]-<host>-<pid>).
    #[arg(long)]
    pub id: Option<String>,
    /// This machine's component store (default: serve.toml's).
    #[arg(long)]
    pub store_dir: Option<PathBuf>,
    /// Write the time (Unix milliseconds) to this file every 10 seconds
    /// while the worker runs, for a liveness check (a Kubernetes probe:
    /// the file is older than a minute → restart the worker).
    #[arg(long, value_name = "FILE")]
    pub heartbeat_file: Option<PathBuf>,
    #[command(flatten)]
    pub service: ServiceArgs,
}

/// `worker`: claim and run episodes from the shared database until
/// interrupted.
pub async fn worker(args: WorkerArgs, data: &super::env::DataArgs, quiet: bool) -> Result<()> {
    let mut config = args.service.config(data)?;
    if let Some(s) = args.slots {
        config.worker.slots = s;
    }
    if let Some(s) = args.store_dir {
        config.store = Some(s);
    }
    if !quiet {
        eprintln!(
            "ecdysis-host worker: {} slot(s) on {}",
            config.worker.slots.max(1),
            redact(&config.database_url())
        );
    }
    if let Some(path) = args.heartbeat_file.clone() {
        // Written by a task of the worker's own runtime: a runtime that
        // stalls stops writing it.
        tokio::spawn(async move {
            loop {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis());
                if let Err(e) =
                    ecdysis_sys::fsutil::atomic_write_unsynced(&path, now.to_string().as_bytes())
                {
                    tracing::warn!("heartbeat file {}: {e}", path.display());
                }
                tokio::time::sleep(std::time::Duration::from_secs(10)).await;
            }
        });
    }
    let mut signal = StopSignal::listen()?;
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let run = tokio::spawn(serve::run_worker(
        config,
        args.id,
        WorkerProgram::this_binary()?,
        stop_rx,
    ));
    tokio::select! {
        r = run => return Ok(r.context("worker task")??),
        _ = signal.received() => {}
    }
    let _ = stop.send(true);
    Ok(())
}

#[derive(Subcommand, Debug)]
pub enum TenantCommand {
    /// Add a tenant and print its token (shown this once; only its hash
    /// is stored).
    Add {
        name: String,
        #[command(flatten)]
        service: ServiceArgs,
    },
    /// List tenants, their state and quota overrides.
    List {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        service: ServiceArgs,
    },
    /// Override some of a tenant's quotas: NAME quota=value ... (quotas:
    /// concurrent_episodes, episodes_per_day, fuel_per_day, stored_bytes,
    /// upload_bytes, usd_per_day, requests_per_second).
    SetQuota {
        name: String,
        #[arg(required = true)]
        quotas: Vec<String>,
        #[command(flatten)]
        service: ServiceArgs,
    },
    /// Revoke a tenant's token (its data stays).
    Revoke {
        name: String,
        #[command(flatten)]
        service: ServiceArgs,
    },
}

pub async fn tenant(cmd: TenantCommand) -> Result<()> {
    match cmd {
        TenantCommand::Add { name, service } => {
            let db = service.db().await?;
            let token = tenants::add(&db, &name).await?;
            eprintln!("tenant `{name}` added; its token (shown once, stored only hashed):");
            println!("{token}");
        }
        TenantCommand::List { json, service } => {
            let db = service.db().await?;
            for t in tenants::list(&db).await? {
                if json {
                    super::emit(serde_json::to_string(&t)?);
                } else {
                    super::emit(format_args!(
                        "{:<24} created {}{}  quotas {}",
                        t.name,
                        t.created_at,
                        t.revoked_at
                            .map(|r| format!(", REVOKED {r}"))
                            .unwrap_or_default(),
                        t.quota_overrides
                    ));
                }
            }
        }
        TenantCommand::SetQuota {
            name,
            quotas,
            service,
        } => {
            let db = service.db().await?;
            let now = tenants::set_quota(&db, &name, &quotas).await?;
            println!("tenant `{name}` quota overrides: {now}");
        }
        TenantCommand::Revoke { name, service } => {
            let db = service.db().await?;
            tenants::revoke(&db, &name).await?;
            println!("tenant `{name}` revoked");
        }
    }
    Ok(())
}

#[derive(Subcommand, Debug)]
pub enum AuditCommand {
    /// Recompute the hash chain: exits non-zero and names every record
    /// that was edited, removed or reordered.
    Verify {
        /// Also require this head hash (one you recorded earlier, outside
        /// the database).
        #[arg(long)]
        expect_head: Option<String>,
        #[command(flatten)]
        service: ServiceArgs,
    },
    /// Print the records as JSON lines.
    Show {
        #[command(flatten)]
        service: ServiceArgs,
    },
}

/// `audit`; returns whether it verified.
pub async fn audit(cmd: AuditCommand) -> Result<bool> {
    match cmd {
        AuditCommand::Verify {
            expect_head,
            service,
        } => {
            let db = service.db().await?;
            let v = audit::verify(&db).await?;
            let mut ok = v.ok();
            for p in &v.problems {
                println!("BROKEN: {p}");
            }
            if let Some(h) = expect_head
                && h != v.head_hash
            {
                println!(
                    "BROKEN: the head is {} but {h} was expected (the log was rewritten)",
                    v.head_hash
                );
                ok = false;
            }
            println!(
                "{} records; head {} {}; {}",
                v.records,
                v.head_seq,
                v.head_hash,
                if ok {
                    "the chain verifies"
                } else {
                    "the chain is BROKEN"
                }
            );
            Ok(ok)
        }
        AuditCommand::Show { service } => {
            let db = service.db().await?;
            for r in audit::records(&db).await? {
                super::emit(serde_json::to_string(&r)?);
            }
            Ok(true)
        }
    }
}
