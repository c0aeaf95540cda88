//! `bench --runner`: the host's own share of an evaluation. A full split
//! runs through the agent loop with a simulated agent that answers after a
//! fixed latency, so everything the process does besides waiting is host
//! work: the harness, the environment, scoring and bookkeeping.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::env::Domain;
use crate::eval::{self, ModelServices, RunHarness, RunOptions, RunSpec, rundir};
use crate::model::{CachePolicy, ModelFlags};

/// What the runner bench measures.
#[derive(Debug, Clone)]
pub struct RunnerBenchOptions {
    /// Simulated model latency per agent call.
    pub latency: Duration,
    /// Episodes at once.
    pub concurrency: usize,
    /// Trials per task.
    pub trials: u32,
    /// Domain and split to run.
    pub domain: String,
    /// The split.
    pub split: String,
}

impl Default for RunnerBenchOptions {
    fn default() -> Self {
        RunnerBenchOptions {
            latency: Duration::from_millis(200),
            concurrency: 32,
            trials: 3,
            domain: "tau2/retail".into(),
            split: "test".into(),
        }
    }
}

/// The runner bench's numbers.
#[derive(Debug, Clone, Serialize)]
pub struct RunnerBenchReport {
    /// Episodes run.
    pub episodes: usize,
    /// Wall time of the run, in seconds.
    pub wall_seconds: f64,
    /// The wall time a host doing no work at all would need: each
    /// episode's model calls at the fixed latency, packed onto
    /// `concurrency` slots.
    pub lower_bound_seconds: f64,
    /// Host work inside episodes (harness + env + bookkeeping) as a share
    /// of episode wall time, in percent.
    pub episode_host_percent: f64,
    /// Process CPU time (all threads) during the run, in seconds (`None`
    /// where /proc is not available).
    pub cpu_seconds: Option<f64>,
}

impl RunnerBenchReport {
    /// How far above the free-host lower bound the wall time is, in
    /// percent.
    pub fn slack_percent(&self) -> f64 {
        (self.wall_seconds - self.lower_bound_seconds).max(0.0) / self.wall_seconds.max(1e-9)
            * 100.0
    }

    /// Process CPU as a share of wall time, in percent.
    pub fn cpu_percent(&self) -> Option<f64> {
        self.cpu_seconds
            .map(|c| c / self.wall_seconds.max(1e-9) * 100.0)
    }

    /// Process CPU per episode, in microseconds.
    pub fn cpu_us_per_episode(&self) -> Option<f64> {
        self.cpu_seconds
            .map(|c| c * 1e6 / self.episodes.max(1) as f64)
    }

    /// The text `bench --runner` prints.
    pub fn render(&self, opts: &RunnerBenchOptions, harness: &str) -> String {
        let mut out = format!(
            "runner bench: {} {}, {} episodes, sim:mixed at {} ms/call, concurrency {}, harness {harness} ({})\n",
            opts.domain,
            opts.split,
            self.episodes,
            opts.latency.as_millis(),
            opts.concurrency,
            eval::SIMULATED_LABEL
        );
        out += &format!(
            "wall {:.3} s   lower bound with a free host {:.3} s (slack {:.1}%: scheduling, not only host work; goal <= 5%)\n",
            self.wall_seconds,
            self.lower_bound_seconds,
            self.slack_percent()
        );
        out += &format!(
            "episode view: {:.2}% of episode wall time is host work (harness + env + bookkeeping), the rest awaits the model\n",
            self.episode_host_percent
        );
        match (self.cpu_percent(), self.cpu_us_per_episode()) {
            (Some(p), Some(us)) => {
                out += &format!(
                    "host CPU {:.3} s = {p:.2}% of wall time, {us:.0} µs per episode (harness + env + scoring + bookkeeping, all threads; goal <= 1%)\n",
                    self.cpu_seconds.unwrap_or_default()
                )
            }
            _ => out += "host CPU time: not available on this platform\n",
        }
        out
    }
}

/// Run the bench: `harness` (`None`: Direct) on the options' split with a
/// `sim:mixed` agent of fixed latency, into a temporary directory.
pub async fn run(
    opts: &RunnerBenchOptions,
    harness: Option<RunHarness>,
    domain: Arc<dyn Domain>,
) -> Result<RunnerBenchReport, eval::RunError> {
    let tmp = std::env::temp_dir().join(format!("ecdysis-bench-run-{}", std::process::id()));
    let spec = RunSpec {
        domain: opts.domain.clone(),
        split: Some(opts.split.clone()),
        trials: opts.trials,
        agent: ModelFlags {
            model: Some("sim:mixed".into()),
            ..ModelFlags::default()
        },
        sim_latency: opts.latency,
        ..RunSpec::default()
    };
    let hub = ModelServices {
        cache: CachePolicy::Off,
        cache_dir: tmp.join("cache"),
        prices: None,
    }
    .hub()?;
    let options = RunOptions {
        out: tmp.clone(),
        concurrency: opts.concurrency,
        force_new: true,
        quiet: true,
        silent: true,
        max_requeues: 0,
    };
    let cpu_before = process_cpu_seconds();
    let summary = eval::run_spec(&spec, harness, domain, &hub, options).await?;
    let cpu = process_cpu_seconds().zip(cpu_before).map(|(a, b)| a - b);
    let records = rundir::read_trajectories(&tmp.join(rundir::TRAJECTORIES_FILE), false)?;
    let _ = std::fs::remove_dir_all(&tmp);
    let calls: Vec<u64> = records.iter().map(|r| r.agent_usage.calls).collect();
    let wall_sum: f64 = records.iter().map(|r| r.wall_ms as f64).sum();
    let wait_sum: f64 = records.iter().map(|r| r.model_wait_ms).sum();
    Ok(RunnerBenchReport {
        episodes: records.len(),
        wall_seconds: summary.wall_seconds,
        lower_bound_seconds: eval::metrics::zero_overhead_bound(
            &calls,
            opts.latency.as_secs_f64(),
            opts.concurrency,
        ),
        episode_host_percent: (wall_sum - wait_sum).max(0.0) / wall_sum.max(1e-9) * 100.0,
        cpu_seconds: cpu,
    })
}

/// CPU seconds (user + system, all threads) this process has used so far,
/// from /proc/self/stat (Linux).
pub fn process_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may contain spaces) start at
    // field 3; utime and stime are fields 14 and 15, in clock ticks.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    // USER_HZ is 100 on every Linux we run on.
    Some((utime + stime) / 100.0)
}
