//! The gate's acceptance rule: does a candidate's training result beat the
//! incumbent's?
//!
//! `strict` is the paper's rule (a higher mean reward wins). On small
//! training splits with a stochastic agent it also accepts noise: a
//! candidate that only got lucky on two or three tasks. `paired` compares
//! the two harnesses on the same (task, trial) episodes and asks a one-sided
//! sign-flip test whether the per-task improvements could plausibly be
//! chance.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use ecdysis_runner::agent::EpisodeRecord;
use ecdysis_runner::eval::intervals::{Interval, bootstrap_mean};

/// Up to this many nonzero task differences the sign-flip test enumerates
/// every sign assignment (2^20 sums, well under a second); beyond it the
/// enumeration doubles per task, so it samples.
const EXACT_MAX_TASKS: usize = 20;

/// Random sign vectors drawn when the test samples: the Monte Carlo p-value
/// then has a standard error of at most 0.0016, far below any alpha used.
const MONTE_CARLO_DRAWS: u64 = 100_000;

/// Fixed seed of the sampler, so a gate decision is reproducible from the
/// records alone.
const MONTE_CARLO_SEED: u64 = 0x0EC0_D15E_5EED_0001;

/// Relative tolerance for "the same sum": a flipped assignment whose sum
/// equals the observed one up to float rounding must count as a hit, or a
/// tie would lower p depending on summation order.
const TIE_EPS: f64 = 1e-9;

/// How a candidate's training result is compared with the incumbent's.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "rule", rename_all = "kebab-case")]
pub enum AcceptRule {
    /// Accept iff the candidate's mean reward strictly exceeds the
    /// incumbent's (the paper's rule; default).
    Strict,
    /// Noise-aware: accept iff the mean paired difference is > 0 AND a
    /// one-sided paired sign-flip (randomization) test gives p <= alpha.
    Paired {
        /// Significance level, strictly between 0 and 1.
        alpha: f64,
    },
}

/// The significance level of the paired rule when none is given
/// (`--accept-alpha`).
pub const DEFAULT_PAIRED_ALPHA: f64 = 0.05;

impl Default for AcceptRule {
    /// The paper's rule, so runs without the option reproduce it.
    fn default() -> Self {
        AcceptRule::Strict
    }
}

/// A `--accept` rule or alpha that cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AcceptRuleError {
    /// Neither `strict` nor `paired`.
    #[error("unknown acceptance rule {0:?}: expected \"strict\" or \"paired\"")]
    Unknown(String),
    /// The paired rule's alpha is not in (0, 1).
    #[error("alpha {0} is not a significance level: it must lie strictly between 0 and 1")]
    Alpha(f64),
}

impl AcceptRule {
    /// From the command line: `strict` or `paired`. `alpha` is only used,
    /// and so only checked, by `paired`: a default alpha passed alongside
    /// `strict` must not make the paper's rule fail to parse.
    pub fn parse(rule: &str, alpha: f64) -> Result<Self, AcceptRuleError> {
        match rule {
            "strict" => Ok(AcceptRule::Strict),
            "paired" => {
                // Written as a negated range test so NaN is rejected too.
                if !(alpha > 0.0 && alpha < 1.0) {
                    return Err(AcceptRuleError::Alpha(alpha));
                }
                Ok(AcceptRule::Paired { alpha })
            }
            other => Err(AcceptRuleError::Unknown(other.to_string())),
        }
    }

    /// The rule's name as `--accept` takes it: `strict` or `paired`.
    pub fn as_str(self) -> &'static str {
        match self {
            AcceptRule::Strict => "strict",
            AcceptRule::Paired { .. } => "paired",
        }
    }
}

