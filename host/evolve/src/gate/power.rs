//! Power before training: could this run detect the gain it hopes for?
//!
//! From the starting harness's evaluation (each task's success rate and the
//! trials per task) this finds, by simulation, the smallest improvement the
//! paired gate detects at level `alpha` with probability `power`, and how
//! many tasks a target effect would need. An improvement of `delta` is
//! modelled as the failing share spread over the tasks in proportion to
//! their headroom (task `i` goes from `p_i` to `p_i + delta (1 - p_i) / (1 -
//! mean p)`), no task lost: an optimistic model, so a run that cannot
//! detect `delta` under it cannot detect it at all. Each simulated
//! evaluation draws every task's trials for both harnesses and asks the
//! gate's question (mean difference above zero and one-sided sign-flip p at
//! most `alpha`). Tasks beyond the observed ones are drawn from the
//! observed success rates (a bootstrap of task difficulty).
//!
//! Simulations share their random numbers across the effects tried, so
//! the detection rate rises with the effect and the search is a bisection.

use serde::{Deserialize, Serialize};

use ecdysis_sys::rng::SplitMix64;

use crate::gate::accept::sign_flip_p;

/// What the user asks the power line about (`train --power
/// --target-effect`); not part of a run's configuration, since it changes
/// no result.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PowerAsk {
    /// Detection probability.
    pub power: f64,
    /// The effect hoped for.
    pub target_effect: Option<f64>,
}

/// Default [`PowerAsk::power`] (`--power`): 80%, the conventional power.
pub const DEFAULT_POWER: f64 = 0.8;

impl Default for PowerAsk {
    /// [`DEFAULT_POWER`] and no target.
    fn default() -> Self {
        PowerAsk {
            power: DEFAULT_POWER,
            target_effect: None,
        }
    }
}

/// The level a power line is stated at for the strict gate, which has no
/// test of its own: that of a paired test at the usual 5%.
pub const STRICT_GATE_ALPHA: f64 = 0.05;

/// What to state.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PowerSpec {
    /// Level of the one-sided paired test.
    pub alpha: f64,
    /// Detection probability asked for.
    pub power: f64,
    /// An effect the user hopes to detect (`--target-effect`), in accuracy.
    pub target_effect: Option<f64>,
    /// Simulated evaluations per effect tried.
    pub simulations: usize,
    /// Seed of the simulations.
    pub seed: u64,
}

impl PowerSpec {
    /// α and power as stated, the default number of simulations.
    pub fn new(alpha: f64, power: f64, target_effect: Option<f64>, seed: u64) -> Self {
        PowerSpec {
            alpha,
            power,
            target_effect,
            simulations: DEFAULT_SIMULATIONS,
            seed,
        }
    }
}

/// Simulations per effect: the detection rate's standard error at 0.8 is
/// then under 0.02.
pub const DEFAULT_SIMULATIONS: usize = 500;

/// Largest task count the search for a target effect tries.
pub const MAX_TASKS: usize = 2000;

/// Tasks needed for the target effect at one trial count.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Needed {
    /// Trials per task.
    pub trials: u32,
    /// Tasks needed (`None`: more than [`MAX_TASKS`], or the effect is
    /// beyond the headroom).
    pub tasks: Option<usize>,
}

/// The power line of a run (`power` in `summary.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PowerStatement {
    /// Tasks of the evaluation.
    pub tasks: usize,
    /// Trials per task.
    pub trials: u32,
    /// Level of the test.
    pub alpha: f64,
    /// Detection probability.
    pub power: f64,
    /// The starting harness's accuracy.
    pub baseline: f64,
    /// The smallest improvement detected with probability `power` (`None`:
    /// not even solving every task would be).
    pub detectable: Option<f64>,
    /// The effect asked about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_effect: Option<f64>,
    /// Tasks the target effect needs, per trial count.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub needed: Vec<Needed>,
    /// Set when the run as configured cannot detect the target effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

