//! Choosing a training-task budget (`--select-train failure-aware|random
//! --budget-tasks N`).
//!
//! Evolution only learns from what the training tasks expose, and many
//! tasks expose the same thing. Training on a budget that covers every
//! distinct failure signature and execution path reaches close to the
//! full-split score with a fraction of the episodes; `random` is the
//! baseline that shows whether the choice, not just the smaller budget,
//! matters.

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::aggregate;
use crate::aggregate::failure_record;
use ecdysis_runner::agent::{CallSource, Entry, EpisodeRecord};

/// How the training budget is filled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum SelectStrategy {
    /// Two tasks of each failure mechanism that recurs across tasks (so the
    /// training tasks still show it recurring: aggregation and the FDCR
    /// roles only see a pattern that recurs among the tasks they are
    /// given), one of each other mechanism, then one per execution path,
    /// then the most failing tasks.
    FailureAware,
    /// Like `failure-aware`, and then one task for each detail of a
    /// recurring mechanism not yet covered (each error code the mechanism
    /// shows), before execution paths.
    Recurring,
    /// A seeded uniform draw.
    Random,
}

/// Tasks kept of a mechanism that recurs (the strategies' docs say two).
pub const PER_RECURRING_SIGNATURE: usize = 2;

impl SelectStrategy {
    /// The name `--select-train` takes: `failure-aware`, `recurring` or
    /// `random`.
    pub fn as_str(self) -> &'static str {
        match self {
            SelectStrategy::FailureAware => "failure-aware",
            SelectStrategy::Recurring => "recurring",
            SelectStrategy::Random => "random",
        }
    }
}

/// One chosen task and why it was chosen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Picked {
    /// The task id.
    pub task: String,
    /// Why it was picked: the failure signature or execution path it covers,
    /// its failure count, the random draw, or a budget covering every task.
    pub reason: String,
}

/// The chosen training tasks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Selection {
    /// How the tasks were chosen.
    pub strategy: SelectStrategy,
    /// At most this many tasks.
    pub budget: usize,
    /// Seed of the `random` draw (recorded for every strategy).
    pub seed: u64,
    /// The chosen tasks in split order (what training runs on).
    pub tasks: Vec<String>,
    /// The same tasks in the order they were chosen, with reasons.
    pub picked: Vec<Picked>,
}

/// Choose up to `budget` of `all_tasks`.
///
/// `all_tasks` is in split order (repeated ids count once); `records` are
/// the incumbent's episodes on them (any trials; episodes of tasks outside
/// the split are ignored); an episode fails when its reward is below
/// `lambda`. `seed` is only used by `random`.
pub fn select(
    strategy: SelectStrategy,
    budget: usize,
    all_tasks: &[String],
    records: &[EpisodeRecord],
    lambda: f64,
    seed: u64,
) -> Selection {
    let mut seen = HashSet::new();
    let tasks: Vec<&str> = all_tasks
        .iter()
        .map(String::as_str)
        .filter(|t| seen.insert(*t))
        .collect();
    let picked = if budget >= tasks.len() {
        tasks
            .iter()
            .map(|t| Picked {
                task: t.to_string(),
                reason: "budget covers every task".into(),
            })
            .collect()
    } else {
        match strategy {
            SelectStrategy::Random => random(&tasks, budget, seed),
            SelectStrategy::FailureAware => failure_aware(&tasks, budget, records, lambda, false),
            SelectStrategy::Recurring => failure_aware(&tasks, budget, records, lambda, true),
        }
    };
    let chosen: HashSet<&str> = picked.iter().map(|p| p.task.as_str()).collect();
    Selection {
        strategy,
        budget,
        seed,
        tasks: tasks
            .iter()
            .filter(|t| chosen.contains(**t))
            .map(|t| t.to_string())
            .collect(),
        picked,
    }
}

/// Seeded Fisher–Yates; the first `budget` of the shuffle are the draw.
fn random(tasks: &[&str], budget: usize, seed: u64) -> Vec<Picked> {
    let mut order: Vec<&str> = tasks.to_vec();
    let mut rng = ecdysis_sys::rng::SplitMix64::new(seed);
    for i in (1..order.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        order.swap(i, j);
    }
    order
        .into_iter()
        .take(budget)
        .map(|t| Picked {
            task: t.to_string(),
            reason: format!("random draw (seed {seed})"),
        })
        .collect()
}

