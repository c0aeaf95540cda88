//! The racing gate: a candidate's training evaluation runs task by task and
//! stops once the acceptance rule's decision can no longer change.
//!
//! After each batch of tasks, [`standing`] asks what the episodes so far
//! settle, given that every episode not yet run could score anything from
//! 0 to 1:
//!
//! - `strict` is settled against the candidate when its total, counting
//!   every episode not run as won, still does not beat the incumbent's, and
//!   for it when its total, counting them all as lost, already does.
//! - `paired` is settled against the candidate when the completion most in
//!   its favour (every episode not run won) is rejected, and for it when
//!   the completion least in its favour (all lost) is accepted. Both bounds
//!   are exact: raising one task's difference can only lower the sign-flip
//!   p-value (a sign assignment reaches the observed sum exactly when the
//!   differences it flips sum to at most zero, and raising a difference
//!   shrinks that set of assignments), and it raises the mean difference,
//!   so the favourable completion has the highest mean and the lowest p of
//!   all completions, the unfavourable one the lowest mean and the highest
//!   p. A raced decision is therefore the decision of the full evaluation,
//!   and the raced test keeps the full test's error rate. Where the test
//!   samples instead of enumerating, the bound must clear α by a margin
//!   of the sampler's standard errors.
//!
//! A rejection stops the evaluation; an acceptance does not save the rest,
//! since the new incumbent's training evaluation needs every task: the
//! gate then runs all that is left at once.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::gate::accept::{self, AcceptRule};
use ecdysis_runner::agent::EpisodeRecord;

/// Whether the gate races (`--gate-race`; `gate_race` in `config.json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum GateRace {
    /// Task by task, stopping once the decision is certain.
    #[default]
    On,
    /// Every training task, then the decision.
    Off,
}

impl GateRace {
    /// The word `--gate-race` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            GateRace::On => "on",
            GateRace::Off => "off",
        }
    }
}

/// What a partial evaluation settles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Settled {
    /// Some completion is accepted and some rejected.
    Open,
    /// Every completion is rejected.
    Reject,
    /// Every completion is accepted.
    Accept,
}

/// The gate's episodes in a round (`gate_episodes` in `rounds.jsonl`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateEpisodes {
    /// Whether the evaluation raced.
    pub raced: bool,
    /// Episodes the full gate evaluates: every training task's trials.
    pub needed: u64,
    /// Episodes of the candidate that were run (this round or resumed).
    pub run: u64,
    /// Episodes not run because the decision was already certain: not
    /// needed, never failures.
    pub not_needed: u64,
    /// Episodes run when the decision became certain (`None`: only the
    /// last one settled it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_after: Option<u64>,
}

/// Where a candidate stands after some of its episodes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Standing {
    /// What the episodes so far settle.
    pub settled: Settled,
    /// The incumbent's mean reward over every paired episode.
    pub incumbent_score: f64,
    /// The candidate's mean if it won every episode not run.
    pub best_score: f64,
    /// Its mean if it lost them all.
    pub worst_score: f64,
    /// The sign-flip p of the favourable completion (`paired` only).
    pub best_p: Option<f64>,
    /// Episodes paired with the incumbent's that were not run.
    pub open: usize,
}

impl Standing {
    /// The decision of a rejection settled before the last episode, in
    /// the words of [`accept::decide`]'s reasons.
    pub fn reject_reason(&self, rule: AcceptRule) -> String {
        let (best, inc) = (self.best_score, self.incumbent_score);
        match (rule, self.best_p) {
            (AcceptRule::Paired { alpha }, Some(p)) if best > inc => {
                format!("rejected: even winning every episode not run, p={p:.4} > alpha {alpha}")
            }
            _ => format!(
                "rejected: at most {best:.4} (every episode not run won) does not beat {inc:.4}"
            ),
        }
    }
}

/// How far a sampled p must clear α, in the sampler's largest standard
/// errors, for a race to stop on it.
const SAMPLED_MARGIN: f64 = 6.0;

/// Rewards that are multiples of this sum without rounding, so a race
/// compares totals exactly (ties included) as the full gate's means do.
const EXACT_STEP: f64 = 1.0 / (1u64 << 20) as f64;

/// Slack per episode when totals may round: a race then stops only when
/// the comparison holds beyond any rounding of the full gate's means.
const ROUNDING_SLACK: f64 = 1e-9;

