//! The worker process: `ecdysis-host episode-worker` (hidden). Reads
//! [`Request`]s from stdin, one JSON object per line, and answers each with
//! one [`Reply`] line on stdout, one request at a time.
//!
//! What a worker prepares for a job (the domain, the loaded harness, the
//! participants) is kept for the next request of the same job, so a
//! long-lived worker pays for loading once, not per episode.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::os::fd::FromRawFd;
use std::sync::Arc;
use std::time::Duration;

use super::protocol::{CheckReply, EpisodeJob, Reply, Request, TestFault};
use crate::eval::{self, RunConfig, RunSpecError, participants::StandardParticipants};
use ecdysis_env::{Domain, DomainOpener, EnvError};
use ecdysis_model::{ModelHub, PriceTable, PriceTableError, UsageLedger};
use ecdysis_sandbox::sandbox::{Limits, LoadedHarness, Sandbox, SandboxError};
use ecdysis_sandbox::store::{ComponentHash, ComponentStore, StoreError};
use ecdysis_sys::rlimit;

/// Jobs kept prepared at once (a service worker serves many evaluations;
/// the oldest is dropped first).
const PREPARED_JOBS: usize = 8;

/// Why a job could not be prepared; the worker answers the episode with
/// its text, as an infrastructure error.
#[derive(Debug, thiserror::Error)]
enum PrepareError {
    /// The job's domain could not be opened.
    #[error("opening {domain}: {source}")]
    Domain {
        /// The domain's name.
        domain: String,
        /// Why (boxed: an environment error is large).
        source: Box<EnvError>,
    },
    /// No sandbox for the job's limits, or the harness cannot take them.
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// The harness could not be loaded from the store.
    #[error("loading harness {hash}: {source}")]
    Harness {
        /// The harness's short hash.
        hash: String,
        /// Why.
        source: StoreError,
    },
    /// The job's price table (a file or inline) could not be read.
    #[error(transparent)]
    Prices(#[from] PriceTableError),
    /// The job's participants could not be built.
    #[error(transparent)]
    Participants(#[from] RunSpecError),
}

/// A job ready to run episodes.
struct Prepared {
    config: RunConfig,
    domain: Arc<dyn Domain>,
    harness: Option<LoadedHarness>,
    participants: Arc<StandardParticipants>,
    ledger: Arc<UsageLedger>,
}

/// The worker's state: prepared jobs, loaded domains, one sandbox per
/// engine-level limit (stack, pool slot size).
struct Worker {
    /// The registry that opens a job's domain by name (the binary's).
    opener: &'static dyn DomainOpener,
    prepared: HashMap<String, Arc<Prepared>>,
    order: Vec<String>,
    domains: HashMap<(String, super::protocol::DomainSource), Arc<dyn Domain>>,
    sandboxes: HashMap<(usize, usize), Sandbox>,
    faults: Vec<(TestFault, String)>,
}

/// Run the worker loop on this process's stdin and stdout until stdin
/// closes, opening jobs' domains with `opener` (the binary's registry).
/// Returns the process exit code.
pub fn serve(opener: &'static dyn DomainOpener) -> i32 {
    // The protocol owns the original stdout; anything else that prints
    // (a library `println!`, a panic message) goes to stderr, so it can
    // never corrupt a reply line.
    // SAFETY: dup/dup2 on the standard descriptors of this process.
    let protocol_fd = unsafe { libc::dup(1) };
    if protocol_fd < 0 || unsafe { libc::dup2(2, 1) } < 0 {
        tracing::error!("episode-worker: cannot set up its protocol descriptor");
        return 2;
    }
    // SAFETY: protocol_fd is a fresh descriptor we own.
    let mut out = std::io::BufWriter::new(unsafe { std::fs::File::from_raw_fd(protocol_fd) });
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            tracing::error!("episode-worker: cannot start the async runtime: {e}");
            return 2;
        }
    };
    let mut worker = Worker {
        opener,
        prepared: HashMap::new(),
        order: Vec::new(),
        domains: HashMap::new(),
        sandboxes: HashMap::new(),
        faults: armed_faults(),
    };
    if send(
        &mut out,
        &Reply::Ready {
            pid: std::process::id(),
        },
    )
    .is_err()
    {
        return 0;
    }
    let stdin = std::io::stdin();
    let mut line = String::new();
    loop {
        line.clear();
        match stdin.lock().read_line(&mut line) {
            Ok(0) | Err(_) => return 0,
            Ok(_) => {}
        }
        let reply = match serde_json::from_str::<Request>(&line) {
            Ok(request) => runtime.block_on(worker.handle(request)),
            Err(e) => Reply::Error {
                message: format!("unreadable request: {e}"),
                infrastructure: true,
            },
        };
        if send(&mut out, &reply).is_err() {
            return 0;
        }
    }
}

