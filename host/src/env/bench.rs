//! The gold-replay bench: load both τ² domains, replay and evaluate the gold
//! trajectory of every task, and time it against the reference package
//! doing the same work (`tests/conformance/bench_reference.py` records that
//! in `tests/conformance/vectors/reference_bench.json`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{DOMAINS, DataSource, EnvError, open, replay_gold};

/// Timings of one bench run.
#[derive(Clone, Debug)]
pub struct BenchReport {
    /// Loading both domains (parse + validate the databases, tasks...).
    pub load: Duration,
    /// Replaying and evaluating the gold trajectory of every task.
    pub replay: Duration,
    /// Number of tasks replayed.
    pub tasks: usize,
    /// Number of those whose gold trajectory scored 1.
    pub solved: usize,
}

/// The reference's timings for the same work.
#[derive(Clone, Debug, serde::Deserialize)]
pub struct ReferenceTiming {
    /// Seconds to load both domains.
    pub load_seconds: f64,
    /// Seconds to replay and evaluate every task's gold trajectory.
    pub replay_seconds: f64,
    /// Number of tasks.
    pub tasks: usize,
}

/// Runs the bench once.
pub fn run(data: &DataSource) -> Result<BenchReport, EnvError> {
    let t0 = Instant::now();
    let domains = DOMAINS
        .iter()
        .map(|d| open(d, data))
        .collect::<Result<Vec<_>, _>>()?;
    let load = t0.elapsed();
    let t1 = Instant::now();
    let mut tasks = 0;
    let mut solved = 0;
    for d in &domains {
        for r in replay_gold(d.as_ref())? {
            tasks += 1;
            if (r.reward - 1.0).abs() <= 1e-6 {
                solved += 1;
            }
        }
    }
    Ok(BenchReport {
        load,
        replay: t1.elapsed(),
        tasks,
        solved,
    })
}

/// Finds `tests/conformance/vectors/reference_bench.json` above the current
/// directory (or the crate's directory) and reads it.
pub fn reference_timing() -> Option<ReferenceTiming> {
    let rel = Path::new("tests/conformance/vectors/reference_bench.json");
    let starts: Vec<PathBuf> = std::env::current_dir()
        .into_iter()
        .chain([PathBuf::from(env!("CARGO_MANIFEST_DIR"))])
        .collect();
    let file = starts
        .iter()
        .flat_map(|s| s.ancestors().map(|a| a.join(rel)))
        .find(|p| p.is_file())?;
    serde_json::from_str(&std::fs::read_to_string(file).ok()?).ok()
}

/// Runs the bench `runs` times and describes the best run, with the
/// speed-up over the reference when its timing is recorded.
pub fn report(data: &DataSource, runs: usize) -> Result<String, EnvError> {
    let mut best: Option<BenchReport> = None;
    for _ in 0..runs.max(1) {
        let r = run(data)?;
        if best
            .as_ref()
            .is_none_or(|b| r.load + r.replay < b.load + b.replay)
        {
            best = Some(r);
        }
    }
    let Some(b) = best else {
        unreachable!("at least one run")
    };
    let mut out = format!(
        "τ² gold replay: {} tasks ({} scored 1): load {:.1} ms, replay+evaluate {:.1} ms, total {:.1} ms",
        b.tasks,
        b.solved,
        b.load.as_secs_f64() * 1e3,
        b.replay.as_secs_f64() * 1e3,
        (b.load + b.replay).as_secs_f64() * 1e3
    );
    if let Some(r) = reference_timing() {
        out.push_str(&format!(
            "\nreference (Python): load {:.2} s, replay+evaluate {:.2} s ({} tasks) → speed-up {:.0}× on \
             replay+evaluate, {:.0}× overall",
            r.load_seconds,
            r.replay_seconds,
            r.tasks,
            r.replay_seconds / b.replay.as_secs_f64(),
            (r.load_seconds + r.replay_seconds) / (b.load + b.replay).as_secs_f64()
        ));
    }
    Ok(out)
}
