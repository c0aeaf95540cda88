//! What the endpoints said, counted: the evidence an adaptive concurrency
//! limit reads (answered attempts and their latency, 429s, 5xx, timeouts).
//!
//! The counters only ever grow; a reader takes a [`SignalCounts`] snapshot
//! and subtracts the previous one to get what happened in between.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::ModelError;

/// Running totals of HTTP attempts, shared by every model of a
/// [`crate::ModelHub`] (through its [`crate::EndpointLimiter`]).
#[derive(Debug, Default)]
pub struct CallSignals {
    answered: AtomicU64,
    answered_micros: AtomicU64,
    rate_limited: AtomicU64,
    unavailable: AtomicU64,
    timeouts: AtomicU64,
    unreachable: AtomicU64,
}

/// A snapshot of [`CallSignals`], or the difference of two.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignalCounts {
    /// Attempts the endpoint answered with a chat completion (2xx, parsed).
    pub answered: u64,
    /// Total latency of those attempts, in microseconds.
    pub answered_micros: u64,
    /// Attempts answered 429.
    pub rate_limited: u64,
    /// Attempts answered 5xx or 408.
    pub unavailable: u64,
    /// Attempts that ran past the connect or request timeout.
    pub timeouts: u64,
    /// Attempts that could not reach the endpoint (refused, reset).
    pub unreachable: u64,
}

impl SignalCounts {
    /// Attempts that say the endpoint is overloaded or failing: 429, 5xx,
    /// timeouts and refused connections.
    pub fn overload(&self) -> u64 {
        self.rate_limited + self.unavailable + self.timeouts + self.unreachable
    }

    /// What happened between `earlier` and `self` (counters never shrink;
    /// saturating, so a mixed-up pair yields zeros rather than a panic).
    pub fn since(&self, earlier: &SignalCounts) -> SignalCounts {
        SignalCounts {
            answered: self.answered.saturating_sub(earlier.answered),
            answered_micros: self.answered_micros.saturating_sub(earlier.answered_micros),
            rate_limited: self.rate_limited.saturating_sub(earlier.rate_limited),
            unavailable: self.unavailable.saturating_sub(earlier.unavailable),
            timeouts: self.timeouts.saturating_sub(earlier.timeouts),
            unreachable: self.unreachable.saturating_sub(earlier.unreachable),
        }
    }

    /// The sum of two counts (windows joined).
    pub fn plus(&self, other: &SignalCounts) -> SignalCounts {
        SignalCounts {
            answered: self.answered + other.answered,
            answered_micros: self.answered_micros + other.answered_micros,
            rate_limited: self.rate_limited + other.rate_limited,
            unavailable: self.unavailable + other.unavailable,
            timeouts: self.timeouts + other.timeouts,
            unreachable: self.unreachable + other.unreachable,
        }
    }

    /// Mean latency of the answered attempts (`None` when there were none).
    pub fn mean_latency(&self) -> Option<Duration> {
        (self.answered > 0).then(|| Duration::from_micros(self.answered_micros / self.answered))
    }
}

impl CallSignals {
    /// Counts one HTTP attempt that took `elapsed` and ended in `outcome`.
    /// Errors that say nothing about load (401, 404, a bad request, a
    /// malformed reply) are not counted.
    pub fn record(&self, elapsed: Duration, outcome: Result<(), &ModelError>) {
        let counter = match outcome {
            Ok(()) => {
                let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
                self.answered_micros.fetch_add(micros, Ordering::Relaxed);
                &self.answered
            }
            Err(ModelError::RateLimited { .. }) => &self.rate_limited,
            Err(ModelError::Unavailable { .. }) => &self.unavailable,
            Err(ModelError::Timeout { .. }) => &self.timeouts,
            Err(ModelError::Connection { .. }) => &self.unreachable,
            Err(_) => return,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The totals so far.
    pub fn snapshot(&self) -> SignalCounts {
        SignalCounts {
            answered: self.answered.load(Ordering::Relaxed),
            answered_micros: self.answered_micros.load(Ordering::Relaxed),
            rate_limited: self.rate_limited.load(Ordering::Relaxed),
            unavailable: self.unavailable.load(Ordering::Relaxed),
            timeouts: self.timeouts.load(Ordering::Relaxed),
            unreachable: self.unreachable.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(kind: &str) -> ModelError {
        let endpoint = "http://e/v1".to_string();
        let message = "m".to_string();
        match kind {
            "429" => ModelError::RateLimited {
                endpoint,
                message,
                retry_after_secs: None,
            },
            "503" => ModelError::Unavailable {
                endpoint,
                status: 503,
                message,
            },
            "timeout" => ModelError::Timeout { endpoint, message },
            "refused" => ModelError::Connection { endpoint, message },
            _ => ModelError::NotFound { endpoint, message },
        }
    }

    #[test]
    fn counts_each_outcome_and_differences_of_snapshots() {
        let signals = CallSignals::default();
        signals.record(Duration::from_millis(100), Ok(()));
        let first = signals.snapshot();
        signals.record(Duration::from_millis(300), Ok(()));
        for kind in ["429", "429", "503", "timeout", "refused", "404"] {
            signals.record(Duration::from_millis(5), Err(&error(kind)));
        }
        let delta = signals.snapshot().since(&first);
        assert_eq!(
            delta,
            SignalCounts {
                answered: 1,
                answered_micros: 300_000,
                rate_limited: 2,
                unavailable: 1,
                timeouts: 1,
                unreachable: 1,
            }
        );
        // The 404 says nothing about load and is not counted.
        assert_eq!(delta.overload(), 5);
        assert_eq!(delta.mean_latency(), Some(Duration::from_millis(300)));
        assert_eq!(
            first.plus(&delta).mean_latency(),
            Some(Duration::from_millis(200))
        );
        assert_eq!(SignalCounts::default().mean_latency(), None);
    }
}