/// The statement for an evaluation whose tasks succeeded at `rates` (each
/// the task's mean reward over `trials` trials).
pub fn statement(rates: &[f64], trials: u32, spec: &PowerSpec) -> PowerStatement {
    let trials = trials.max(1);
    let baseline = mean(rates);
    let detectable = detectable_effect(rates, rates.len(), trials, spec);
    let mut needed = Vec::new();
    let mut warning = None;
    if let Some(target) = spec.target_effect {
        let mut counts = vec![trials, 1, 3];
        counts.sort_unstable();
        counts.dedup();
        for t in counts {
            needed.push(Needed {
                trials: t,
                tasks: tasks_needed(rates, t, target, spec),
            });
        }
        if detectable.is_none_or(|d| d > target) {
            let at = needed
                .iter()
                .find(|n| n.trials == trials)
                .and_then(|n| n.tasks);
            warning = Some(match at {
                _ if target > 1.0 - baseline => format!(
                    "the target effect +{target:.3} is beyond the starting harness's headroom ({:.3} of {:.3} accuracy left)",
                    1.0 - baseline,
                    baseline
                ),
                Some(n) => format!(
                    "this run cannot detect +{target:.3}: it has {} tasks x {trials} trial(s), the target needs about {n} tasks",
                    rates.len()
                ),
                None => format!(
                    "this run cannot detect +{target:.3}, nor could {MAX_TASKS} tasks x {trials} trial(s)"
                ),
            });
        }
    }
    PowerStatement {
        tasks: rates.len(),
        trials,
        alpha: spec.alpha,
        power: spec.power,
        baseline,
        detectable,
        target_effect: spec.target_effect,
        needed,
        warning,
    }
}

impl PowerStatement {
    /// One line (two with a warning): `power: 12 tasks x 1 trial(s) at
    /// accuracy 0.250; the gate (alpha 0.05) detects +0.333 with 80%
    /// probability; +0.100 needs 140 tasks x 1 trial(s), 60 x 3`.
    pub fn render(&self) -> String {
        let mut out = format!(
            "power: {} tasks x {} trial(s) at accuracy {:.3}; a paired test at alpha {} detects ",
            self.tasks, self.trials, self.baseline, self.alpha
        );
        out += &match self.detectable {
            Some(d) => format!("+{d:.3} with {:.0}% probability", self.power * 100.0),
            None => format!(
                "no improvement with {:.0}% probability, not even solving every task",
                self.power * 100.0
            ),
        };
        if let Some(t) = self.target_effect {
            let needs: Vec<String> = self
                .needed
                .iter()
                .map(|n| match n.tasks {
                    Some(k) => format!("{k} tasks x {} trial(s)", n.trials),
                    None => format!("over {MAX_TASKS} tasks x {} trial(s)", n.trials),
                })
                .collect();
            out += &format!("; +{t:.3} needs {}", needs.join(", or "));
        }
        out.push('\n');
        if let Some(w) = &self.warning {
            out += &format!("warning: {w}\n");
        }
        out
    }
}

fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        0.0
    } else {
        xs.iter().sum::<f64>() / xs.len() as f64
    }
}

