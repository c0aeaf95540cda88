//! Metrics of a run, per τ²'s definitions.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::agent::EpisodeRecord;

/// C(n, k) as a float (exact for the small n of trial counts).
fn choose(n: u64, k: u64) -> f64 {
    if k > n {
        return 0.0;
    }
    let k = k.min(n - k);
    (0..k).fold(1.0, |acc, i| acc * (n - i) as f64 / (i + 1) as f64)
}

/// pass^k of one task: the chance that k trials drawn without replacement
/// all succeed, `C(successes, k) / C(trials, k)` (τ²'s formula).
pub fn pass_hat_k(trials: u64, successes: u64, k: u64) -> f64 {
    if trials < k || k == 0 {
        return 0.0;
    }
    choose(successes, k) / choose(trials, k)
}

/// pass@k of one task: the chance that at least one of k trials succeeds,
/// `1 - C(trials - successes, k) / C(trials, k)`.
pub fn pass_at_k(trials: u64, successes: u64, k: u64) -> f64 {
    if trials < k || k == 0 {
        return 0.0;
    }
    1.0 - choose(trials - successes, k) / choose(trials, k)
}

/// One task's results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskResult {
    /// The task's id.
    pub task_id: String,
    /// Episodes run of this task.
    pub trials: u64,
    /// Of those, how many the environment judged solved.
    pub successes: u64,
    /// Mean reward over the task's episodes.
    pub mean_reward: f64,
    /// Each episode's end reason, as
    /// [`EndReason::as_str`](crate::agent::EndReason::as_str) names it.
    pub ends: Vec<String>,
}

/// Fuel burned by one hook across the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HookStats {
    /// Calls made of this hook.
    pub calls: u64,
    /// Calls whose answer was not the neutral one.
    pub interventions: u64,
    /// Calls that failed (trap, fuel, deadline, contract...).
    pub failures: u64,
    /// Fuel burnt over all calls.
    pub fuel_total: u64,
    /// Most fuel one call burnt.
    pub fuel_max: u64,
    /// Wall time over all calls, in microseconds.
    pub micros_total: u64,
    /// Bytes of text the hook's answers added to the model's input over
    /// all calls.
    #[serde(default)]
    pub added_bytes_total: u64,
}

/// Headline numbers of a set of episodes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    /// Episodes counted.
    pub episodes: u64,
    /// Distinct tasks among them.
    pub tasks: u64,
    /// Mean reward over all episodes (τ²'s "average reward", accuracy).
    pub accuracy: f64,
    /// pass^k for k = 1..=min trials, averaged over tasks.
    pub pass_hat_k: BTreeMap<u64, f64>,
    /// pass@k for k = 1..=min trials, averaged over tasks.
    pub pass_at_k: BTreeMap<u64, f64>,
    /// Episodes per end reason (`agent_stop`, `max_steps`, ...).
    pub ends: BTreeMap<String, u64>,
    /// Per hook name (`contract`, `realize`, ...), its calls, interventions,
    /// failures and cost.
    pub hooks: BTreeMap<String, HookStats>,
    /// Most bytes of text the harness added to one episode's model input
    /// (what the sandbox's `max_added_bytes` bounds).
    #[serde(default)]
    pub added_bytes_max: u64,
    /// Agent model calls answered, response-cache hits included.
    pub agent_calls: u64,
    /// Agent calls answered from the response cache.
    pub agent_cache_hits: u64,
    /// Agent prompt tokens, as the endpoint reported them.
    pub agent_prompt_tokens: u64,
    /// Agent completion tokens, as the endpoint reported them.
    pub agent_completion_tokens: u64,
    /// Of `agent_prompt_tokens`, those the endpoint served from its prefix
    /// cache (as it reported them).
    #[serde(default)]
    pub agent_cached_prompt_tokens: u64,
    /// User-simulator turns asked for (scripted or LLM).
    pub user_calls: u64,
    /// User-simulator prompt tokens recorded in the episodes (0: an LLM
    /// user's tokens are counted in the run's usage ledger instead).
    pub user_prompt_tokens: u64,
    /// User-simulator completion tokens recorded in the episodes (0, as
    /// above).
    pub user_completion_tokens: u64,
    /// Fresh model calls answered from the response cache / all calls.
    pub cache_hit_rate: f64,
    /// One entry per task, in task-id order.
    pub per_task: Vec<TaskResult>,
}

