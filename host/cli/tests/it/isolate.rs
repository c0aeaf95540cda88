//! Process isolation (`--isolate process`): episodes in worker processes
//! under memory and CPU-time limits. Hostile input is stood in for by the
//! worker's test faults (compiled only with the `testing` feature, armed
//! only through the worker's environment): an abort, unbounded allocation,
//! a CPU spin, a stall, a panic. Each must cost its one episode (recorded
//! as `harness_error`), within a time bound and a peak-RSS bound measured
//! by the parent, and the next episode on a fresh worker must work.

use crate::support;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ecdysis_model::CachePolicy;
use ecdysis_runner::agent::{EndReason, EpisodeRecord};
use ecdysis_runner::eval::{self, ModelServices, RunOptions, RunSpec, RunSummary};
use ecdysis_runner::isolate::{
    DeathCause, DomainSource, EpisodeJob, Outcome, PoolConfig, ProcessExecutor, Reply, Request,
    TEST_FAULT_ENV, WORKER_SUBCOMMAND, WorkerLimits, WorkerPool,
};
use ecdysis_sandbox::store::{ComponentHash, ManifestFacts};

/// The pass-through harness, stored; its hash.
fn direct_hash() -> ComponentHash {
    let bytes = support::guest("guests/direct", None);
    support::shared_store()
        .put(
            &bytes,
            ManifestFacts {
                origin: "guests/direct".into(),
                ..ManifestFacts::default()
            },
        )
        .expect("stored")
        .hash
}

fn spec(tasks: &[&str]) -> RunSpec {
    let mut spec = RunSpec {
        tasks: tasks.iter().map(|t| t.to_string()).collect(),
        ..RunSpec::default()
    };
    spec.settings.split = None;
    spec.settings.trials = 2;
    spec
}

fn job(tmp: &Path, harness: Option<ComponentHash>, tasks: &[&str]) -> EpisodeJob {
    EpisodeJob {
        spec: spec(tasks),
        harness,
        store: support::shared_store().root().to_path_buf(),
        native_cache: None,
        source: DomainSource::default(),
        services: ModelServices {
            cache: CachePolicy::Off,
            cache_dir: tmp.join("cache"),
            prices: None,
        },
        prices: None,
    }
}

fn pool(workers: usize, limits: WorkerLimits, fault: Option<&str>) -> Arc<WorkerPool> {
    WorkerPool::start(PoolConfig {
        program: support::host_bin(),
        args: vec![WORKER_SUBCOMMAND.into()],
        env: fault
            .map(|f| vec![(TEST_FAULT_ENV.to_string(), f.to_string())])
            .unwrap_or_default(),
        clear_env: false,
        workers,
        limits,
    })
}

fn domain() -> Arc<dyn ecdysis_env::Domain> {
    let data = ecdysis_tau2::locate(None).unwrap_or_else(|e| panic!("{e}"));
    ecdysis_domains::open("tau2/retail", &data).unwrap()
}

/// Episodes by (task, trial), without what varies between runs (timing).
fn comparable(records: Vec<EpisodeRecord>) -> Vec<serde_json::Value> {
    let mut records = records;
    records.sort_by(|a, b| (&a.task_id, a.trial).cmp(&(&b.task_id, b.trial)));
    records
        .into_iter()
        .map(|r| {
            let mut v = serde_json::to_value(&r).unwrap();
            let o = v.as_object_mut().unwrap();
            o.remove("wall_ms");
            o.remove("model_wait_ms");
            for h in o["hooks"].as_array_mut().unwrap() {
                h.as_object_mut().unwrap().remove("micros");
            }
            v
        })
        .collect()
}

fn run_dir(out: &Path) -> Vec<EpisodeRecord> {
    eval::rundir::read_trajectories(&out.join(eval::rundir::TRAJECTORIES_FILE), false).unwrap()
}

fn options(out: &Path) -> RunOptions {
    RunOptions {
        out: out.to_path_buf(),
        concurrency: 2,
        adaptive: None,
        force_new: false,
        progress: ecdysis_runner::eval::ProgressDisplay::Off,
        max_requeues: 1,
    }
}

/// Run `tasks` in worker processes (with `fault` armed) and in process.
fn isolated_and_in_process(
    tmp: &Path,
    harness: Option<ComponentHash>,
    tasks: &[&str],
    fault: Option<&str>,
) -> (RunSummary, Vec<EpisodeRecord>, Vec<EpisodeRecord>) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let domain = domain();
    let spec = spec(tasks);
    let services = job(tmp, None, tasks).services;
    let hub = services.hub().unwrap();
    let loaded = harness.as_ref().map(|h| {
        let sandbox =
            ecdysis_sandbox::sandbox::Sandbox::pooled(spec.settings.limits.clone(), 2).unwrap();
        let (loaded, _) = support::shared_store().load(&sandbox, h).unwrap();
        (h.clone(), loaded)
    });
    let solo = tmp.join("in-process");
    rt.block_on(eval::run_spec(
        &spec,
        loaded,
        domain.clone(),
        &hub,
        options(&solo),
    ))
    .unwrap();
    let isolated = tmp.join("isolated");
    let executor = Arc::new(ProcessExecutor {
        pool: pool(2, WorkerLimits::default(), fault),
        job: Arc::new(job(tmp, harness.clone(), tasks)),
        domain: domain.clone(),
        ledger: None,
    });
    let summary = rt
        .block_on(eval::run_spec_with(
            &spec,
            harness,
            domain,
            executor,
            None,
            options(&isolated),
        ))
        .unwrap();
    (summary, run_dir(&isolated), run_dir(&solo))
}