fn send(out: &mut impl Write, reply: &Reply) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(reply).expect("reply serializes");
    line.push(b'\n');
    out.write_all(&line)?;
    out.flush()
}

/// The faults armed through the environment (see
/// [`super::protocol::TEST_FAULT_ENV`]); always empty without the
/// `testing` feature.
fn armed_faults() -> Vec<(TestFault, String)> {
    #[cfg(feature = "testing")]
    {
        let Ok(spec) = std::env::var(super::protocol::TEST_FAULT_ENV) else {
            return Vec::new();
        };
        spec.split(',')
            .filter_map(|item| {
                let (fault, task) = item.split_once('@')?;
                let fault: TestFault =
                    serde_json::from_value(serde_json::Value::String(fault.into())).ok()?;
                Some((fault, task.to_string()))
            })
            .collect()
    }
    #[cfg(not(feature = "testing"))]
    Vec::new()
}

/// Fire a test fault: none of these return.
fn fire(fault: TestFault) {
    match fault {
        TestFault::Abort => std::process::abort(),
        TestFault::Allocate => {
            let mut hoard: Vec<Vec<u8>> = Vec::new();
            loop {
                // Touched, so it is resident, not just reserved.
                hoard.push(vec![7u8; 16 << 20]);
                std::hint::black_box(&hoard);
            }
        }
        TestFault::Spin => {
            let mut n: u64 = 0;
            loop {
                n = std::hint::black_box(n.wrapping_add(1));
            }
        }
        TestFault::Hang => loop {
            std::thread::sleep(Duration::from_secs(3600));
        },
        TestFault::Panic => panic!("episode worker test fault: panic"),
    }
}

impl Worker {
    async fn handle(&mut self, request: Request) -> Reply {
        match request {
            Request::Episode {
                job,
                task_id,
                trial,
                cpu_seconds,
                spend_usd,
            } => {
                if let Err(e) = rlimit::allow_cpu(Duration::from_secs(cpu_seconds.max(1))) {
                    return Reply::Error {
                        message: format!("cannot set the CPU limit: {e}"),
                        infrastructure: true,
                    };
                }
                if let Some((fault, _)) = self.faults.iter().find(|(_, t)| *t == task_id) {
                    fire(*fault);
                }
                let prepared = match self.prepare(&job) {
                    Ok(p) => p,
                    Err(e) => {
                        return Reply::Error {
                            message: e.to_string(),
                            infrastructure: true,
                        };
                    }
                };
                // The ledger holds this episode's calls only (drained after
                // each): the allowance is the episode's.
                prepared.ledger.set_spend_limit(spend_usd);
                let result = eval::run_and_score(
                    &prepared.config,
                    prepared.domain.clone(),
                    prepared.harness.clone(),
                    &*prepared.participants,
                    &task_id,
                    trial,
                )
                .await;
                let calls = prepared.ledger.drain();
                prepared.ledger.set_spend_limit(None);
                match result {
                    Ok(record) => Reply::Episode {
                        record: Box::new(record),
                        calls,
                    },
                    Err(e) => Reply::Error {
                        message: e.to_string(),
                        infrastructure: false,
                    },
                }
            }
            Request::Check {
                path,
                limits,
                cpu_seconds,
            } => {
                if let Err(e) = rlimit::allow_cpu(Duration::from_secs(cpu_seconds.max(1))) {
                    return Reply::Error {
                        message: format!("cannot set the CPU limit: {e}"),
                        infrastructure: true,
                    };
                }
                match std::fs::read(&path) {
                    Ok(bytes) => Reply::Checked {
                        report: Box::new(check_component(&bytes, limits)),
                    },
                    Err(e) => Reply::Error {
                        message: format!("cannot read {}: {e}", path.display()),
                        infrastructure: true,
                    },
                }
            }
        }
    }