/// The gate's decision with the evidence behind it (written to
/// `rounds.jsonl`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// Whether the candidate replaces the incumbent.
    pub accepted: bool,
    /// Mean reward of the incumbent over the paired episodes.
    pub incumbent_score: f64,
    /// Mean reward of the candidate over the same episodes.
    pub candidate_score: f64,
    /// (task, trial) episodes both harnesses have.
    pub pairs: usize,
    /// One-sided sign-flip p-value (`paired` only).
    pub p_value: Option<f64>,
    /// The decision in words, with the scores (e.g. `accepted: 0.7250 >
    /// 0.6500`).
    pub reason: String,
}

/// Compare a candidate with the incumbent under `rule`.
///
/// Only (task, trial) episodes present in both lists count, so a candidate
/// evaluated on an extra task (or missing a requeued one) is compared on
/// common ground. If a list repeats a (task, trial), its first episode is
/// used.
pub fn decide(
    rule: AcceptRule,
    incumbent: &[EpisodeRecord],
    candidate: &[EpisodeRecord],
) -> Verdict {
    let inc = by_episode(incumbent);
    let cand = by_episode(candidate);
    // BTreeMap order makes the sums (and so the float results) independent
    // of the order the runner wrote the episodes in.
    let pairs: Vec<((&str, u32), f64, f64)> = inc
        .iter()
        .filter_map(|(k, &i)| cand.get(k).map(|&c| (*k, i, c)))
        .collect();
    if pairs.is_empty() {
        return Verdict {
            accepted: false,
            incumbent_score: 0.0,
            candidate_score: 0.0,
            pairs: 0,
            p_value: None,
            reason: "rejected: no (task, trial) episode was evaluated for both harnesses".into(),
        };
    }
    let n = pairs.len() as f64;
    let incumbent_score = pairs.iter().map(|p| p.1).sum::<f64>() / n;
    let candidate_score = pairs.iter().map(|p| p.2).sum::<f64>() / n;

    match rule {
        AcceptRule::Strict => {
            let accepted = candidate_score > incumbent_score;
            let reason = if accepted {
                format!("accepted: {candidate_score:.4} > {incumbent_score:.4}")
            } else {
                format!("rejected: {candidate_score:.4} does not beat {incumbent_score:.4}")
            };
            Verdict {
                accepted,
                incumbent_score,
                candidate_score,
                pairs: pairs.len(),
                p_value: None,
                reason,
            }
        }
        AcceptRule::Paired { alpha } => {
            // Tasks, not episodes, are the independent units: trials of one
            // task share its difficulty, so each task contributes one
            // difference (its trials' mean).
            let mut per_task: BTreeMap<&str, (f64, usize)> = BTreeMap::new();
            for ((task, _), i, c) in &pairs {
                let e = per_task.entry(task).or_default();
                e.0 += c - i;
                e.1 += 1;
            }
            let diffs: Vec<f64> = per_task.values().map(|(s, k)| s / *k as f64).collect();
            let p = sign_flip_p(&diffs);
            // The improvement is judged on the same scores the verdict
            // reports, so an accepted candidate never shows a lower score.
            let delta = candidate_score - incumbent_score;
            let accepted = delta > 0.0 && p <= alpha;
            let tasks = per_task.len();
            let reason = if accepted {
                format!(
                    "accepted: {delta:+.4} over {tasks} tasks, p={} <= alpha {alpha}",
                    fmt_p(p)
                )
            } else if delta <= 0.0 {
                format!(
                    "rejected: {delta:+.4} over {tasks} tasks is no improvement (p={})",
                    fmt_p(p)
                )
            } else {
                format!(
                    "rejected: {delta:+.4} over {tasks} tasks, p={} > alpha {alpha}",
                    fmt_p(p)
                )
            };
            Verdict {
                accepted,
                incumbent_score,
                candidate_score,
                pairs: pairs.len(),
                p_value: Some(p),
                reason,
            }
        }
    }
}

