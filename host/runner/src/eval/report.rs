//! Progress output and the end-of-run table.

use std::sync::Mutex;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use ecdysis_sys::progress::PROGRESS;

use super::RunSummary;
use crate::agent::EpisodeRecord;

/// How a run shows its progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressDisplay {
    /// An indicatif bar on stderr (a terminal).
    Bar,
    /// A line every 10% with an ETA, as a [`PROGRESS`] event: logs, CI and
    /// runs nested in other commands.
    Lines,
    /// Nothing (evaluations inside other commands that report for them).
    Off,
}

/// Progress of a run, shown as its [`ProgressDisplay`] says.
pub struct Progress {
    bar: ProgressBar,
    display: ProgressDisplay,
    state: Mutex<Tally>,
}

struct Tally {
    done: u64,
    successes: u64,
    tokens: u64,
    last_decile: u64,
    /// Episodes read back from disk: the ETA counts only this process's.
    resumed: u64,
    started: std::time::Instant,
}

impl Progress {
    /// A progress display for `total` episodes of which `resumed`
    /// (`resumed_successes` solved) were read back from disk.
    pub fn new(total: u64, resumed: u64, resumed_successes: u64, display: ProgressDisplay) -> Self {
        let bar = if display == ProgressDisplay::Bar {
            let b = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            b.set_style(
                ProgressStyle::with_template(
                    "{elapsed_precise} [{bar:30}] {pos}/{len} episodes  {msg}",
                )
                .expect("valid template")
                .progress_chars("=> "),
            );
            b
        } else {
            ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::hidden())
        };
        bar.set_position(resumed);
        let progress = Progress {
            bar,
            display,
            state: Mutex::new(Tally {
                done: resumed,
                successes: resumed_successes,
                tokens: 0,
                last_decile: resumed * 10 / total.max(1),
                resumed,
                started: std::time::Instant::now(),
            }),
        };
        if resumed > 0 {
            progress.note(&format!(
                "resuming: {resumed} of {total} episodes already finished"
            ));
        }
        progress
    }

    /// Count a finished episode: the bar's success and token tally, or a line
    /// per 10% in quiet mode.
    pub fn finished(&self, r: &EpisodeRecord) {
        let mut t = self.state.lock().unwrap_or_else(|p| p.into_inner());
        t.done += 1;
        t.successes += u64::from(r.success);
        t.tokens += r.agent_usage.prompt_tokens
            + r.agent_usage.completion_tokens
            + r.user_usage.prompt_tokens
            + r.user_usage.completion_tokens;
        self.bar.inc(1);
        // Only a drawn bar shows its message.
        if self.display == ProgressDisplay::Bar {
            let msg = format!("success {}/{}  tokens {}", t.successes, t.done, t.tokens);
            self.bar.set_message(msg);
        }
        if self.display == ProgressDisplay::Lines {
            let total = self.bar.length().unwrap_or(1).max(1);
            let decile = t.done * 10 / total;
            if decile > t.last_decile {
                t.last_decile = decile;
                tracing::info!(
                    target: PROGRESS,
                    "progress: {}/{} episodes, {} solved{}",
                    t.done,
                    total,
                    t.successes,
                    eta(t.started.elapsed(), t.done - t.resumed, total - t.done)
                );
            }
        }
    }

    /// Say a line without tearing the bar (to the debug log when off).
    pub fn note(&self, line: &str) {
        match self.display {
            ProgressDisplay::Bar => self.bar.println(line),
            ProgressDisplay::Lines => tracing::info!(target: PROGRESS, "{line}"),
            ProgressDisplay::Off => tracing::debug!("{line}"),
        }
    }

    /// Clear the bar at the end of the run.
    pub fn done(&self) {
        self.bar.finish_and_clear();
    }
}

/// `, 12m elapsed, ETA 30m` from the time `ran` episodes took, for `left`
/// more; empty before the first episode of this process.
fn eta(elapsed: std::time::Duration, ran: u64, left: u64) -> String {
    if ran == 0 {
        return String::new();
    }
    let per = elapsed.as_secs_f64() / ran as f64;
    format!(
        ", {} elapsed, ETA {}",
        human_duration(elapsed.as_secs_f64()),
        human_duration(per * left as f64)
    )
}

/// `45s`, `12m`, `2h05m`.
pub fn human_duration(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m", s / 60)
    } else {
        format!("{}h{:02}m", s / 3600, s % 3600 / 60)
    }
}