/// Per task: the summed differences (candidate minus incumbent) with every
/// episode not run won, and with every one lost, over its paired trials.
#[derive(Default)]
struct TaskBounds {
    best: f64,
    worst: f64,
    trials: usize,
    open: bool,
}

/// What `candidate`'s episodes so far settle under `rule`, against every
/// (task, trial) episode of `incumbent` (those are the pairs of the full
/// gate, [`accept::decide`]).
pub fn standing(
    rule: AcceptRule,
    incumbent: &[EpisodeRecord],
    candidate: &[EpisodeRecord],
) -> Standing {
    let inc = accept::by_episode(incumbent);
    let cand = accept::by_episode(candidate);
    let mut tasks: BTreeMap<&str, TaskBounds> = BTreeMap::new();
    let (mut inc_total, mut cand_total, mut open) = (0.0, 0.0, 0usize);
    let mut exact = true;
    // The same order as `decide` sums in, so a fully run task's difference
    // is the same float.
    for (key, &i) in &inc {
        let t = tasks.entry(key.0).or_default();
        t.trials += 1;
        inc_total += i;
        exact &= on_step(i);
        match cand.get(key) {
            Some(&c) => {
                t.best += c - i;
                t.worst += c - i;
                cand_total += c;
                exact &= on_step(c);
            }
            None => {
                t.best += 1.0 - i;
                t.worst += 0.0 - i;
                t.open = true;
                open += 1;
            }
        }
    }
    let n = inc.len();
    if n == 0 {
        return Standing {
            settled: Settled::Reject,
            incumbent_score: 0.0,
            best_score: 0.0,
            worst_score: 0.0,
            best_p: None,
            open: 0,
        };
    }
    let best_total = cand_total + open as f64;
    let slack = if exact {
        0.0
    } else {
        ROUNDING_SLACK * (n as f64 + 1.0)
    };
    // Exact totals: ties are ties, as the full gate's means see them.
    let can_beat = best_total > inc_total - slack;
    let must_beat = cand_total > inc_total + slack;
    let mut best_p = None;
    let settled = match rule {
        AcceptRule::Strict => {
            if !can_beat {
                Settled::Reject
            } else if must_beat {
                Settled::Accept
            } else {
                Settled::Open
            }
        }
        AcceptRule::Paired { alpha } => {
            let best: Vec<f64> = tasks.values().map(|t| t.best / t.trials as f64).collect();
            let worst: Vec<f64> = tasks.values().map(|t| t.worst / t.trials as f64).collect();
            let (mut low, mut high) = (0.0, 0.0);
            let mut varying = 0;
            for (b, w) in best.iter().zip(&worst) {
                // |d| over the interval [w, b] of a task's difference.
                low += if *w <= 0.0 && *b >= 0.0 {
                    0.0
                } else {
                    b.abs().min(w.abs())
                };
                high += b.abs().max(w.abs());
                varying += usize::from(!(accept::is_zero(*b) && accept::is_zero(*w)));
            }
            let margin = if accept::is_exact(varying) {
                0.0
            } else {
                SAMPLED_MARGIN * accept::sampled_p_standard_error()
            };
            // The favourable completion's p, with the smallest tie
            // tolerance of any completion: no completion then has fewer
            // assignments reaching its sum. The unfavourable one's with
            // the largest, for the converse.
            let p_best = accept::sign_flip_p_scaled(&best, Some(low));
            best_p = Some(p_best);
            if !can_beat || p_best > alpha + margin {
                Settled::Reject
            } else if must_beat && accept::sign_flip_p_scaled(&worst, Some(high)) <= alpha - margin
            {
                Settled::Accept
            } else {
                Settled::Open
            }
        }
    };
    Standing {
        settled,
        incumbent_score: inc_total / n as f64,
        best_score: best_total / n as f64,
        worst_score: cand_total / n as f64,
        best_p,
        open,
    }
}

fn on_step(x: f64) -> bool {
    (x / EXACT_STEP).fract() == 0.0
}