/// Compute the metrics of finished (scored) episodes.
pub fn compute(records: &[EpisodeRecord]) -> Metrics {
    let mut m = Metrics {
        episodes: records.len() as u64,
        ..Metrics::default()
    };
    let mut by_task: BTreeMap<&str, Vec<&EpisodeRecord>> = BTreeMap::new();
    for r in records {
        by_task.entry(&r.task_id).or_default().push(r);
        *m.ends.entry(r.end.as_str().to_string()).or_default() += 1;
        for h in &r.hooks {
            let s = m.hooks.entry(h.hook.clone()).or_default();
            s.calls += 1;
            s.interventions += u64::from(h.intervened);
            s.failures += u64::from(h.error.is_some());
            s.fuel_total += h.fuel;
            s.fuel_max = s.fuel_max.max(h.fuel);
            s.micros_total += h.micros;
            s.added_bytes_total += h.added_bytes;
        }
        let added: u64 = r.hooks.iter().map(|h| h.added_bytes).sum();
        m.added_bytes_max = m.added_bytes_max.max(added);
        m.agent_calls += r.agent_usage.calls;
        m.agent_cache_hits += r.agent_usage.cache_hits;
        m.agent_prompt_tokens += r.agent_usage.prompt_tokens;
        m.agent_completion_tokens += r.agent_usage.completion_tokens;
        m.agent_cached_prompt_tokens += r.agent_usage.cached_prompt_tokens;
        m.user_calls += r.user_usage.calls;
        m.user_prompt_tokens += r.user_usage.prompt_tokens;
        m.user_completion_tokens += r.user_usage.completion_tokens;
    }
    let hits = m.agent_cache_hits + records.iter().map(|r| r.user_usage.cache_hits).sum::<u64>();
    let calls = m.agent_calls + m.user_calls;
    m.cache_hit_rate = if calls > 0 {
        hits as f64 / calls as f64
    } else {
        0.0
    };
    m.tasks = by_task.len() as u64;
    if records.is_empty() {
        return m;
    }
    m.accuracy = records.iter().map(|r| r.reward).sum::<f64>() / records.len() as f64;
    let min_trials = by_task.values().map(|v| v.len() as u64).min().unwrap_or(0);
    for (task, eps) in &by_task {
        let n = eps.len() as u64;
        let c = eps.iter().filter(|r| r.success).count() as u64;
        m.per_task.push(TaskResult {
            task_id: task.to_string(),
            trials: n,
            successes: c,
            mean_reward: eps.iter().map(|r| r.reward).sum::<f64>() / n as f64,
            ends: eps.iter().map(|r| r.end.as_str().to_string()).collect(),
        });
    }
    for k in 1..=min_trials {
        let tasks = m.per_task.len() as f64;
        let hat = m
            .per_task
            .iter()
            .map(|t| pass_hat_k(t.trials, t.successes, k))
            .sum::<f64>()
            / tasks;
        let at = m
            .per_task
            .iter()
            .map(|t| pass_at_k(t.trials, t.successes, k))
            .sum::<f64>()
            / tasks;
        m.pass_hat_k.insert(k, hat);
        m.pass_at_k.insert(k, at);
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pass_hat_k_matches_the_formula() {
        // 3 trials, 2 successes: pass^1 = 2/3, pass^2 = 1/3, pass^3 = 0.
        assert!((pass_hat_k(3, 2, 1) - 2.0 / 3.0).abs() < 1e-12);
        assert!((pass_hat_k(3, 2, 2) - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(pass_hat_k(3, 2, 3), 0.0);
        assert_eq!(pass_hat_k(3, 3, 3), 1.0);
        assert_eq!(pass_hat_k(2, 2, 3), 0.0);
    }

    #[test]
    fn pass_at_k_matches_the_formula() {
        assert!((pass_at_k(3, 1, 1) - 1.0 / 3.0).abs() < 1e-12);
        assert!((pass_at_k(3, 1, 2) - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(pass_at_k(3, 1, 3), 1.0);
        assert_eq!(pass_at_k(3, 0, 3), 0.0);
    }
}

/// A lower bound on the wall time of a run whose host costs nothing: each
/// episode is `calls × latency` of pure model waiting on one of `slots`
/// concurrent lanes, so no schedule beats the longest episode or the total
/// work spread evenly over the lanes. Measuring against it over-states the
/// host's share, never under-states it.
pub fn zero_overhead_bound(calls_per_episode: &[u64], latency_secs: f64, slots: usize) -> f64 {
    let longest = calls_per_episode.iter().copied().max().unwrap_or(0) as f64 * latency_secs;
    let total = calls_per_episode.iter().sum::<u64>() as f64 * latency_secs;
    longest.max(total / slots.max(1) as f64)
}

/// The wall time of a run whose host costs nothing, when episodes start in
/// `calls_in_dispatch_order`'s order, each on the first lane to come free
/// (what the runner's FIFO semaphore does). Unlike [`zero_overhead_bound`],
/// no online scheduler that does not know episode lengths in advance can be
/// expected to reach the even spread, so this is the bound the host's own
/// overhead is measured against; it is never below [`zero_overhead_bound`].
pub fn dispatch_order_bound(
    calls_in_dispatch_order: &[u64],
    latency_secs: f64,
    slots: usize,
) -> f64 {
    let mut lanes = vec![0.0f64; slots.max(1)];
    for &calls in calls_in_dispatch_order {
        // The lane that comes free first takes the next episode.
        let (first_free, _) = lanes
            .iter()
            .enumerate()
            .min_by(|a, b| a.1.total_cmp(b.1))
            .expect("at least one lane");
        lanes[first_free] += calls as f64 * latency_secs;
    }
    lanes.into_iter().fold(0.0, f64::max)
}

#[cfg(test)]
mod bound_tests {
    use super::zero_overhead_bound;

    #[test]
    fn bound_is_the_longest_episode_or_the_even_spread() {
        assert_eq!(zero_overhead_bound(&[2, 2, 2], 1.0, 1), 6.0);
        assert_eq!(zero_overhead_bound(&[2, 2, 2], 1.0, 3), 2.0);
        assert_eq!(zero_overhead_bound(&[5, 1, 1, 1], 0.5, 2), 2.5);
        assert_eq!(zero_overhead_bound(&[1, 1, 1, 1], 1.0, 2), 2.0);
        assert_eq!(zero_overhead_bound(&[], 1.0, 2), 0.0);
    }

    #[test]
    fn dispatch_order_bound_packs_in_order_onto_the_first_free_lane() {
        use super::dispatch_order_bound;
        // Two lanes: 1 and 1 start, then 4 goes to lane 0 (free at 1), the
        // 1 to lane 1 (free at 1, then 2): makespan 5, the even spread 3.5.
        assert_eq!(dispatch_order_bound(&[1, 1, 4, 1], 1.0, 2), 5.0);
        assert_eq!(zero_overhead_bound(&[1, 1, 4, 1], 1.0, 2), 4.0);
        // Longest first packs better: the same work in another order.
        assert_eq!(dispatch_order_bound(&[4, 1, 1, 1], 1.0, 2), 4.0);
        assert_eq!(dispatch_order_bound(&[2, 2, 2], 0.5, 1), 3.0);
        assert_eq!(dispatch_order_bound(&[], 1.0, 3), 0.0);
    }
}
