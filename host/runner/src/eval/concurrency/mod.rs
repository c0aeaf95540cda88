//! Concurrency that fits the endpoint (`--concurrency auto`): the runner
//! keeps as many episodes in flight as the endpoint turns into throughput,
//! measured on the model calls themselves, and backs off when it answers
//! 429/5xx or times out.
//!
//! [`controller`] is the pure state machine; [`Driver`] feeds it from the
//! hub's [`CallSignals`] on the runner's clock and keeps the trajectory
//! that `summary.json` records ([`ConcurrencyReport`]). Which episodes run
//! and how each is seeded never depends on the limit, so a run's results
//! are the same at any concurrency; only its speed changes.

pub mod controller;
mod setting;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ecdysis_model::{CallSignals, SignalCounts};
use serde::{Deserialize, Serialize};

pub use controller::{
    AdaptiveSettings, Change, Controller, DEFAULT_MAX, Observation, Reason, SettingsError,
};
pub use setting::{Concurrency, ConcurrencyError};

/// How often the runner samples the signals: often enough that a burst of
/// 429s is answered within a fraction of a second, cheap (a few atomic
/// loads).
pub const TICK: Duration = Duration::from_millis(100);

/// An adaptive limit for a run: its settings and the signals of the
/// endpoints its models call.
#[derive(Debug, Clone)]
pub struct AdaptiveConcurrency {
    /// How the limit adapts.
    pub settings: AdaptiveSettings,
    /// The endpoints' answers and errors (the hub's
    /// `limiter().signals()`).
    pub signals: Arc<CallSignals>,
}

/// One move of the limit, as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedChange {
    /// Seconds since the run started.
    pub at_seconds: f64,
    /// The move.
    #[serde(flatten)]
    pub change: Change,
}

/// What the adaptive limit did in a run: `summary.json`'s `concurrency`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConcurrencyReport {
    /// The settings it ran with.
    pub settings: AdaptiveSettings,
    /// The limit at the end.
    pub final_limit: usize,
    /// Seconds spent at each limit.
    pub seconds_at: BTreeMap<usize, f64>,
    /// Every move, in order.
    pub changes: Vec<RecordedChange>,
    /// The endpoints' answers and errors over the run.
    pub signals: SignalCounts,
}

impl ConcurrencyReport {
    /// The time-weighted mean limit.
    pub fn mean_limit(&self) -> f64 {
        let total: f64 = self.seconds_at.values().sum();
        if total <= 0.0 {
            return 0.0;
        }
        self.seconds_at
            .iter()
            .map(|(limit, secs)| *limit as f64 * secs)
            .sum::<f64>()
            / total
    }

    /// The limit the run spent the most time at.
    pub fn most_used_limit(&self) -> Option<usize> {
        self.seconds_at
            .iter()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(limit, _)| *limit)
    }
}

/// The controller on the runner's clock.
pub struct Driver {
    controller: Controller,
    signals: Arc<CallSignals>,
    first: SignalCounts,
    last: SignalCounts,
    started: Instant,
    last_at: Instant,
    seconds_at: BTreeMap<usize, f64>,
    changes: Vec<RecordedChange>,
}

impl Driver {
    /// Starts measuring now.
    pub fn new(adaptive: &AdaptiveConcurrency) -> Self {
        let now = Instant::now();
        let first = adaptive.signals.snapshot();
        Self {
            controller: Controller::new(adaptive.settings.clone()),
            signals: Arc::clone(&adaptive.signals),
            first,
            last: first,
            started: now,
            last_at: now,
            seconds_at: BTreeMap::new(),
            changes: Vec::new(),
        }
    }

    /// Episodes that may be in flight now.
    pub fn limit(&self) -> usize {
        self.controller.limit()
    }

    /// Reads the signals and feeds the controller; the move it made, if
    /// any, for the progress line.
    pub fn tick(&mut self, in_flight: usize) -> Option<&RecordedChange> {
        let now = Instant::now();
        let counts = self.signals.snapshot();
        let elapsed = now - self.last_at;
        *self.seconds_at.entry(self.controller.limit()).or_default() += elapsed.as_secs_f64();
        let obs = Observation {
            elapsed,
            counts: counts.since(&self.last),
            in_flight,
        };
        self.last = counts;
        self.last_at = now;
        let change = self.controller.observe(obs)?;
        self.changes.push(RecordedChange {
            at_seconds: (now - self.started).as_secs_f64(),
            change,
        });
        self.changes.last()
    }

    /// What it did so far.
    pub fn report(&self) -> ConcurrencyReport {
        ConcurrencyReport {
            settings: self.controller.settings().clone(),
            final_limit: self.controller.limit(),
            seconds_at: self.seconds_at.clone(),
            changes: self.changes.clone(),
            signals: self.signals.snapshot().since(&self.first),
        }
    }
}

/// The progress line of a move: `concurrency 3 -> 4 (throughput rising:
/// 1.20 -> 1.71 calls/s, mean latency 1830 ms)`.
pub fn describe(change: &Change) -> String {
    let head = if change.from == change.to {
        format!("concurrency {} kept", change.to)
    } else {
        format!("concurrency {} -> {}", change.from, change.to)
    };
    let mut detail = String::from(change.reason.describe());
    if change.reason == Reason::Overload {
        let o = &change.overload;
        detail += &format!(
            ": {} rate-limited (429), {} unavailable (5xx), {} timed out, {} unreachable",
            o.rate_limited, o.unavailable, o.timeouts, o.unreachable
        );
    } else {
        match change.compared_with {
            Some(before) => {
                detail += &format!(": {before:.2} -> {:.2} calls/s", change.calls_per_sec)
            }
            None => detail += &format!(": {:.2} calls/s", change.calls_per_sec),
        }
        if let Some(ms) = change.mean_latency_ms {
            detail += &format!(", mean latency {ms:.0} ms");
        }
    }
    format!("{head} ({detail})")
}

/// The end-of-run line: `concurrency auto (1 to 16): mostly 3, mean 2.8,
/// 6 moves, final 3; endpoint: 412 answered, 2 rate-limited (429), 0
/// unavailable (5xx), 0 timed out`.
pub fn summary_line(report: &ConcurrencyReport) -> String {
    let s = &report.signals;
    format!(
        "concurrency auto (1 to {}): mostly {}, mean {:.1}, {} moves, final {}; endpoint: {} answered, {} rate-limited (429), {} unavailable (5xx), {} timed out",
        report.settings.max,
        report
            .most_used_limit()
            .map_or_else(|| "-".to_string(), |l| l.to_string()),
        report.mean_limit(),
        report.changes.len(),
        report.final_limit,
        s.answered,
        s.rate_limited,
        s.unavailable,
        s.timeouts
    )
}

#[cfg(test)]
mod tests;