/// The order a race evaluates `tasks` in: first the tasks the incumbent
/// fails, where a candidate can gain, lowest mean reward first (the most
/// to gain), then those it solves; ties in the training order. Tasks the
/// incumbent has no episode of come last: they pair with nothing, so they
/// cannot change the decision.
pub fn order(tasks: &[String], incumbent: &[EpisodeRecord]) -> Vec<String> {
    let mut mean: BTreeMap<&str, (f64, usize)> = BTreeMap::new();
    for (key, r) in accept::by_episode(incumbent) {
        let m = mean.entry(key.0).or_default();
        m.0 += r;
        m.1 += 1;
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut keyed: Vec<(bool, f64, usize, &String)> = tasks
        .iter()
        .enumerate()
        .filter(|(_, t)| seen.insert(t.as_str()))
        .map(|(i, t)| match mean.get(t.as_str()) {
            Some((s, k)) => (false, s / *k as f64, i, t),
            None => (true, 0.0, i, t),
        })
        .collect();
    keyed.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)).then(a.2.cmp(&b.2)));
    keyed.into_iter().map(|k| k.3.clone()).collect()
}

/// `ordered` tasks in batches that keep `concurrency` episodes of
/// `trials` trials busy (at least one task each).
pub fn batches(ordered: Vec<String>, trials: u32, concurrency: usize) -> Vec<Vec<String>> {
    let per = concurrency.max(1).div_ceil(trials.max(1) as usize);
    ordered.chunks(per).map(<[String]>::to_vec).collect()
}

/// A race replayed over a candidate's recorded episodes of every task.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Replayed {
    /// What the race settled: `Reject` stops the evaluation, `Accept`
    /// (early or not) has the gate run the rest, `Open` after the last
    /// batch leaves the decision to the full gate.
    pub settled: Settled,
    /// The raced gate's decision: a settled rejection or acceptance as
    /// settled, else the full gate's.
    pub accepted: bool,
    /// Candidate episodes the raced gate runs: those known when a
    /// rejection settled, else all of them (the next incumbent needs them).
    pub run: u64,
    /// Episodes known when the decision became certain, if before the
    /// last batch.
    pub decided_after: Option<u64>,
    /// How many tasks of the race's [`order`] the raced gate evaluates
    /// (the first ones).
    pub tasks_run: usize,
}

