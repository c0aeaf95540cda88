//! `bench --runner`: the host's own share of an evaluation. A full split
//! runs through the agent loop with a simulated agent that answers after a
//! fixed latency, so everything the process does besides waiting is host
//! work: the harness, the environment, scoring and bookkeeping.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::eval::{self, ModelServices, ProgressDisplay, RunHarness, RunOptions, RunSpec, rundir};
use ecdysis_env::Domain;
use ecdysis_model::{CachePolicy, ModelFlags};

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
    /// The wall time a host doing no work at all would need with the
    /// runner's dispatch order (episodes in task order, each on the first
    /// lane to come free): the bound the slack is measured against.
    pub dispatch_bound_seconds: f64,
    /// Host work inside episodes (harness + env + bookkeeping) as a share
    /// of episode wall time, in percent.
    pub episode_host_percent: f64,
    /// Process CPU time (all threads) during the run, in seconds (`None`
    /// where /proc is not available).
    pub cpu_seconds: Option<f64>,
    /// CPU time inside the simulated participants (the `sim:` agent and the
    /// scripted user), which stand in for remote models, in seconds.
    pub simulated_seconds: f64,
    /// Process CPU of scoring's once-per-process setup (every task's gold
    /// replay and DB hash), measured before the run, in seconds.
    pub gold_cpu_seconds: Option<f64>,
    /// Wall time of that setup, in seconds.
    pub gold_wall_seconds: f64,
    /// Wall time inside harness hook calls, summed over every episode's
    /// hook records, in seconds: the guest's code and the read-only calls
    /// it makes. It is part of the host CPU above (hooks run synchronously
    /// on a worker thread), and it is the harness's own cost: another
    /// harness moves it, a host change does not.
    pub hook_seconds: f64,
    /// Process CPU of a run that only waits: the same episodes' model calls
    /// as bare timer waits of the same latency, in the same dispatch order
    /// and concurrency, with no work between them (see [`waiting_floor`]).
    /// What any host pays on this machine to wake for each reply.
    pub waiting_floor_seconds: Option<f64>,
}

impl RunnerBenchReport {
    /// How far above the free-host wall time of the same dispatch order the
    /// measured wall time is, in percent of that bound: the time the host's
    /// own work (and the machine's scheduling) added.
    pub fn slack_percent(&self) -> f64 {
        (self.wall_seconds - self.dispatch_bound_seconds).max(0.0)
            / self.dispatch_bound_seconds.max(1e-9)
            * 100.0
    }

    /// The host's own CPU: the process's minus the simulated
    /// participants', in seconds.
    pub fn host_cpu_seconds(&self) -> Option<f64> {
        self.cpu_seconds
            .map(|c| (c - self.simulated_seconds).max(0.0))
    }

    /// The host's CPU as a share of wall time, in percent.
    pub fn cpu_percent(&self) -> Option<f64> {
        self.host_cpu_seconds()
            .map(|c| c / self.wall_seconds.max(1e-9) * 100.0)
    }

    /// The host's CPU per episode, in microseconds.
    pub fn cpu_us_per_episode(&self) -> Option<f64> {
        self.host_cpu_seconds()
            .map(|c| c * 1e6 / self.episodes.max(1) as f64)
    }

    /// The waiting floor's CPU per episode, in microseconds.
    pub fn floor_us_per_episode(&self) -> Option<f64> {
        self.waiting_floor_seconds
            .map(|c| c * 1e6 / self.episodes.max(1) as f64)
    }

    /// Wall time inside harness hooks per episode, in microseconds.
    pub fn hook_us_per_episode(&self) -> f64 {
        self.hook_seconds * 1e6 / self.episodes.max(1) as f64
    }

