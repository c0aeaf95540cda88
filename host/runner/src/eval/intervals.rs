//! 95% percentile-bootstrap intervals over tasks (seeded, so a result is a
//! pure function of its inputs): the report's intervals and a training
//! run's held-out scores.

use serde::{Deserialize, Serialize};

use super::metrics::TaskResult;

/// A point estimate with a 95% interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// The statistic on the data as observed.
    pub estimate: f64,
    /// Lower end of the 95% interval (2.5th percentile of the resampled means).
    pub low: f64,
    /// Upper end of the 95% interval (97.5th percentile).
    pub high: f64,
}

/// The 95% percentile-bootstrap interval of the mean of `values`: resample
/// the values with replacement `samples` times, take the 2.5th and 97.5th
/// percentiles (nearest rank) of the resampled means.
pub fn bootstrap_mean(values: &[f64], samples: usize, seed: u64) -> Interval {
    let n = values.len();
    if n == 0 {
        return Interval {
            estimate: f64::NAN,
            low: f64::NAN,
            high: f64::NAN,
        };
    }
    let estimate = values.iter().sum::<f64>() / n as f64;
    let samples = samples.max(1);
    let mut rng = ecdysis_sys::rng::SplitMix64::new(seed);
    let mut means: Vec<f64> = (0..samples)
        .map(|_| {
            (0..n)
                .map(|_| values[rng.below(n as u64) as usize])
                .sum::<f64>()
                / n as f64
        })
        .collect();
    means.sort_by(f64::total_cmp);
    let rank = |q: f64| {
        let r = (q * samples as f64).ceil() as usize;
        means[r.clamp(1, samples) - 1]
    };
    Interval {
        estimate,
        low: rank(0.025),
        high: rank(0.975),
    }
}

/// Accuracy and pass^k for k = 1..=max with 95% bootstrap intervals over
/// tasks (the unit τ² averages over): each resample draws tasks, keeping
/// each task's trials together.
pub fn task_intervals(per_task: &[TaskResult], samples: usize, seed: u64) -> TaskIntervals {
    let accuracy: Vec<f64> = per_task.iter().map(|t| t.mean_reward).collect();
    let max_k = per_task.iter().map(|t| t.trials).min().unwrap_or(0);
    let pass_hat_k = (1..=max_k)
        .map(|k| {
            let v: Vec<f64> = per_task
                .iter()
                .map(|t| super::metrics::pass_hat_k(t.trials, t.successes, k))
                .collect();
            // One stream per statistic, all derived from the report seed.
            (k, bootstrap_mean(&v, samples, seed.wrapping_add(k)))
        })
        .collect();
    TaskIntervals {
        accuracy: bootstrap_mean(&accuracy, samples, seed),
        pass_hat_k,
    }
}

/// The headline numbers of a run with their intervals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskIntervals {
    /// Mean reward, with its interval.
    pub accuracy: Interval,
    /// pass^k for k = 1..=the smallest trial count, with intervals.
    pub pass_hat_k: Vec<(u64, Interval)>,
}