/// Replay the gate's race over `candidate`'s recorded episodes of every
/// task: the batches of [`order`] and [`batches`] revealed one at a time,
/// each followed by [`standing`], as the gate evaluates them. What it
/// decides can be set beside [`accept::decide`] on the same episodes.
pub fn replay(
    rule: AcceptRule,
    tasks: &[String],
    incumbent: &[EpisodeRecord],
    candidate: &[EpisodeRecord],
    trials: u32,
    concurrency: usize,
) -> Replayed {
    let ordered = order(tasks, incumbent);
    let every_task = ordered.len();
    let mut plan = batches(ordered, trials, concurrency).into_iter();
    let mut part = std::collections::BTreeSet::new();
    let mut known: Vec<EpisodeRecord> = vec![];
    let settled = loop {
        let settled = standing(rule, incumbent, &known).settled;
        if settled != Settled::Open {
            break settled;
        }
        let Some(batch) = plan.next() else {
            break Settled::Open;
        };
        part.extend(batch);
        known = candidate
            .iter()
            .filter(|r| part.contains(&r.task_id))
            .cloned()
            .collect();
    };
    let early = (plan.len() > 0).then_some(known.len() as u64);
    match settled {
        // Settled after the last batch, the gate runs the full evaluation
        // anyway (as many episodes).
        Settled::Reject => Replayed {
            settled,
            accepted: false,
            run: early.unwrap_or(candidate.len() as u64),
            decided_after: early,
            tasks_run: if early.is_some() {
                part.len()
            } else {
                every_task
            },
        },
        Settled::Accept => Replayed {
            settled,
            accepted: true,
            run: candidate.len() as u64,
            decided_after: early,
            tasks_run: every_task,
        },
        Settled::Open => Replayed {
            settled,
            accepted: accept::decide(rule, incumbent, candidate).accepted,
            run: candidate.len() as u64,
            decided_after: None,
            tasks_run: every_task,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::accept::decide;
    use ecdysis_sys::rng::SplitMix64;

    fn ep(task: &str, trial: u32, reward: f64) -> EpisodeRecord {
        EpisodeRecord::bare(task, trial, reward)
    }

    /// Episodes of `tasks` tasks × `trials` trials with the given rewards,
    /// task-major.
    fn episodes(rewards: &[f64], trials: u32) -> Vec<EpisodeRecord> {
        rewards
            .iter()
            .enumerate()
            .map(|(i, r)| ep(&format!("t{}", i / trials as usize), i as u32 % trials, *r))
            .collect()
    }

    fn task_names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("t{i}")).collect()
    }

    /// Every vector of `len` rewards drawn from `values`.
    fn all_vectors(values: &[f64], len: usize) -> Vec<Vec<f64>> {
        let mut out = vec![vec![]];
        for _ in 0..len {
            out = out
                .into_iter()
                .flat_map(|v| {
                    values.iter().map(move |x| {
                        let mut w = v.clone();
                        w.push(*x);
                        w
                    })
                })
                .collect();
        }
        out
    }

    /// The candidate's episodes of the first `k` tasks of `ordered`.
    fn revealed(cand: &[EpisodeRecord], ordered: &[String], k: usize) -> Vec<EpisodeRecord> {
        cand.iter()
            .filter(|r| ordered[..k].contains(&r.task_id))
            .cloned()
            .collect()
    }

    /// The candidate's episodes with every one not in `known` set to
    /// `reward`.
    fn completed(
        cand: &[EpisodeRecord],
        known: &[EpisodeRecord],
        reward: f64,
    ) -> Vec<EpisodeRecord> {
        cand.iter()
            .map(|r| {
                if known
                    .iter()
                    .any(|k| k.task_id == r.task_id && k.trial == r.trial)
                {
                    r.clone()
                } else {
                    ep(&r.task_id, r.trial, reward)
                }
            })
            .collect()
    }

    /// For every incumbent and candidate outcome and every prefix of the
    /// race order: a settled prefix is settled as the full gate decides,
    /// and (when `tight`) an open one has a completion the gate accepts
    /// and one it rejects. Returns how many prefixes settled early.
    fn check_every_outcome(
        rule: AcceptRule,
        values: &[f64],
        tasks: usize,
        trials: u32,
        tight: bool,
    ) -> usize {
        let names = task_names(tasks);
        let mut early = 0;
        let vectors = all_vectors(values, tasks * trials as usize);
        for iv in &vectors {
            let inc = episodes(iv, trials);
            let ordered = order(&names, &inc);
            for cv in &vectors {
                let cand = episodes(cv, trials);
                let full = decide(rule, &inc, &cand).accepted;
                for k in 0..=tasks {
                    let known = revealed(&cand, &ordered, k);
                    let s = standing(rule, &inc, &known);
                    let ctx = || format!("{rule:?} inc {iv:?} cand {cv:?} after {k} task(s)");
                    match s.settled {
                        Settled::Reject => {
                            assert!(!full, "raced reject, full accept: {}", ctx());
                            early += usize::from(k < tasks);
                        }
                        Settled::Accept => assert!(full, "raced accept, full reject: {}", ctx()),
                        Settled::Open => {
                            if tight {
                                assert!(k < tasks, "open with every episode run: {}", ctx());
                                let won = decide(rule, &inc, &completed(&cand, &known, 1.0));
                                let lost = decide(rule, &inc, &completed(&cand, &known, 0.0));
                                assert!(
                                    won.accepted && !lost.accepted,
                                    "open though the decision is certain: {}",
                                    ctx()
                                );
                            }
                        }
                    }
                }
            }
        }
        early
    }

    #[test]
    fn strict_settles_exactly_when_the_full_gate_can_no_longer_change() {
        for (tasks, trials) in [(1, 1), (3, 1), (5, 1), (2, 2), (3, 2)] {
            let early = check_every_outcome(AcceptRule::Strict, &[0.0, 1.0], tasks, trials, true);
            assert!(early > 0, "{tasks}x{trials}: never stopped early");
        }
        // Half rewards sum exactly too: ties still settle.
        check_every_outcome(AcceptRule::Strict, &[0.0, 0.5, 1.0], 3, 1, true);
    }

    #[test]
    fn strict_with_rewards_that_round_never_settles_wrongly() {
        // Totals of such rewards may round, so ties stay open (not tight),
        // but nothing settles against the full gate.
        check_every_outcome(AcceptRule::Strict, &[0.0, 0.3, 1.0], 3, 1, false);
    }

    #[test]
    fn paired_settles_exactly_when_the_full_gate_can_no_longer_change() {
        for alpha in [0.05, 0.2, 0.5] {
            let rule = AcceptRule::Paired { alpha };
            for (tasks, trials) in [(1, 1), (4, 1), (6, 1), (2, 2), (3, 2)] {
                check_every_outcome(rule, &[0.0, 1.0], tasks, trials, true);
            }
            check_every_outcome(rule, &[0.0, 0.5, 1.0], 3, 1, true);
            check_every_outcome(rule, &[0.0, 0.3, 1.0], 3, 1, false);
        }
    }

    #[test]
    fn no_incumbent_episode_settles_as_the_gate_rejects() {
        let s = standing(AcceptRule::Strict, &[], &[ep("a", 0, 1.0)]);
        assert_eq!(s.settled, Settled::Reject);
        assert!(!decide(AcceptRule::Strict, &[], &[ep("a", 0, 1.0)]).accepted);
    }

    #[test]
    fn the_order_puts_what_a_candidate_can_gain_first() {
        let inc = [
            ep("solved", 0, 1.0),
            ep("solved", 1, 1.0),
            ep("half", 0, 1.0),
            ep("half", 1, 0.0),
            ep("failed", 0, 0.0),
            ep("failed", 1, 0.0),
            ep("failed2", 0, 0.0),
            ep("failed2", 1, 0.0),
        ];
        let tasks: Vec<String> = ["solved", "unpaired", "half", "failed2", "failed", "half"]
            .map(String::from)
            .to_vec();
        assert_eq!(
            order(&tasks, &inc),
            ["failed2", "failed", "half", "solved", "unpaired"]
        );
        assert_eq!(
            batches(order(&tasks, &inc), 2, 3),
            [
                vec!["failed2".to_string(), "failed".into()],
                vec!["half".into(), "solved".into()],
                vec!["unpaired".into()]
            ]
        );
        assert_eq!(batches(vec!["a".into()], 3, 1), [vec!["a".to_string()]]);
    }

    /// One race as the gate runs it: batches in the race order until the
    /// standing settles a rejection; otherwise the full gate decides.
    /// Returns the decision and the candidate episodes used.
    fn race(
        rule: AcceptRule,
        inc: &[EpisodeRecord],
        cand: &[EpisodeRecord],
        tasks: &[String],
        trials: u32,
        concurrency: usize,
    ) -> (bool, usize) {
        let mut known: Vec<EpisodeRecord> = vec![];
        for batch in batches(order(tasks, inc), trials, concurrency) {
            known.extend(cand.iter().filter(|r| batch.contains(&r.task_id)).cloned());
            match standing(rule, inc, &known).settled {
                Settled::Reject => return (false, known.len()),
                Settled::Accept => break,
                Settled::Open => {}
            }
        }
        (decide(rule, inc, cand).accepted, cand.len())
    }

    fn bernoulli(rng: &mut SplitMix64, p: f64) -> f64 {
        let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        if u < p { 1.0 } else { 0.0 }
    }

    /// Simulated gates: `tasks` tasks of one trial whose success rates
    /// are drawn per seed; the candidate gains `gain` on every task's rate.
    /// Returns (raced accepts, episodes run, episodes needed), asserting
    /// on every seed that the race decides as the full gate.
    fn simulate(rule: AcceptRule, tasks: usize, gain: f64, seeds: u64) -> (u64, usize, usize) {
        let names = task_names(tasks);
        let (mut accepted, mut run, mut needed) = (0, 0, 0);
        for seed in 0..seeds {
            let mut rng = SplitMix64::new(0x5EED_0000 + seed);
            let rates: Vec<f64> = (0..tasks)
                .map(|_| (rng.next_u64() % 1000) as f64 / 1000.0)
                .collect();
            let iv: Vec<f64> = rates.iter().map(|p| bernoulli(&mut rng, *p)).collect();
            let cv: Vec<f64> = rates
                .iter()
                .map(|p| bernoulli(&mut rng, (p + gain).min(1.0)))
                .collect();
            let (inc, cand) = (episodes(&iv, 1), episodes(&cv, 1));
            let (raced, used) = race(rule, &inc, &cand, &names, 1, 2);
            let full = decide(rule, &inc, &cand).accepted;
            assert_eq!(raced, full, "seed {seed}: raced {raced}, full {full}");
            accepted += u64::from(raced);
            run += used;
            needed += cand.len();
        }
        (accepted, run, needed)
    }

    #[test]
    fn a_raced_paired_gate_keeps_its_error_rate_and_decisions() {
        let alpha = 0.05;
        let rule = AcceptRule::Paired { alpha };
        let seeds = 2000;
        // No real gain: every acceptance is an error.
        let (errors, run, needed) = simulate(rule, 10, 0.0, seeds);
        let rate = errors as f64 / seeds as f64;
        // Three binomial standard errors at α.
        let tolerance = 3.0 * (alpha * (1.0 - alpha) / seeds as f64).sqrt();
        assert!(
            rate <= alpha + tolerance,
            "false acceptances {rate} above alpha {alpha} + {tolerance}"
        );
        assert!(run < needed, "the race saved nothing: {run} of {needed}");
        // A real gain: the race accepts what the full gate accepts.
        let (accepted, run, needed) = simulate(rule, 10, 0.4, 500);
        assert!(accepted > 0, "no acceptance to compare");
        assert!(run <= needed);
    }

    #[test]
    fn a_raced_strict_gate_decides_as_the_full_gate_on_simulated_rounds() {
        let (accepted, run, needed) = simulate(AcceptRule::Strict, 12, 0.0, 1000);
        assert!(accepted > 0 && accepted < 1000, "{accepted}");
        assert!(run < needed, "the race saved nothing: {run} of {needed}");
        simulate(AcceptRule::Strict, 12, 0.3, 300);
    }

    #[test]
    fn a_sampled_paired_test_settles_only_with_a_margin() {
        // More varying tasks than the test enumerates: it samples, and a
        // race must not stop on a p within the sampler's noise of α.
        let rule = AcceptRule::Paired { alpha: 0.05 };
        let names = task_names(24);
        for seed in 0..6 {
            let mut rng = SplitMix64::new(0xA11CE + seed);
            let iv: Vec<f64> = (0..24).map(|_| bernoulli(&mut rng, 0.5)).collect();
            let cv: Vec<f64> = (0..24).map(|_| bernoulli(&mut rng, 0.7)).collect();
            let (inc, cand) = (episodes(&iv, 1), episodes(&cv, 1));
            let (raced, _) = race(rule, &inc, &cand, &names, 1, 6);
            assert_eq!(raced, decide(rule, &inc, &cand).accepted, "seed {seed}");
        }
    }
    #[test]
    fn a_replay_stops_and_counts_as_the_gate_does() {
        let tasks = task_names(4);
        let inc = episodes(&[1.0, 0.0, 0.0, 1.0], 1);
        // Race order t1, t2, t0, t3: after two failures the candidate can
        // at best tie.
        let lost = replay(
            AcceptRule::Strict,
            &tasks,
            &inc,
            &episodes(&[1.0, 0.0, 0.0, 0.0], 1),
            1,
            1,
        );
        assert_eq!(lost.settled, Settled::Reject);
        assert!(!lost.accepted);
        assert_eq!(
            (lost.run, lost.decided_after, lost.tasks_run),
            (2, Some(2), 2)
        );
        // Three wins settle an acceptance; the gate still runs the fourth.
        let won = replay(
            AcceptRule::Strict,
            &tasks,
            &inc,
            &episodes(&[1.0; 4], 1),
            1,
            1,
        );
        assert_eq!(won.settled, Settled::Accept);
        assert!(won.accepted);
        assert_eq!((won.run, won.decided_after), (4, Some(3)));
        // Batches of two tasks: the rejection is seen after the first.
        let batched = replay(
            AcceptRule::Strict,
            &tasks,
            &inc,
            &episodes(&[0.0; 4], 1),
            1,
            2,
        );
        assert_eq!((batched.run, batched.decided_after), (2, Some(2)));
        // An incumbent that solves everything cannot be beaten: no episode.
        let solved = episodes(&[1.0; 4], 1);
        let none = replay(AcceptRule::Strict, &tasks, &solved, &solved, 1, 1);
        assert_eq!((none.accepted, none.run, none.tasks_run), (false, 0, 0));
        // A tie known only at the last episode: the full gate decides.
        let tie = replay(
            AcceptRule::Strict,
            &tasks,
            &inc,
            &episodes(&[1.0, 0.0, 1.0, 0.0], 1),
            1,
            1,
        );
        assert_eq!((tie.accepted, tie.run, tie.decided_after), (false, 4, None));
    }
}
