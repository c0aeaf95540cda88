//! Uncertainty and distributions for the report: percentile bootstrap
//! intervals over tasks (seeded, so a report is a pure function of its
//! directory) and histogram bins.

pub use ecdysis_runner::eval::intervals::{
    Interval, TaskIntervals, bootstrap_mean, task_intervals,
};
#[cfg(test)]
use ecdysis_runner::eval::metrics::TaskResult;

/// Histogram bins of `values` on a log10 scale (fuel and milliseconds span
/// orders of magnitude): `(low edge, high edge, count)` per bin, edges in
/// the values' own unit. Zeros and negatives land in the first bin.
pub fn log_bins(values: &[f64], bins: usize) -> Vec<(f64, f64, u64)> {
    let positive: Vec<f64> = values.iter().copied().filter(|v| *v > 0.0).collect();
    if values.is_empty() || bins == 0 {
        return Vec::new();
    }
    let (lo, hi) = positive
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
            (a.min(*v), b.max(*v))
        });
    let (lo, hi) = if positive.is_empty() {
        (0.0, 1.0)
    } else {
        let lo = lo.log10().floor();
        let hi = hi.log10().ceil().max(lo + 1.0);
        (lo, hi)
    };
    let width = (hi - lo) / bins as f64;
    let mut counts = vec![0u64; bins];
    for v in values {
        let i = if *v > 0.0 {
            (((v.log10() - lo) / width) as usize).min(bins - 1)
        } else {
            0
        };
        counts[i] += 1;
    }
    counts
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            (
                10f64.powf(lo + width * i as f64),
                10f64.powf(lo + width * (i + 1) as f64),
                c,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootstrap_interval_matches_a_hand_computed_case() {
        // Four tasks, one solved. A resample's mean is K/4 with
        // K ~ Binomial(4, 1/4): P(K=0) = 0.316, P(K<=2) = 0.949,
        // P(K<=3) = 0.996. So the 2.5th percentile is 0 and the 97.5th is
        // 3/4 (the CDF first passes 0.975 at K = 3).
        let i = bootstrap_mean(&[0.0, 0.0, 0.0, 1.0], 4000, 7);
        assert_eq!(i.estimate, 0.25);
        assert_eq!(i.low, 0.0);
        assert_eq!(i.high, 0.75);
    }

    #[test]
    fn bootstrap_is_deterministic_and_degenerate_when_constant() {
        let v = [0.2, 0.9, 0.4, 1.0, 0.0, 0.7];
        assert_eq!(bootstrap_mean(&v, 500, 1), bootstrap_mean(&v, 500, 1));
        let c = bootstrap_mean(&[1.0; 5], 500, 3);
        assert_eq!((c.low, c.estimate, c.high), (1.0, 1.0, 1.0));
        let i = bootstrap_mean(&v, 2000, 9);
        assert!(i.low < i.estimate && i.estimate < i.high, "{i:?}");
        assert!(bootstrap_mean(&[], 10, 0).estimate.is_nan());
    }

    #[test]
    fn pass_hat_k_intervals_resample_whole_tasks() {
        let t = |successes| TaskResult {
            task_id: String::new(),
            trials: 2,
            successes,
            mean_reward: successes as f64 / 2.0,
            ends: vec![],
        };
        let iv = task_intervals(&[t(2), t(2), t(0), t(1)], 1000, 0);
        assert_eq!(iv.accuracy.estimate, 5.0 / 8.0);
        assert_eq!(iv.pass_hat_k.len(), 2);
        // pass^2 per task: 1, 1, 0, 0.
        assert_eq!(iv.pass_hat_k[1].1.estimate, 0.5);
        assert_eq!(iv.pass_hat_k[1].1.low, 0.0);
        assert_eq!(iv.pass_hat_k[1].1.high, 1.0);
    }

    #[test]
    fn log_bins_cover_every_value() {
        let v = [1.0, 10.0, 100.0, 1000.0, 0.0];
        let b = log_bins(&v, 3);
        assert_eq!(b.iter().map(|x| x.2).sum::<u64>(), 5);
        assert!((b[0].0 - 1.0).abs() < 1e-9 && (b[2].1 - 1000.0).abs() < 1e-6);
    }
}