    /// The host's CPU outside harness hooks per episode as a multiple of
    /// the waiting floor's: the quantity the regression check compares
    /// ([`super::baseline`]). `None` without a floor.
    pub fn outside_hooks_over_floor(&self) -> Option<f64> {
        let floor = self.floor_us_per_episode().filter(|f| *f > 0.0)?;
        let outside = (self.cpu_us_per_episode()? - self.hook_us_per_episode()).max(0.0);
        Some(outside / floor)
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
            "wall {:.3} s   a free host in the same dispatch order {:.3} s (slack {:.1}%, goal <= 5%)   any schedule >= {:.3} s\n",
            self.wall_seconds,
            self.dispatch_bound_seconds,
            self.slack_percent(),
            self.lower_bound_seconds,
        );
        out += &format!(
            "episode view: {:.2}% of episode wall time is host work (harness + env + bookkeeping), the rest awaits the model\n",
            self.episode_host_percent
        );
        match (self.cpu_percent(), self.cpu_us_per_episode()) {
            (Some(p), Some(us)) => {
                out += &format!(
                    "host CPU {:.3} s = {p:.2}% of wall time, {us:.0} µs per episode (harness + env + scoring + bookkeeping, all threads; goal <= 1%)\n",
                    self.host_cpu_seconds().unwrap_or_default()
                );
                let hooks = self.hook_us_per_episode();
                out += &format!(
                    "  of which {hooks:.0} µs per episode inside harness hooks (guest code and its reads; the harness's own cost) and {:.0} µs the rest of the host\n",
                    (us - hooks).max(0.0)
                );
                out += &format!(
                    "process CPU {:.3} s, of which {:.3} s inside the simulated agent and user (stand-ins for remote models, not host work)\n",
                    self.cpu_seconds.unwrap_or_default(),
                    self.simulated_seconds
                );
            }
            _ => out += "host CPU time: not available on this platform\n",
        }
        if let (Some(floor), Some(us)) = (self.floor_us_per_episode(), self.cpu_us_per_episode()) {
            let share =
                |us: f64| us * self.episodes as f64 / 1e6 / self.wall_seconds.max(1e-9) * 100.0;
            out += &format!(
                "waiting floor: the same model waits with no work between them cost {floor:.0} µs CPU per episode here ({:.2}% of wall; waking after each reply); the host's own work above it is {:.0} µs per episode ({:.2}% of wall)\n",
                share(floor),
                (us - floor).max(0.0),
                share((us - floor).max(0.0)),
            );
        }
        if let Some(gold) = self.gold_cpu_seconds {
            out += &format!(
                "before the run, once per process: every task's gold replay and DB hash, {:.3} s CPU ({:.3} s wall; not in the numbers above)\n",
                gold, self.gold_wall_seconds
            );
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
    let mut spec = RunSpec {
        agent: ModelFlags {
            model: Some("sim:mixed".into()),
            ..ModelFlags::default()
        },
        sim_latency: opts.latency,
        ..RunSpec::default()
    };
    spec.settings.domain = opts.domain.clone();
    spec.settings.split = Some(opts.split.clone());
    spec.settings.trials = opts.trials;
    let hub = ModelServices {
        cache: CachePolicy::Off,
        cache_dir: tmp.join("cache"),
        prices: None,
    }
    .hub()?;
    let options = RunOptions {
        out: tmp.clone(),
        concurrency: opts.concurrency,
        adaptive: None,
        force_new: true,
        progress: ProgressDisplay::Off,
        max_requeues: 0,
    };
    // Scoring's per-process setup (each task's gold replay and DB hash,
    // cached for the process's lifetime, as parsing the domain is) is timed
    // apart: a long-lived process pays it once, not per episode.
    let gold_clock = std::time::Instant::now();
    let gold_cpu_before = process_cpu_seconds();
    eval::do_nothing_solved(&*domain, &spec.task_ids(&*domain)?)?;
    let gold_cpu_seconds = process_cpu_seconds()
        .zip(gold_cpu_before)
        .map(|(a, b)| a - b);
    let gold_wall_seconds = gold_clock.elapsed().as_secs_f64();
    // Held until the measurement ends: freeing the parsed domain is the
    // process's exit, not the run's work.
    let keep_domain = domain.clone();
    let cpu_before = process_cpu_seconds();
    let sim_before = ecdysis_model::sim::cpu::simulated_cpu_seconds();
    let summary = eval::run_spec(&spec, harness, domain, &hub, options).await?;
    let cpu = process_cpu_seconds().zip(cpu_before).map(|(a, b)| a - b);
    drop(keep_domain);
    let simulated_seconds = ecdysis_model::sim::cpu::simulated_cpu_seconds() - sim_before;
    let records = rundir::read_trajectories(&tmp.join(rundir::TRAJECTORIES_FILE), false)?;
    let _ = std::fs::remove_dir_all(&tmp);
    let calls: Vec<u64> = records.iter().map(|r| r.agent_usage.calls).collect();
    // The runner starts episodes task by task, trials in order.
    let by_pair: std::collections::HashMap<(&str, u32), u64> = records
        .iter()
        .map(|r| ((r.task_id.as_str(), r.trial), r.agent_usage.calls))
        .collect();
    let in_dispatch_order: Vec<u64> = summary
        .config
        .tasks
        .iter()
        .flat_map(|t| (0..summary.config.settings.trials).map(move |trial| (t.as_str(), trial)))
        .filter_map(|pair| by_pair.get(&pair).copied())
        .collect();
    let wall_sum: f64 = records.iter().map(|r| r.wall_ms as f64).sum();
    let wait_sum: f64 = records.iter().map(|r| r.model_wait_ms).sum();
    let hook_micros: u64 = records
        .iter()
        .flat_map(|r| r.hooks.iter().map(|h| h.micros))
        .sum();
    Ok(RunnerBenchReport {
        episodes: records.len(),
        wall_seconds: summary.wall_seconds,
        lower_bound_seconds: eval::metrics::zero_overhead_bound(
            &calls,
            opts.latency.as_secs_f64(),
            opts.concurrency,
        ),
        dispatch_bound_seconds: eval::metrics::dispatch_order_bound(
            &in_dispatch_order,
            opts.latency.as_secs_f64(),
            opts.concurrency,
        ),
        episode_host_percent: (wall_sum - wait_sum).max(0.0) / wall_sum.max(1e-9) * 100.0,
        cpu_seconds: cpu,
        simulated_seconds,
        gold_cpu_seconds,
        gold_wall_seconds,
        hook_seconds: hook_micros as f64 / 1e6,
        waiting_floor_seconds: waiting_floor(&in_dispatch_order, opts.latency, opts.concurrency)
            .await,
    })
}

/// Process CPU of a run that only waits: episode `i` makes
/// `calls_in_dispatch_order[i]` sequential waits of `latency` (a timer, as
/// the simulated model's reply is), episodes start in order on the first of
/// `concurrency` lanes to come free, and nothing else runs. On an idle
/// machine each wake-up after a long wait finds cold caches (and, on a
/// virtual machine, a halted virtual CPU), which costs tens of microseconds
/// however little the woken task does; this measures that floor on the same
/// runtime, side by side with the run, so the host's own work can be told
/// from it. `None` where the process CPU clock is not available.
pub async fn waiting_floor(
    calls_in_dispatch_order: &[u64],
    latency: Duration,
    concurrency: usize,
) -> Option<f64> {
    let lanes = Arc::new(tokio::sync::Semaphore::new(concurrency.max(1)));
    let before = process_cpu_seconds()?;
    let mut set = tokio::task::JoinSet::new();
    for &calls in calls_in_dispatch_order {
        let permit = lanes.clone().acquire_owned().await.expect("semaphore open");
        set.spawn(async move {
            let _permit = permit;
            for _ in 0..calls {
                tokio::time::sleep(latency).await;
            }
        });
    }
    while set.join_next().await.is_some() {}
    Some(process_cpu_seconds()? - before)
}

/// CPU seconds (user + system, all threads) this process has used so far.
/// `CLOCK_PROCESS_CPUTIME_ID` has nanosecond resolution; `/proc/self/stat`
/// counts 10 ms ticks, too coarse for a bench run's host CPU.
pub fn process_cpu_seconds() -> Option<f64> {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Some(ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_cpu_time_counts_work_finer_than_a_clock_tick() {
        let thread_cpu = || {
            let ts = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
            ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
        };
        let before = process_cpu_seconds().expect("Linux has a process CPU clock");
        // A millisecond of this thread's CPU, a tenth of /proc's 10 ms tick,
        // by its own clock: a wall-clock millisecond is less CPU on a loaded
        // machine. The process's clock counts this thread's work and the
        // other tests' beside it.
        let start = thread_cpu();
        let mut x = 0u64;
        while thread_cpu() - start < 0.001 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        let spent = process_cpu_seconds().unwrap() - before;
        assert!(
            (0.001..0.5).contains(&spent),
            "{spent} s for 1 ms of this thread's work"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_waiting_floor_waits_each_episodes_calls_on_its_lanes() {
        // 6 episodes of 2 calls at 20 ms on 3 lanes: two rounds of 40 ms.
        let started = std::time::Instant::now();
        let cpu = waiting_floor(&[2; 6], Duration::from_millis(20), 3)
            .await
            .expect("Linux has a process CPU clock");
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(80), "{took:?}");
        assert!(took < Duration::from_millis(80 * 10), "{took:?}");
        assert!(cpu >= 0.0 && cpu < took.as_secs_f64() * 2.0, "{cpu}");
    }

    #[test]
    fn the_report_splits_host_cpu_into_hooks_and_the_rest() {
        let report = RunnerBenchReport {
            episodes: 4,
            wall_seconds: 2.0,
            lower_bound_seconds: 1.5,
            dispatch_bound_seconds: 1.6,
            episode_host_percent: 0.5,
            cpu_seconds: Some(0.05),
            simulated_seconds: 0.01,
            gold_cpu_seconds: None,
            gold_wall_seconds: 0.0,
            hook_seconds: 0.004,
            waiting_floor_seconds: Some(0.02),
        };
        assert!((report.cpu_us_per_episode().unwrap() - 10_000.0).abs() < 1e-6);
        assert!((report.hook_us_per_episode() - 1_000.0).abs() < 1e-6);
        let text = report.render(&RunnerBenchOptions::default(), "h");
        assert!(
            text.contains("2.00% of wall time, 10000 µs per episode"),
            "{text}"
        );
        assert!(
            text.contains("1000 µs per episode inside harness hooks"),
            "{text}"
        );
        assert!(text.contains("9000 µs the rest of the host"), "{text}");
        assert!(
            text.contains("cost 5000 µs CPU per episode here (1.00% of wall"),
            "{text}"
        );
        assert!(
            text.contains("above it is 5000 µs per episode (1.00% of wall)"),
            "{text}"
        );
        assert!(text.contains(eval::SIMULATED_LABEL), "{text}");
    }
}