/// The smallest effect detected with probability `spec.power` over `tasks`
/// tasks, by bisection between 0 and the headroom.
fn detectable_effect(rates: &[f64], tasks: usize, trials: u32, spec: &PowerSpec) -> Option<f64> {
    let headroom = 1.0 - mean(rates);
    if rates.is_empty() || headroom <= 0.0 {
        return None;
    }
    let rate = |delta: f64| detection_rate(rates, tasks, trials, delta, spec);
    if rate(headroom) < spec.power {
        return None;
    }
    let (mut lo, mut hi) = (0.0, headroom);
    for _ in 0..12 {
        let mid = (lo + hi) / 2.0;
        if rate(mid) >= spec.power {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Some(hi)
}

/// Tasks needed for `target` at `trials` trials, by doubling then bisection.
fn tasks_needed(rates: &[f64], trials: u32, target: f64, spec: &PowerSpec) -> Option<usize> {
    if rates.is_empty() || target > 1.0 - mean(rates) || target <= 0.0 {
        return None;
    }
    let ok = |n: usize| detection_rate(rates, n, trials, target, spec) >= spec.power;
    let mut hi = 2;
    while !ok(hi) {
        if hi >= MAX_TASKS {
            return None;
        }
        hi = (hi * 2).min(MAX_TASKS);
    }
    let mut lo = hi / 2;
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if ok(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Some(hi)
}

/// The share of `spec.simulations` simulated evaluations of `tasks` tasks
/// in which the gate detects an improvement of `delta`.
pub fn detection_rate(
    rates: &[f64],
    tasks: usize,
    trials: u32,
    delta: f64,
    spec: &PowerSpec,
) -> f64 {
    if rates.is_empty() || tasks == 0 || spec.simulations == 0 {
        return 0.0;
    }
    let mut rng = SplitMix64::new(spec.seed ^ (tasks as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut hits = 0usize;
    let mut drawn = vec![0.0; tasks];
    let mut diffs = vec![0.0; tasks];
    for _ in 0..spec.simulations {
        // The observed tasks as they are; more or fewer drawn from them.
        for (i, p) in drawn.iter_mut().enumerate() {
            *p = if tasks == rates.len() {
                rates[i]
            } else {
                rates[rng.below(rates.len() as u64) as usize]
            };
        }
        let headroom = 1.0 - mean(&drawn);
        if headroom <= 0.0 || delta > headroom {
            continue;
        }
        for (d, p) in diffs.iter_mut().zip(&drawn) {
            let better = p + delta * (1.0 - p) / headroom;
            let (mut before, mut after) = (0u32, 0u32);
            for _ in 0..trials {
                let u = unit(&mut rng);
                before += u32::from(u < *p);
                let v = unit(&mut rng);
                after += u32::from(v < better);
            }
            *d = (f64::from(after) - f64::from(before)) / f64::from(trials);
        }
        if mean(&diffs) > 0.0 && one_sided_p(&diffs) <= spec.alpha {
            hits += 1;
        }
    }
    hits as f64 / spec.simulations as f64
}

/// Up to this many nonzero differences the simulation asks the gate's own
/// exact sign-flip test; beyond it, its normal approximation (the exact
/// enumeration doubles per task, and thousands of simulated evaluations
/// each need one p).
const EXACT_IN_SIMULATION: usize = 12;

fn one_sided_p(diffs: &[f64]) -> f64 {
    let nonzero = diffs.iter().filter(|d| d.abs() > 1e-12).count();
    if nonzero <= EXACT_IN_SIMULATION {
        return sign_flip_p(diffs);
    }
    // Under random signs the sum has mean 0 and variance sum(d^2); it moves
    // in steps of twice a difference, so half the smallest step is taken
    // off (a continuity correction: without it the approximation finds
    // more than the gate's exact test does).
    let sum: f64 = diffs.iter().sum();
    let sd = diffs.iter().map(|d| d * d).sum::<f64>().sqrt();
    let step = diffs
        .iter()
        .map(|d| d.abs())
        .filter(|d| *d > 1e-12)
        .fold(f64::INFINITY, f64::min);
    upper_normal_tail((sum - step) / sd)
}

/// A uniform draw in [0, 1).
fn unit(rng: &mut SplitMix64) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// P(Z >= z) for a standard normal Z (Abramowitz and Stegun 7.1.26 for
/// erfc, absolute error below 1.5e-7).
fn upper_normal_tail(z: f64) -> f64 {
    let x = z / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.327_591_1 * x.abs());
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let erfc_abs = poly * (-x * x).exp();
    let erfc = if x >= 0.0 { erfc_abs } else { 2.0 - erfc_abs };
    erfc / 2.0
}

/// The check of a statement: the share of `runs` evaluations, drawn under
/// the same effect model with `seed`, that the gate itself
/// ([`crate::gate::accept::decide`], its exact or sampled sign-flip test) accepts
/// at level `alpha`.
pub fn gate_detection_rate(
    rates: &[f64],
    trials: u32,
    delta: f64,
    alpha: f64,
    (runs, seed): (usize, u64),
) -> f64 {
    use crate::gate::accept::{AcceptRule, decide};
    use ecdysis_runner::agent::EpisodeRecord;
    let mut rng = SplitMix64::new(seed);
    let headroom = 1.0 - mean(rates);
    if runs == 0 || headroom <= 0.0 {
        return 0.0;
    }
    let mut hits = 0;
    let draw = |q: f64, rng: &mut SplitMix64| f64::from(u8::from(unit(rng) < q));
    for _ in 0..runs {
        let (mut inc, mut cand) = (vec![], vec![]);
        for (i, p) in rates.iter().enumerate() {
            let better = p + delta * (1.0 - p) / headroom;
            for t in 0..trials {
                inc.push(EpisodeRecord::bare(&i.to_string(), t, draw(*p, &mut rng)));
                cand.push(EpisodeRecord::bare(
                    &i.to_string(),
                    t,
                    draw(better, &mut rng),
                ));
            }
        }
        if decide(AcceptRule::Paired { alpha }, &inc, &cand).accepted {
            hits += 1;
        }
    }
    hits as f64 / runs as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The gate on fresh draws, with a seed the statement never used.
    fn gate_rate(rates: &[f64], trials: u32, delta: f64, alpha: f64, runs: usize) -> f64 {
        gate_detection_rate(rates, trials, delta, alpha, (runs, 0xDEC0DE))
    }

    #[test]
    fn the_stated_effect_is_detected_at_the_stated_rate_by_the_gate() {
        // 30 tasks of mixed difficulty, 3 trials: the gate's exact test on
        // 300 fresh evaluations finds the stated effect about 80% of the
        // time, half of it far less often.
        let rates: Vec<f64> = (0..30)
            .map(|i| [0.0, 1.0 / 3.0, 2.0 / 3.0, 1.0][i % 4])
            .collect();
        let spec = PowerSpec::new(0.05, 0.8, Some(0.1), 11);
        let s = statement(&rates, 3, &spec);
        let d = s.detectable.expect("detectable");
        assert!(d > 0.05 && d < 0.5, "{s:?}");
        let at = gate_rate(&rates, 3, d, 0.05, 300);
        assert!((at - 0.8).abs() < 0.08, "detected {at} at {d}");
        let half = gate_rate(&rates, 3, d / 2.0, 0.05, 300);
        assert!(half < 0.6, "half the effect detected {half}");
        // +0.1 is below what 30 tasks detect: a warning and a larger count.
        assert!(
            s.warning
                .as_deref()
                .unwrap()
                .contains("cannot detect +0.100"),
            "{s:?}"
        );
        let n = s
            .needed
            .iter()
            .find(|n| n.trials == 3)
            .unwrap()
            .tasks
            .unwrap();
        assert!(n > 30, "{s:?}");
        let line = s.render();
        assert!(
            line.contains("30 tasks x 3 trial(s)") && line.starts_with("power:"),
            "{line}"
        );
    }

    #[test]
    fn deterministic_tasks_need_flips_and_the_paper_sized_split_says_so() {
        // 40 tasks at temperature 0: outcomes are 0 or 1. Five flips and
        // no loss give p = 1/32 < 0.05, so about 5/31 of the headroom.
        let rates: Vec<f64> = (0..40).map(|i| if i < 9 { 1.0 } else { 0.0 }).collect();
        let spec = PowerSpec::new(0.05, 0.8, None, 3);
        let s = statement(&rates, 1, &spec);
        let d = s.detectable.unwrap();
        // Five expected flips of 40 tasks is 0.125; with the binomial
        // spread a few more are needed for 80%.
        assert!(d > 0.1 && d < 0.25, "{s:?}");
        assert!(s.warning.is_none() && s.needed.is_empty());
    }

    #[test]
    fn no_headroom_means_nothing_to_detect() {
        let spec = PowerSpec::new(0.05, 0.8, Some(0.1), 3);
        let s = statement(&[1.0, 1.0, 1.0], 2, &spec);
        assert_eq!(s.detectable, None);
        assert!(s.warning.as_deref().unwrap().contains("headroom"));
        assert!(s.render().contains("not even solving every task"));
        assert_eq!(statement(&[], 1, &spec).detectable, None);
    }

    #[test]
    fn the_normal_tail_matches_known_values() {
        for (z, p) in [
            (0.0, 0.5),
            (1.644_854, 0.05),
            (-1.959_964, 0.975),
            (3.0, 0.001_35),
        ] {
            assert!(
                (upper_normal_tail(z) - p).abs() < 1e-5,
                "{z}: {}",
                upper_normal_tail(z)
            );
        }
    }
}