/// Keeps the picks and the budget together so every step stops at the
/// same limit and never picks a task twice.
struct Picker {
    budget: usize,
    chosen: HashSet<String>,
    picked: Vec<Picked>,
}

impl Picker {
    fn full(&self) -> bool {
        self.picked.len() >= self.budget
    }

    fn has(&self, task: &str) -> bool {
        self.chosen.contains(task)
    }

    fn take(&mut self, task: &str, reason: String) {
        if !self.full() && self.chosen.insert(task.to_string()) {
            self.picked.push(Picked {
                task: task.to_string(),
                reason,
            });
        }
    }
}

/// `cover_details`: after each mechanism's share, one task for each detail
/// of a recurring mechanism that no picked task shows.
fn failure_aware(
    tasks: &[&str],
    budget: usize,
    records: &[EpisodeRecord],
    lambda: f64,
    cover_details: bool,
) -> Vec<Picked> {
    let per_recurring = PER_RECURRING_SIGNATURE;
    let index: HashMap<&str, usize> = tasks.iter().enumerate().map(|(i, t)| (*t, i)).collect();
    let mut pick = Picker {
        budget,
        chosen: HashSet::new(),
        picked: Vec::new(),
    };

    // (a) One task per failure mechanism (`per_recurring` of a recurring
    // one), groups in aggregate's order (recurring first, larger first), so
    // the budget goes to the failures most worth fixing when it cannot
    // cover them all. Failures of tasks outside the split must not form
    // groups we cannot pick from.
    let failures: Vec<_> = failure_record::failures(records, lambda)
        .into_iter()
        .filter(|f| index.contains_key(f.task_id.as_str()))
        .collect();
    let groups = aggregate::aggregate(&failures);
    for group in &groups {
        if pick.full() {
            break;
        }
        // A task picked for an earlier signature may also show this one
        // (on another trial): it counts towards this one's share.
        let want = if group.tasks.len() > 1 {
            per_recurring
        } else {
            1
        };
        let mut have = group.tasks.iter().filter(|t| pick.has(t)).count();
        // group.tasks is sorted by name; the split's order decides.
        let mut in_split_order: Vec<&String> = group.tasks.iter().collect();
        in_split_order.sort_by_key(|t| index[t.as_str()]);
        for t in in_split_order {
            if have >= want {
                break;
            }
            if !pick.has(t) {
                pick.take(t, format!("failure mechanism {}", group.key));
                have += 1;
            }
        }
    }
    if cover_details {
        for group in groups.iter().filter(|g| g.recurring) {
            for d in &group.details {
                if d.tasks.iter().any(|t| pick.has(t)) {
                    continue;
                }
                if let Some(t) = d.tasks.iter().min_by_key(|t| index[t.as_str()]) {
                    pick.take(t, format!("failure mechanism {}, {}", group.key, d.detail));
                }
            }
        }
    }

    // (b) One task per execution path not yet covered, passing tasks
    // included: a path that works today is still a path a harness change
    // can break, and the gate should see it.
    let paths = first_trial_paths(records, &index);
    let mut covered: HashSet<&[String]> = pick
        .picked
        .iter()
        .filter_map(|p| paths.get(p.task.as_str()).map(Vec::as_slice))
        .collect();
    for t in tasks {
        if pick.full() {
            break;
        }
        if pick.has(t) {
            continue;
        }
        if let Some(path) = paths.get(t)
            && covered.insert(path.as_slice())
        {
            pick.take(t, format!("execution path {}", render_path(path)));
        }
    }

    // (c) The tasks that fail most often (more evidence per task), then the
    // rest in split order.
    let mut trials: HashMap<&str, (usize, usize)> = HashMap::new();
    for r in records {
        if !index.contains_key(r.task_id.as_str()) {
            continue;
        }
        let e = trials.entry(r.task_id.as_str()).or_insert((0, 0));
        e.1 += 1;
        if r.reward < lambda {
            e.0 += 1;
        }
    }
    let mut failing: Vec<(&str, usize, usize)> = tasks
        .iter()
        .filter(|t| !pick.has(t))
        .filter_map(|t| trials.get(t).map(|&(f, n)| (*t, f, n)))
        .filter(|&(_, f, _)| f > 0)
        .collect();
    failing.sort_by_key(|&(t, f, _)| (std::cmp::Reverse(f), index[t]));
    for (t, f, n) in failing {
        pick.take(t, format!("failing in {f} of {n} trials"));
    }
    for t in tasks {
        pick.take(t, "remaining task in split order".into());
    }
    pick.picked
}