/// How `candidate` differs from `reference` over their common (task,
/// trial) episodes, tasks as the units: the mean of the per-task
/// differences with its 95% bootstrap interval, and the sign-flip test in
/// both directions.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PairedDifference {
    /// Tasks with at least one common episode.
    pub tasks: usize,
    /// Mean reward of the reference over the common episodes.
    pub reference_score: f64,
    /// Mean reward of the candidate over the same episodes.
    pub candidate_score: f64,
    /// Candidate minus reference, mean over tasks, with its interval.
    pub delta: Interval,
    /// One-sided p that the candidate is better.
    pub p_better: f64,
    /// One-sided p that the candidate is worse.
    pub p_worse: f64,
}

impl PairedDifference {
    /// Two-sided p: twice the smaller one-sided p, at most 1.
    pub fn p_two_sided(&self) -> f64 {
        (2.0 * self.p_better.min(self.p_worse)).min(1.0)
    }
}

/// The paired difference of `candidate` over `reference` (`None` without
/// a common episode); `seed` makes the interval reproducible.
pub fn paired_difference(
    reference: &[EpisodeRecord],
    candidate: &[EpisodeRecord],
    seed: u64,
) -> Option<PairedDifference> {
    let inc = by_episode(reference);
    let cand = by_episode(candidate);
    let mut per_task: BTreeMap<&str, (f64, f64, usize)> = BTreeMap::new();
    for (k, &r) in &inc {
        if let Some(&c) = cand.get(k) {
            let e = per_task.entry(k.0).or_default();
            e.0 += r;
            e.1 += c;
            e.2 += 1;
        }
    }
    if per_task.is_empty() {
        return None;
    }
    let episodes: usize = per_task.values().map(|e| e.2).sum();
    let diffs: Vec<f64> = per_task
        .values()
        .map(|(r, c, k)| (c - r) / *k as f64)
        .collect();
    let negated: Vec<f64> = diffs.iter().map(|d| -d).collect();
    Some(PairedDifference {
        tasks: per_task.len(),
        reference_score: per_task.values().map(|e| e.0).sum::<f64>() / episodes as f64,
        candidate_score: per_task.values().map(|e| e.1).sum::<f64>() / episodes as f64,
        delta: bootstrap_mean(&diffs, DIFFERENCE_BOOTSTRAP, seed),
        p_better: sign_flip_p(&diffs),
        p_worse: sign_flip_p(&negated),
    })
}

/// Bootstrap resamples of a paired difference's interval.
const DIFFERENCE_BOOTSTRAP: usize = 2000;

/// Reward per (task, trial), first episode wins.
pub(crate) fn by_episode(records: &[EpisodeRecord]) -> BTreeMap<(&str, u32), f64> {
    let mut out = BTreeMap::new();
    for r in records {
        out.entry((r.task_id.as_str(), r.trial)).or_insert(r.reward);
    }
    out
}

/// A p-value cell of a table: three decimals, `<0.001` below, `-` when
/// absent.
pub fn p_cell(p: Option<f64>) -> String {
    match p {
        Some(p) if p < 0.001 => "<0.001".into(),
        Some(p) => format!("{p:.3}"),
        None => "-".into(),
    }
}