#[test]
fn isolated_episodes_equal_in_process_ones_episode_for_episode() {
    let tmp = tempfile::tempdir().unwrap();
    let (summary, isolated, solo) =
        isolated_and_in_process(tmp.path(), Some(direct_hash()), &["5", "9", "12"], None);
    assert_eq!(summary.metrics.episodes, 6);
    assert!(summary.unfinished.is_empty());
    assert_eq!(comparable(isolated), comparable(solo));
}

#[test]
fn a_worker_that_aborts_costs_its_episode_only_and_the_run_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let (summary, isolated, solo) = isolated_and_in_process(
        tmp.path(),
        Some(direct_hash()),
        &["5", "9", "12"],
        Some("abort@9"),
    );
    assert_eq!(summary.metrics.episodes, 6, "every episode is scored");
    let (lost, kept): (Vec<_>, Vec<_>) = isolated.into_iter().partition(|r| r.task_id == "9");
    assert_eq!(lost.len(), 2);
    for r in &lost {
        assert_eq!(r.end, EndReason::HarnessError, "{r:?}");
        let detail = r.end_detail.as_deref().unwrap();
        assert!(detail.contains("SIGABRT"), "{detail}");
        assert!(!r.success);
    }
    // The other episodes ran on fresh workers and match the solo run.
    let solo_kept: Vec<_> = solo.into_iter().filter(|r| r.task_id != "9").collect();
    assert_eq!(comparable(kept), comparable(solo_kept));
}

#[test]
fn without_a_harness_a_dead_worker_is_an_infrastructure_error_left_unscored() {
    let tmp = tempfile::tempdir().unwrap();
    let (summary, isolated, _) =
        isolated_and_in_process(tmp.path(), None, &["5", "9"], Some("panic@5"));
    let mut unfinished = summary.unfinished.clone();
    unfinished.sort();
    assert_eq!(unfinished, vec![("5".to_string(), 0), ("5".to_string(), 1)]);
    assert!(isolated.iter().all(|r| r.task_id == "9"));
    assert_eq!(summary.metrics.episodes, 2);
}

/// One faulted request on a one-worker pool, then a good one: the death as
/// the parent saw it, and the positive control.
fn fault_then_good(
    fault: &str,
    limits: WorkerLimits,
) -> (ecdysis_runner::isolate::Death, Duration) {
    let tmp = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let pool = pool(1, limits.clone(), Some(&format!("{fault}@9")));
    let job = Arc::new(job(tmp.path(), Some(direct_hash()), &["5", "9"]));
    let request = |task: &str| Request::Episode {
        job: job.clone(),
        task_id: task.into(),
        trial: 0,
        cpu_seconds: limits.cpu_per_request.as_secs(),
        spend_usd: None,
    };
    // Warm the worker first, so the bound below times the fault alone.
    match rt.block_on(pool.request(request("5"), None)) {
        Outcome::Reply(Reply::Episode { record, .. }) => assert_eq!(record.task_id, "5"),
        other => panic!("warm-up episode failed: {other:?}"),
    }
    let started = Instant::now();
    let death = match rt.block_on(pool.request(request("9"), None)) {
        Outcome::Died(death) => *death,
        other => panic!("{fault}: the worker should have died: {other:?}"),
    };
    let took = started.elapsed();
    match rt.block_on(pool.request(request("5"), None)) {
        Outcome::Reply(Reply::Episode { record, .. }) => {
            assert_eq!(record.task_id, "5");
            assert_ne!(record.end, EndReason::HarnessError, "{record:?}");
        }
        other => panic!("after {fault}, a fresh worker must serve the next episode: {other:?}"),
    }
    (death, took)
}