    /// The prepared job, from the cache or made now.
    fn prepare(&mut self, job: &EpisodeJob) -> Result<Arc<Prepared>, PrepareError> {
        let key = job.key();
        if let Some(p) = self.prepared.get(&key) {
            return Ok(p.clone());
        }
        let domain_key = (job.spec.settings.domain.clone(), job.source.clone());
        let domain = match self.domains.get(&domain_key) {
            Some(d) => d.clone(),
            None => {
                let d = self
                    .opener
                    .open(&job.spec.settings.domain, &job.source)
                    .map_err(|source| PrepareError::Domain {
                        domain: job.spec.settings.domain.clone(),
                        source: Box::new(source),
                    })?;
                self.domains.insert(domain_key, d.clone());
                d
            }
        };
        let limits = job.spec.settings.limits.clone();
        let harness = match &job.harness {
            None => None,
            Some(hash) => {
                let sandbox = self.sandbox(&limits)?;
                let mut store = ComponentStore::open(&job.store);
                if let Some(dir) = &job.native_cache {
                    store = store.with_native_cache(dir);
                }
                let (loaded, _) =
                    store
                        .load(&sandbox, hash)
                        .map_err(|source| PrepareError::Harness {
                            hash: hash.short().to_string(),
                            source,
                        })?;
                Some(loaded.with_limits(limits)?)
            }
        };
        let mut prices = PriceTable::embedded_default();
        if let Some(p) = &job.services.prices {
            prices = prices.merged(PriceTable::load(p)?);
        }
        if let Some(v) = &job.prices {
            prices = prices.merged(PriceTable::from_json_str(&v.to_string())?);
        }
        let ledger = Arc::new(UsageLedger::new(prices));
        let cache = Arc::new(ecdysis_model::ResponseCache::new(
            &job.services.cache_dir,
            job.services.cache,
        ));
        let hub = ModelHub::new(ledger.clone(), cache);
        let participants = job.spec.participants(&hub, &*domain)?;
        let prepared = Arc::new(Prepared {
            config: job.spec.config(job.harness.clone(), Vec::new()),
            domain,
            harness,
            participants,
            ledger,
        });
        if self.order.len() >= PREPARED_JOBS {
            let oldest = self.order.remove(0);
            self.prepared.remove(&oldest);
        }
        self.order.push(key.clone());
        self.prepared.insert(key, prepared.clone());
        Ok(prepared)
    }

    /// The process's sandbox for these engine-level limits (the wasm stack
    /// and the pool's slot size cannot change per harness).
    fn sandbox(&mut self, limits: &Limits) -> Result<Sandbox, SandboxError> {
        let key = (limits.max_wasm_stack, limits.memory_bytes);
        if let Some(s) = self.sandboxes.get(&key) {
            return Ok(s.clone());
        }
        // One episode at a time, so no instance pool: a pooled engine also
        // maps a pool of a thousand 2 MiB fiber stacks up front, writable
        // memory that counts against the worker's RLIMIT_DATA; on-demand
        // allocation maps an episode's memory when it starts.
        let s = Sandbox::new(limits.clone())?;
        self.sandboxes.insert(key, s.clone());
        Ok(s)
    }
}

/// Compile, inspect, link and check untrusted component bytes, here in the
/// worker, never in the parent. Always compiled from the bytes (never from
/// a shared precompiled artifact), so it takes as long whoever uploaded the
/// same bytes before.
fn check_component(bytes: &[u8], limits: Limits) -> CheckReply {
    let hash = ComponentHash::of(bytes).to_string();
    let world = match ecdysis_sandbox::sandbox::world_of(bytes) {
        Ok(w) => w.unwrap_or_else(|| ecdysis_sandbox::store::NO_WORLD.to_string()),
        Err(e) => {
            return CheckReply {
                hash,
                world: ecdysis_sandbox::store::NO_WORLD.into(),
                passed: false,
                inspect: serde_json::Value::Null,
                check: None,
                error: Some(format!("not a WebAssembly component: {e}")),
            };
        }
    };
    let failed = |error: String, inspect: serde_json::Value| CheckReply {
        hash: hash.clone(),
        world: world.clone(),
        passed: false,
        inspect,
        check: None,
        error: Some(error),
    };
    let sandbox = match Sandbox::new(limits) {
        Ok(s) => s,
        Err(e) => return failed(e.to_string(), serde_json::Value::Null),
    };
    let component = match sandbox.compile(bytes) {
        Ok(c) => c,
        Err(e) => return failed(e.to_string(), serde_json::Value::Null),
    };
    let ty = component.component_type();
    let engine = sandbox.engine();
    let imports: Vec<String> = ty.imports(engine).map(|(n, _)| n.to_string()).collect();
    let exports: Vec<String> = ty.exports(engine).map(|(n, _)| n.to_string()).collect();
    let supported = ecdysis_sandbox::sandbox::SUPPORTED_WORLDS.contains(&world.as_str());
    let inspect = serde_json::json!({
        "size": bytes.len(),
        "world_supported": supported,
        "supported_worlds": ecdysis_sandbox::sandbox::SUPPORTED_WORLDS,
        "imports": imports,
        "exports": exports,
    });
    if !supported {
        return failed(
            format!(
                "world `{world}` is not one this host runs ({})",
                ecdysis_sandbox::sandbox::SUPPORTED_WORLDS.join(", ")
            ),
            inspect,
        );
    }
    let loaded = match sandbox.prepare(&component) {
        Ok(l) => l,
        Err(e) => return failed(e.to_string(), inspect),
    };
    let report = ecdysis_sandbox::doctor::check(&loaded);
    CheckReply {
        hash,
        world,
        passed: report.passed(),
        inspect,
        check: serde_json::to_value(&report).ok(),
        error: None,
    }
}