/// Short, readable p: four decimals without trailing zeros, scientific once
/// that would print as zero.
fn fmt_p(p: f64) -> String {
    if p > 0.0 && p < 1e-4 {
        return format!("{p:.1e}");
    }
    let s = format!("{p:.4}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

/// One-sided p-value of the paired sign-flip test on per-task differences:
/// under "no effect" each difference is as likely positive as negative, so
/// p is the share of sign assignments whose sum reaches the observed sum.
/// Zero differences carry no sign and are dropped; none left gives p = 1.
pub(crate) fn sign_flip_p(diffs: &[f64]) -> f64 {
    sign_flip_p_scaled(diffs, None)
}

/// [`sign_flip_p`] with the tie tolerance sized for differences whose
/// absolute sum is `scale` instead of their own: the racing gate bounds
/// the p of every completion of a partial evaluation by one completion's p,
/// and the bound holds only if that one is computed with the tolerance no
/// completion goes below (or above).
pub(crate) fn sign_flip_p_scaled(diffs: &[f64], scale: Option<f64>) -> f64 {
    let d: Vec<f64> = diffs.iter().copied().filter(|x| !is_zero(*x)).collect();
    if d.is_empty() {
        return 1.0;
    }
    let tol = tolerance(scale.unwrap_or_else(|| d.iter().map(|x| x.abs()).sum()));
    if d.len() <= EXACT_MAX_TASKS {
        exact_p(&d, tol)
    } else {
        monte_carlo_p(&d, MONTE_CARLO_DRAWS, MONTE_CARLO_SEED, tol)
    }
}

/// A difference that carries no sign.
pub(crate) fn is_zero(x: f64) -> bool {
    x.abs() <= 1e-12
}

/// Whether `sign_flip_p` of `n` nonzero differences enumerates (else it
/// samples).
pub(crate) fn is_exact(n: usize) -> bool {
    n <= EXACT_MAX_TASKS
}

/// The largest standard error of a sampled p.
pub(crate) fn sampled_p_standard_error() -> f64 {
    0.5 / (MONTE_CARLO_DRAWS as f64).sqrt()
}

fn tolerance(abs_sum: f64) -> f64 {
    TIE_EPS * (1.0 + abs_sum)
}

/// Every one of the 2^n assignments.
fn exact_p(d: &[f64], tol: f64) -> f64 {
    let observed: f64 = d.iter().sum();
    let threshold = observed - tol;
    let n = d.len();
    let total = 1u64 << n;
    let mut hits = 0u64;
    for mask in 0..total {
        // Bit i set flips d[i].
        let sum: f64 = d
            .iter()
            .enumerate()
            .map(|(i, x)| if mask >> i & 1 == 1 { -x } else { *x })
            .sum();
        if sum >= threshold {
            hits += 1;
        }
    }
    hits as f64 / total as f64
}

/// `draws` random assignments; the observed one is counted as a draw too,
/// which keeps the estimate a valid p-value (never 0).
fn monte_carlo_p(d: &[f64], draws: u64, seed: u64, tol: f64) -> f64 {
    let observed: f64 = d.iter().sum();
    let threshold = observed - tol;
    let mut rng = ecdysis_sys::rng::SplitMix64::new(seed);
    let mut hits = 0u64;
    for _ in 0..draws {
        let mut sum = 0.0;
        for chunk in d.chunks(64) {
            let bits = rng.next_u64();
            for (i, x) in chunk.iter().enumerate() {
                sum += if bits >> i & 1 == 1 { -x } else { *x };
            }
        }
        if sum >= threshold {
            hits += 1;
        }
    }
    (hits + 1) as f64 / (draws + 1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_paired_difference_counts_common_episodes_with_tasks_as_units() {
        // Task a: 1 → 0 on both trials; b: 0 → 1 on one of two; c only in
        // the reference (not compared).
        let reference = [
            ep("a", 0, 1.0),
            ep("a", 1, 1.0),
            ep("b", 0, 0.0),
            ep("b", 1, 0.0),
            ep("c", 0, 1.0),
        ];
        let candidate = [
            ep("a", 0, 0.0),
            ep("a", 1, 0.0),
            ep("b", 0, 1.0),
            ep("b", 1, 0.0),
        ];
        let d = paired_difference(&reference, &candidate, 7).unwrap();
        assert_eq!(d.tasks, 2);
        assert_eq!((d.reference_score, d.candidate_score), (0.5, 0.25));
        // Per-task differences -1 and +0.5: mean -0.25.
        assert_eq!(d.delta.estimate, -0.25);
        assert!(d.delta.low <= -0.25 && d.delta.high >= -0.25);
        // Four sign assignments: sums -0.5, 1.5, -1.5, 0.5.
        assert_eq!((d.p_better, d.p_worse), (0.75, 0.5));
        assert_eq!(d.p_two_sided(), 1.0);
        assert_eq!(paired_difference(&reference, &[], 7), None);
        // Ten tasks all lost: the worse side is significant, the other not.
        let r: Vec<_> = (0..10).map(|i| ep(&i.to_string(), 0, 1.0)).collect();
        let c: Vec<_> = (0..10).map(|i| ep(&i.to_string(), 0, 0.0)).collect();
        let d = paired_difference(&r, &c, 7).unwrap();
        assert_eq!(d.p_worse, 1.0 / 1024.0);
        assert_eq!(d.p_better, 1.0);
        assert_eq!((d.delta.low, d.delta.high), (-1.0, -1.0));
    }

    fn ep(task: &str, trial: u32, reward: f64) -> EpisodeRecord {
        EpisodeRecord::bare(task, trial, reward)
    }

    /// 40 tasks, one trial each; the incumbent solves the first 26 (0.65).
    /// The candidate additionally solves `better` of the others and loses
    /// `worse` of the solved ones.
    fn forty(better: usize, worse: usize) -> (Vec<EpisodeRecord>, Vec<EpisodeRecord>) {
        let mut inc = Vec::new();
        let mut cand = Vec::new();
        for t in 0..40 {
            let task = format!("t{t}");
            let i = if t < 26 { 1.0 } else { 0.0 };
            let c = if (26..26 + better).contains(&t) {
                1.0
            } else if t < worse {
                0.0
            } else {
                i
            };
            inc.push(ep(&task, 0, i));
            cand.push(ep(&task, 0, c));
        }
        (inc, cand)
    }

    #[test]
    fn strict_accepts_only_a_strict_improvement() {
        let (inc, cand) = forty(3, 0);
        let v = decide(AcceptRule::Strict, &inc, &cand);
        assert!(v.accepted, "{v:?}");
        assert_eq!(v.pairs, 40);
        assert!((v.incumbent_score - 0.65).abs() < 1e-12);
        assert!((v.candidate_score - 0.725).abs() < 1e-12);
        assert_eq!(v.reason, "accepted: 0.7250 > 0.6500");
        assert_eq!(v.p_value, None);

        let tie = decide(AcceptRule::Strict, &inc, &inc);
        assert!(!tie.accepted);
        assert_eq!(tie.reason, "rejected: 0.6500 does not beat 0.6500");

        // Swapping the roles must reject: the rule is one-sided.
        assert!(!decide(AcceptRule::Strict, &cand, &inc).accepted);
    }

    #[test]
    fn unmatched_episodes_are_ignored() {
        let inc = vec![ep("a", 0, 1.0), ep("b", 0, 0.0)];
        // Same on a and b, plus a solved task (and trial) the incumbent never
        // ran: counting them would lift the candidate to 0.75.
        let cand = vec![
            ep("a", 0, 1.0),
            ep("b", 0, 0.0),
            ep("c", 0, 1.0),
            ep("a", 1, 1.0),
        ];
        let v = decide(AcceptRule::Strict, &inc, &cand);
        assert_eq!(v.pairs, 2);
        assert_eq!(v.candidate_score, 0.5);
        assert!(!v.accepted, "{v:?}");
    }

    #[test]
    fn no_common_episode_is_rejected() {
        let v = decide(AcceptRule::Strict, &[ep("a", 0, 0.0)], &[ep("b", 0, 1.0)]);
        assert!(!v.accepted);
        assert_eq!(v.pairs, 0);
        assert!(v.reason.contains("no (task, trial)"), "{}", v.reason);
    }

    #[test]
    fn paired_three_improvements_of_forty_are_not_significant() {
        let (inc, cand) = forty(3, 0);
        let v = decide(AcceptRule::Paired { alpha: 0.05 }, &inc, &cand);
        // Only the all-positive assignment of 3 signs reaches the sum: 1/8.
        assert_eq!(v.p_value, Some(0.125));
        assert!(!v.accepted);
        assert_eq!(
            v.reason,
            "rejected: +0.0750 over 40 tasks, p=0.125 > alpha 0.05"
        );
    }

    #[test]
    fn paired_six_improvements_none_worse_are_accepted() {
        let (inc, cand) = forty(6, 0);
        let v = decide(AcceptRule::Paired { alpha: 0.05 }, &inc, &cand);
        assert_eq!(v.p_value, Some(1.0 / 64.0));
        assert!(v.accepted, "{v:?}");
        assert!(
            v.reason
                .starts_with("accepted: +0.1500 over 40 tasks, p=0.0156"),
            "{}",
            v.reason
        );
    }

    #[test]
    fn paired_rejects_a_regression_whatever_alpha() {
        let (inc, cand) = forty(1, 3);
        let v = decide(AcceptRule::Paired { alpha: 0.99 }, &inc, &cand);
        assert!(!v.accepted, "{v:?}");
        assert!(v.reason.contains("no improvement"), "{}", v.reason);
    }

    #[test]
    fn paired_differences_are_per_task_not_per_episode() {
        // Task a improves on both trials, b is unchanged. Per episode there
        // would be two positive differences (p = 1/4); per task there is one
        // (p = 1/2).
        let inc = vec![ep("a", 0, 0.0), ep("a", 1, 0.0), ep("b", 0, 1.0)];
        let cand = vec![ep("a", 0, 1.0), ep("a", 1, 1.0), ep("b", 0, 1.0)];
        let v = decide(AcceptRule::Paired { alpha: 0.05 }, &inc, &cand);
        assert_eq!(v.p_value, Some(0.5));
        assert_eq!(v.pairs, 3);
    }

    #[test]
    fn exact_p_on_hand_checked_cases() {
        // d = [+1, +1, -1], observed sum 1. The 8 sign assignments:
        //   +1+1-1 = 1 ✓   +1+1+1 = 3 ✓   +1-1-1 = -1    +1-1+1 = 1 ✓
        //   -1+1-1 = -1    -1+1+1 = 1 ✓   -1-1-1 = -3    -1-1+1 = -1
        // 4 of 8 reach 1.
        assert_eq!(sign_flip_p(&[1.0, 1.0, -1.0]), 0.5);
        // d = [+2, +1, -1], observed sum 2:
        //   +2+1-1 = 2 ✓   +2+1+1 = 4 ✓   +2-1-1 = 0     +2-1+1 = 2 ✓
        //   -2+1-1 = -2    -2+1+1 = 0     -2-1-1 = -4    -2-1+1 = -2
        // 3 of 8.
        assert_eq!(sign_flip_p(&[2.0, 1.0, -1.0]), 0.375);
        // Zeros carry no sign: same as [+1] alone.
        assert_eq!(sign_flip_p(&[0.0, 1.0, 0.0]), 0.5);
        assert_eq!(sign_flip_p(&[0.0, 0.0]), 1.0);
        assert_eq!(sign_flip_p(&[]), 1.0);
    }

    #[test]
    fn float_ties_count_as_hits() {
        // 0.1 + 0.2 and 0.3 differ in the last bit, so the observed sum is
        // +5.6e-17 and flipping every sign gives -5.6e-17: the same sum up
        // to rounding, which must count. Signs applied to [0.1, 0.2, -0.3]:
        //   (+,+,+)=0 ✓ (+,+,-)=0.6 ✓ (+,-,+)=-0.4 (+,-,-)=0.2 ✓
        //   (-,+,+)=-0.2 (-,+,-)=0.4 ✓ (-,-,+)=-0.6 (-,-,-)=0 ✓
        assert_eq!(sign_flip_p(&[0.1, 0.2, -0.3]), 5.0 / 8.0);
    }

    /// Differences of varied size, 20 up and 10 down (normal-approximation
    /// p about 0.069).
    fn thirty() -> Vec<f64> {
        (1..=30)
            .map(|i| {
                let size = 0.1 + (i % 7) as f64 * 0.05;
                if i % 10 == 3 || i % 4 == 0 {
                    -size
                } else {
                    size
                }
            })
            .collect()
    }

    /// Standard normal upper tail, via Abramowitz–Stegun 7.1.26 for erfc
    /// (absolute error below 1.5e-7, far inside the tolerance used).
    fn normal_upper_tail(z: f64) -> f64 {
        let x = z / std::f64::consts::SQRT_2;
        let t = 1.0 / (1.0 + 0.327_591_1 * x.abs());
        let poly = t
            * (0.254_829_592
                + t * (-0.284_496_736
                    + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
        let erfc = poly * (-x * x).exp();
        let erfc = if x >= 0.0 { erfc } else { 2.0 - erfc };
        erfc / 2.0
    }

    #[test]
    fn many_tasks_sample_deterministically_near_the_normal_approximation() {
        let d = thirty();
        assert_eq!(d.len(), 30);
        let p = sign_flip_p(&d);
        assert_eq!(p, sign_flip_p(&d), "the sampler must be reproducible");
        // Under the null, the sum has mean 0 and variance sum(d²).
        let observed: f64 = d.iter().sum();
        let sd = d.iter().map(|x| x * x).sum::<f64>().sqrt();
        let approx = normal_upper_tail(observed / sd);
        // A case where the test is neither trivially 0 nor 1.
        assert!(approx > 0.005 && approx < 0.2, "approx {approx}");
        assert!((p - approx).abs() < 0.01, "p {p} vs normal {approx}");
        // The sampler's p is a multiple of 1/(draws+1), unlike exact_p's.
        let hits = p * (MONTE_CARLO_DRAWS + 1) as f64;
        assert!((hits - hits.round()).abs() < 1e-6);
    }

    #[test]
    fn sampler_agrees_with_enumeration() {
        let d: Vec<f64> = thirty().into_iter().take(16).collect();
        let tol = tolerance(d.iter().map(|x| x.abs()).sum());
        let exact = exact_p(&d, tol);
        let sampled = monte_carlo_p(&d, MONTE_CARLO_DRAWS, MONTE_CARLO_SEED, tol);
        assert!(
            (exact - sampled).abs() < 0.006,
            "exact {exact} vs sampled {sampled}"
        );
    }

    #[test]
    fn parse_names_the_bad_input() {
        assert_eq!(AcceptRule::parse("strict", 0.05), Ok(AcceptRule::Strict));
        assert_eq!(
            AcceptRule::parse("paired", 0.05),
            Ok(AcceptRule::Paired { alpha: 0.05 })
        );
        let e = AcceptRule::parse("lenient", 0.05).unwrap_err();
        assert_eq!(e, AcceptRuleError::Unknown("lenient".into()));
        assert!(e.to_string().contains("\"lenient\""), "{e}");
        for bad in [0.0, 1.0, 1.5, -0.1] {
            let e = AcceptRule::parse("paired", bad).unwrap_err();
            assert!(e.to_string().contains(&format!("alpha {bad}")), "{e}");
        }
        assert!(
            AcceptRule::parse("paired", f64::NAN)
                .unwrap_err()
                .to_string()
                .contains("NaN")
        );
    }

    #[test]
    fn rule_serializes_with_a_tag() {
        assert_eq!(
            serde_json::to_value(AcceptRule::Paired { alpha: 0.05 }).unwrap(),
            serde_json::json!({"rule": "paired", "alpha": 0.05})
        );
        assert_eq!(
            serde_json::to_value(AcceptRule::default()).unwrap(),
            serde_json::json!({"rule": "strict"})
        );
    }
}