/// The end-of-run table.
pub fn render(s: &RunSummary) -> String {
    let m = &s.metrics;
    let mut out = String::new();
    let harness = s
        .config
        .harness
        .as_ref()
        .map_or("none (Direct)", |h| h.short());
    out += &format!(
        "run: {} {} | harness {} | agent {} | user {} | {} tasks x {} trials\n",
        s.config.settings.domain,
        s.config.settings.split.as_deref().unwrap_or("all"),
        harness,
        s.config.agent_model,
        s.config.user_model,
        s.config.tasks.len(),
        s.config.settings.trials
    );
    if s.config.agent_model.is_simulated() {
        out += &format!(
            "note: {} (the agent is a sim: testbed model following the gold plan with injected quirks)\n",
            super::SIMULATED_LABEL
        );
    }
    out += &format!(
        "accuracy (avg reward)  {:.3}   ({} episodes)\n",
        m.accuracy, m.episodes
    );
    out += &format!(
        "do-nothing floor       {:.3}   ({}/{} tasks solved by doing nothing)\n",
        s.floor_solved as f64 / s.floor_tasks.max(1) as f64,
        s.floor_solved,
        s.floor_tasks
    );
    for (k, v) in &m.pass_hat_k {
        out += &format!(
            "pass^{k}                 {v:.3}   pass@{k} {:.3}\n",
            m.pass_at_k.get(k).copied().unwrap_or(0.0)
        );
    }
    out += "end reasons           ";
    out += &m
        .ends
        .iter()
        .map(|(k, v)| format!(" {k}={v}"))
        .collect::<String>();
    out += "\n";
    if !m.hooks.is_empty() {
        out += "hook       calls  interventions  failures   fuel/call   µs/call  added B/episode\n";
        let episodes = m.episodes.max(1);
        for (hook, h) in &m.hooks {
            out += &format!(
                "{hook:<10} {:>5}  {:>13}  {:>8}  {:>10}  {:>8.1}  {:>15}\n",
                h.calls,
                h.interventions,
                h.failures,
                h.fuel_total / h.calls.max(1),
                h.micros_total as f64 / h.calls.max(1) as f64,
                h.added_bytes_total / episodes
            );
        }
        out += &format!(
            "text the harness added to the model's input: at most {} bytes (~{} tokens) in one episode\n",
            m.added_bytes_max,
            ecdysis_sandbox::sandbox::added::estimated_tokens(m.added_bytes_max)
        );
    }
    out += &format!(
        "tokens: agent {} in / {} out ({} calls), user {} in / {} out ({} calls); cache hit rate {:.1}%\n",
        m.agent_prompt_tokens,
        m.agent_completion_tokens,
        m.agent_calls,
        m.user_prompt_tokens,
        m.user_completion_tokens,
        m.user_calls,
        m.cache_hit_rate * 100.0
    );
    if m.agent_cached_prompt_tokens > 0 {
        out += &format!(
            "the endpoint's prefix cache served {:.1}% of the agent's prompt tokens ({} of {})\n",
            100.0 * m.agent_cached_prompt_tokens as f64 / m.agent_prompt_tokens.max(1) as f64,
            m.agent_cached_prompt_tokens,
            m.agent_prompt_tokens
        );
    }
    if let Some(l) = &s.ledger {
        out += &format!("cost: ${:.4}\n", l.total.usd);
    }
    if !s.unfinished.is_empty() {
        out += &format!(
            "unfinished (infrastructure errors, run again to resume): {}\n",
            s.unfinished.len()
        );
    }
    if let Some(c) = &s.concurrency {
        out += &super::concurrency::summary_line(c);
        out += "\n";
    }
    // Three decimals under ten seconds: a host-bound simulated run of 40
    // episodes takes tens of milliseconds, which one decimal showed as 0.0s.
    let precision = if s.wall_seconds < 10.0 { 3 } else { 1 };
    out += &format!(
        "wall time {:.precision$}s ({} episodes run now)\n",
        s.wall_seconds, s.ran_now
    );
    out
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{eta, human_duration};

    #[test]
    fn the_eta_extrapolates_this_processs_episodes() {
        assert_eq!(eta(Duration::from_secs(600), 0, 10), "");
        // 10 episodes in 10 minutes, 30 left: 30 minutes.
        assert_eq!(
            eta(Duration::from_secs(600), 10, 30),
            ", 10m elapsed, ETA 30m"
        );
        assert_eq!(human_duration(59.4), "59s");
        assert_eq!(human_duration(7500.0), "2h05m");
    }
}