#[test]
fn unbounded_allocation_stops_at_the_memory_limit() {
    let limits = WorkerLimits {
        memory_bytes: 768 << 20,
        ..WorkerLimits::default()
    };
    let (death, took) = fault_then_good("allocate", limits);
    let exit = death.exit.expect("a process was reaped");
    assert_eq!(death.cause, DeathCause::Crashed, "{}", death.describe());
    assert_eq!(exit.signal, Some(libc::SIGABRT), "{}", death.describe());
    // RLIMIT_DATA bounds the heap and private writable mappings; resident
    // memory also holds the binary's own (file-backed) pages, which a worker
    // has from the start: the bound is the limit plus that baseline. The
    // limit also counts address space the allocator has reserved but not yet
    // touched (mimalloc maps its arenas ahead), so the allocation stops
    // before resident memory reaches it: the lower bound is half the limit.
    let peak_mib = exit.peak_rss_kib / 1024;
    let binary_mib = std::fs::metadata(support::host_bin()).unwrap().len() >> 20;
    assert!(
        (384..=768 + binary_mib.max(64)).contains(&peak_mib),
        "peak RSS {peak_mib} MiB should be bounded by the 768 MiB limit plus the {binary_mib} MiB binary (and show the allocation happened)"
    );
    assert!(took < Duration::from_secs(30), "took {took:?}");
    assert!(
        death.describe().contains("peak RSS"),
        "{}",
        death.describe()
    );
}

#[test]
fn a_cpu_spin_stops_at_the_cpu_limit() {
    let limits = WorkerLimits {
        cpu_per_request: Duration::from_secs(2),
        ..WorkerLimits::default()
    };
    let (death, took) = fault_then_good("spin", limits);
    let exit = death.exit.expect("reaped");
    assert_eq!(exit.signal, Some(libc::SIGXCPU), "{}", death.describe());
    assert!(
        death.describe().contains("CPU limit (2 s"),
        "{}",
        death.describe()
    );
    // Two CPU seconds, on a machine other builds share: well under 20 s.
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_secs(20),
        "took {took:?}"
    );
    assert!(exit.peak_rss_kib / 1024 < 1024, "{}", death.describe());
}

#[test]
fn a_stall_stops_at_the_wall_clock_limit() {
    // The limit holds the warm-up and the positive control too, and a cold
    // worker's first episode in a debug build on a loaded machine takes
    // seconds of wall: the limit leaves them room.
    let limits = WorkerLimits {
        wall_per_request: Duration::from_secs(5),
        ..WorkerLimits::default()
    };
    let (death, took) = fault_then_good("hang", limits);
    assert_eq!(death.cause, DeathCause::WallClock, "{}", death.describe());
    assert!(
        took >= Duration::from_secs(5) && took < Duration::from_secs(15),
        "took {took:?}"
    );
}

#[test]
fn a_panic_in_the_worker_is_reported_with_its_message() {
    let (death, took) = fault_then_good("panic", WorkerLimits::default());
    let d = death.describe();
    assert!(d.contains("panicked"), "{d}");
    assert!(d.contains("episode worker test fault"), "{d}");
    assert!(took < Duration::from_secs(10), "took {took:?}");
}

#[test]
fn run_isolate_process_from_the_command_line() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let result = Command::new(support::host_bin())
        .current_dir(support::repo_root())
        .env(TEST_FAULT_ENV, "abort@12")
        .args(["--quiet", "--store"])
        .arg(tmp.path().join("store"))
        .args([
            "run",
            "--harness",
            "guests/direct",
            "--split",
            "all",
            "--tasks",
            "5,12",
            "--isolate",
            "process",
            "--worker-memory-mib",
            "1024",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        result.status.success(),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    let records = run_dir(&out);
    assert_eq!(records.len(), 2);
    let lost = records.iter().find(|r| r.task_id == "12").unwrap();
    assert_eq!(lost.end, EndReason::HarnessError);
    let kept = records.iter().find(|r| r.task_id == "5").unwrap();
    assert_ne!(kept.end, EndReason::HarnessError);
}

/// `--sql-mode` reaches the worker processes of `--isolate process`: they
/// open DBBench with the parent's options. `standard-278`'s gold UPDATE
/// compares a TEXT column with a bare number, which MySQL 8's strict mode
/// refuses, so `sim:oracle` solves it under `--sql-mode lenient` and not
/// under the default `mysql8` (the control: the outcome tells the modes
/// apart). SKIPPED without MariaDB, unless `$CI` is set.
#[test]
fn sql_mode_reaches_the_worker_processes() {
    if !support::dbbench_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let reward = |name: &str, sql_mode: &str| -> f64 {
        let out = tmp.path().join(name);
        let o = Command::new(support::host_bin())
            .current_dir(support::repo_root())
            .args(["--quiet", "--store"])
            .arg(tmp.path().join("store"))
            .args([
                "run",
                "--harness",
                "none",
                "--domain",
                "agentbench/dbbench",
                "--split",
                "all",
                "--tasks",
                "standard-278",
                "--agent-model",
                "sim:oracle",
                "--sql-mode",
                sql_mode,
                "--isolate",
                "process",
                "--out",
            ])
            .arg(&out)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let records = run_dir(&out);
        assert_eq!(records.len(), 1, "{name}");
        assert_eq!(records[0].task_id, "standard-278");
        records[0].reward
    };
    assert_eq!(reward("lenient", "lenient"), 1.0, "lenient in the workers");
    assert_eq!(reward("mysql8", "mysql8"), 0.0, "MySQL 8's strict mode");
}