/// Tool names each split task called on its first recorded trial (lowest
/// trial number): one trial, so a task is not credited with paths that
/// only its retries took.
fn first_trial_paths<'a>(
    records: &'a [EpisodeRecord],
    index: &HashMap<&str, usize>,
) -> HashMap<&'a str, Vec<String>> {
    let mut first: HashMap<&str, &EpisodeRecord> = HashMap::new();
    for r in records {
        if !index.contains_key(r.task_id.as_str()) {
            continue;
        }
        let e = first.entry(r.task_id.as_str()).or_insert(r);
        if r.trial < e.trial {
            *e = r;
        }
    }
    first
        .into_iter()
        .map(|(t, r)| {
            let path = r
                .transcript
                .iter()
                .filter_map(|e| match e {
                    // The agent's path: the user's device steps are not its.
                    Entry::Tool { name, source, .. } if *source != CallSource::User => {
                        Some(name.clone())
                    }
                    _ => None,
                })
                .collect();
            (t, path)
        })
        .collect()
}

fn render_path(path: &[String]) -> String {
    if path.is_empty() {
        "(no tool calls)".into()
    } else {
        path.join("→")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ecdysis_runner::agent::{CallSource, EndReason};

    /// A tool call: name, whether it failed, its result.
    type Call<'a> = (&'a str, bool, &'a str);

    fn ep(task: &str, trial: u32, reward: f64, end: EndReason, calls: &[Call]) -> EpisodeRecord {
        let transcript = calls
            .iter()
            .enumerate()
            .map(|(i, (name, error, content))| Entry::Tool {
                step: i as u32 + 1,
                call_id: format!("c{i}"),
                name: name.to_string(),
                arguments: "{}".into(),
                proposed: None,
                content: content.to_string(),
                error: *error,
                blocked: false,
                source: CallSource::Model,
            })
            .collect();
        EpisodeRecord {
            end,
            steps: calls.len() as u32,
            tool_errors: calls.iter().filter(|c| c.1).count() as u32,
            transcript,
            ..EpisodeRecord::bare(task, trial, reward)
        }
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    const SPLIT: [&str; 8] = [
        "zeta-a", "alpha-a", "mid-b", "beta-b", "pass-1", "pass-2", "gamma-c", "pass-3",
    ];

    /// Three failure signatures:
    /// - A `max_steps` without calls: zeta-a, alpha-a;
    /// - B `agent_stop`, first failure `get_order: order <n> not found`: mid-b,
    ///   beta-b (failing on two trials);
    /// - C `too_many_errors` with a repeated failing call: gamma-c.
    ///
    /// Within A and B name order and split order disagree, so a pick by
    /// name shows. The passing tasks have paths get_user→cancel (twice)
    /// and get_user→refund. A task outside the split fails differently and
    /// must never be picked.
    fn evidence() -> Vec<EpisodeRecord> {
        let not_found = ("get_order", true, "Error: Order #W1 not found");
        let boom = ("exchange", true, "Error: boom");
        vec![
            ep("zeta-a", 0, 0.0, EndReason::MaxSteps, &[]),
            ep("alpha-a", 0, 0.0, EndReason::MaxSteps, &[]),
            ep("mid-b", 0, 0.0, EndReason::AgentStop, &[not_found]),
            ep("beta-b", 0, 0.0, EndReason::AgentStop, &[not_found]),
            ep("beta-b", 1, 0.0, EndReason::AgentStop, &[not_found]),
            ep(
                "pass-1",
                0,
                1.0,
                EndReason::AgentStop,
                &[("get_user", false, "{}"), ("cancel", false, "ok")],
            ),
            ep(
                "pass-2",
                0,
                1.0,
                EndReason::AgentStop,
                &[("get_user", false, "{}"), ("cancel", false, "ok")],
            ),
            ep("gamma-c", 0, 0.0, EndReason::TooManyErrors, &[boom, boom]),
            ep(
                "pass-3",
                0,
                1.0,
                EndReason::AgentStop,
                &[("get_user", false, "{}"), ("refund", false, "ok")],
            ),
            ep("outside", 0, 0.0, EndReason::HarnessError, &[]),
        ]
    }

    fn picked_tasks(s: &Selection) -> Vec<&str> {
        s.picked.iter().map(|p| p.task.as_str()).collect()
    }

    #[test]
    fn a_budget_covering_the_split_returns_it_in_order() {
        let split = names(&SPLIT);
        for strategy in [SelectStrategy::FailureAware, SelectStrategy::Random] {
            for budget in [8, 100] {
                let s = select(strategy, budget, &split, &evidence(), 1.0, 7);
                assert_eq!(s.tasks, split);
                assert_eq!(picked_tasks(&s), SPLIT);
                assert!(
                    s.picked
                        .iter()
                        .all(|p| p.reason == "budget covers every task")
                );
            }
        }
    }

    #[test]
    fn random_is_seeded_bounded_and_in_split_order() {
        let split: Vec<String> = (0..50).map(|i| format!("task-{i:02}")).collect();
        let a = select(SelectStrategy::Random, 10, &split, &[], 1.0, 1);
        let again = select(SelectStrategy::Random, 10, &split, &[], 1.0, 1);
        let b = select(SelectStrategy::Random, 10, &split, &[], 1.0, 2);
        assert_eq!(a, again);
        assert_ne!(a.tasks, b.tasks, "the seed must change the draw");
        for s in [&a, &b] {
            assert_eq!(s.tasks.len(), 10);
            let mut sorted = s.tasks.clone();
            sorted.sort();
            // The names sort like the split, so split order means sorted.
            assert_eq!(s.tasks, sorted);
            let mut drawn: Vec<String> = s.picked.iter().map(|p| p.task.clone()).collect();
            drawn.sort();
            assert_eq!(drawn, s.tasks);
        }
        // Not simply the head of the split.
        assert_ne!(a.tasks, split[..10].to_vec());
    }

    #[test]
    fn failure_aware_keeps_two_tasks_of_each_recurring_mechanism() {
        let split = names(&SPLIT);
        let s = select(SelectStrategy::FailureAware, 3, &split, &evidence(), 1.0, 0);
        // B and A recur on two tasks each (B's key sorts first): both of B,
        // in split order, then the first of A; the single C does not fit.
        assert_eq!(picked_tasks(&s), ["mid-b", "beta-b", "zeta-a"]);
        let b = "failure mechanism agent_stop | no finishing call";
        assert_eq!(
            (s.picked[0].reason.as_str(), s.picked[1].reason.as_str()),
            (b, b)
        );
        assert_eq!(
            s.picked[2].reason,
            "failure mechanism max_steps | no tool call at all"
        );
        let s = select(SelectStrategy::FailureAware, 5, &split, &evidence(), 1.0, 0);
        assert_eq!(
            picked_tasks(&s),
            ["mid-b", "beta-b", "zeta-a", "alpha-a", "gamma-c"]
        );
        assert!(
            s.picked[4]
                .reason
                .starts_with("failure mechanism too_many_errors")
        );
        // The chosen tasks show every recurring mechanism on two tasks: the
        // aggregation of their failures finds both recurring.
        let chosen: Vec<EpisodeRecord> = evidence()
            .into_iter()
            .filter(|r| s.tasks.contains(&r.task_id))
            .collect();
        let groups = aggregate::aggregate(&failure_record::failures(&chosen, 1.0));
        assert_eq!(groups.iter().filter(|g| g.recurring).count(), 2);
    }

    #[test]
    fn recurring_also_covers_each_detail_of_a_recurring_mechanism() {
        let not_found = ("get_order", true, "Error: Order #W1 not found");
        let boom = ("get_order", true, "Error: boom");
        let split = names(&["a", "b", "c", "d"]);
        let evidence = vec![
            ep("a", 0, 0.0, EndReason::AgentStop, &[not_found]),
            ep("b", 0, 0.0, EndReason::AgentStop, &[not_found]),
            ep("c", 0, 0.0, EndReason::AgentStop, &[not_found]),
            ep("d", 0, 0.0, EndReason::AgentStop, &[boom]),
        ];
        let groups = aggregate::aggregate(&failure_record::failures(&evidence, 1.0));
        assert_eq!(groups.len(), 1, "one mechanism: {groups:?}");
        assert_eq!(groups[0].details.len(), 2);
        let one = select(SelectStrategy::FailureAware, 3, &split, &evidence, 1.0, 0);
        assert_eq!(picked_tasks(&one), ["a", "b", "c"]);
        let s = select(SelectStrategy::Recurring, 3, &split, &evidence, 1.0, 0);
        assert_eq!(picked_tasks(&s), ["a", "b", "d"]);
        assert_eq!(
            s.picked[2].reason,
            "failure mechanism agent_stop | no finishing call, last result error boom"
        );
    }

    #[test]
    fn failure_aware_adds_new_paths_before_repeats() {
        let split = names(&SPLIT);
        let s = select(SelectStrategy::FailureAware, 7, &split, &evidence(), 1.0, 0);
        // pass-2 repeats pass-1's path; pass-1 and pass-3 open new ones.
        assert_eq!(&picked_tasks(&s)[5..], ["pass-1", "pass-3"]);
        assert_eq!(s.picked[5].reason, "execution path get_user→cancel");
        assert_eq!(s.picked[6].reason, "execution path get_user→refund");
        assert!(!s.tasks.contains(&"pass-2".to_string()));
    }

    #[test]
    fn then_the_most_failing_tasks() {
        // A third task of a recurring mechanism is left to step (c): most
        // failing trials first, then split order.
        let not_found = ("get_order", true, "Error: Order #W1 not found");
        let split = names(&["a", "b", "c", "d", "e"]);
        let evidence = vec![
            ep("a", 0, 0.0, EndReason::AgentStop, &[not_found]),
            ep("b", 0, 0.0, EndReason::AgentStop, &[not_found]),
            ep("c", 0, 1.0, EndReason::AgentStop, &[not_found]),
            ep("c", 1, 0.0, EndReason::AgentStop, &[not_found]),
            ep("d", 0, 0.0, EndReason::AgentStop, &[not_found]),
            ep("d", 1, 0.0, EndReason::AgentStop, &[not_found]),
            ep("e", 0, 1.0, EndReason::AgentStop, &[not_found]),
        ];
        let s = select(SelectStrategy::FailureAware, 3, &split, &evidence, 1.0, 0);
        assert_eq!(picked_tasks(&s), ["a", "b", "d"]);
        assert_eq!(s.picked[2].reason, "failing in 2 of 2 trials");
    }

    #[test]
    fn without_records_failure_aware_takes_the_split_head() {
        let s = select(SelectStrategy::FailureAware, 3, &names(&SPLIT), &[], 1.0, 0);
        assert_eq!(s.tasks, names(&SPLIT[..3]));
        assert!(
            s.picked
                .iter()
                .all(|p| p.reason == "remaining task in split order")
        );
    }

    #[test]
    fn lambda_decides_what_fails() {
        // With lambda 0 nothing fails (no reward is below 0): no signature
        // picks, only paths, in split order: zeta-a (no calls), mid-b
        // (get_order), pass-1.
        let s = select(
            SelectStrategy::FailureAware,
            3,
            &names(&SPLIT),
            &evidence(),
            0.0,
            0,
        );
        assert_eq!(picked_tasks(&s), ["zeta-a", "mid-b", "pass-1"]);
        assert!(
            s.picked
                .iter()
                .all(|p| p.reason.starts_with("execution path"))
        );
    }
}
