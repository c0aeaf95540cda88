//! The limit's state machine: fed what the endpoint did over short windows,
//! it decides how many episodes to keep in flight. Pure: no clock, no I/O,
//! so its decisions are unit-tested on synthetic observations.
//!
//! The method, a hill climb on measured throughput with multiplicative
//! back-off:
//! - a window closes once it has lasted `min_window` and holds at least
//!   `max(min_calls, 2 × limit)` answered calls, all with exactly `limit`
//!   episodes in flight (a window that drains after a decrease, or runs short
//!   of work at the end of a run, is thrown away: it measures no level);
//! - from a measured level the limit probes a neighbour: up (doubling until
//!   the first probe fails, "slow start", then +1) or down (−1), and keeps
//!   it only if the neighbour's throughput earns it: up needs at least
//!   `gain` of the ideal rise (`to/from` when every added episode were as
//!   productive as the others), down keeps at least `1 − gain ×` the ideal
//!   loss. A kept probe keeps climbing the same way; a failed one goes back
//!   and holds `hold_windows` windows before probing the other way;
//! - any 429, 5xx, timeout or refused connection while the level is in
//!   force halves the limit at once (errors of episodes started under a
//!   higher limit, still draining, are not held against the lower one).

use std::time::Duration;

use ecdysis_model::SignalCounts;
use serde::{Deserialize, Serialize};

/// How the limit adapts. [`Default`]: the values `--concurrency auto` uses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdaptiveSettings {
    /// Most episodes in flight.
    pub max: usize,
    /// Episodes in flight at the start.
    pub start: usize,
    /// Shortest window a level is measured over.
    #[serde(with = "duration_ms")]
    pub min_window: Duration,
    /// Fewest answered calls in a window (and at least two per episode in
    /// flight), so one slow call does not decide.
    pub min_calls: u64,
    /// Share of the ideal throughput change a probe must show to be kept.
    pub gain: f64,
    /// Windows a level is held after a failed probe before the next one.
    pub hold_windows: u32,
}

/// The default ceiling of `--concurrency auto`.
pub const DEFAULT_MAX: usize = 16;

impl Default for AdaptiveSettings {
    fn default() -> Self {
        Self {
            max: DEFAULT_MAX,
            start: 1,
            min_window: Duration::from_secs(5),
            min_calls: 8,
            gain: 0.3,
            hold_windows: 3,
        }
    }
}

/// Invalid [`AdaptiveSettings`].
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SettingsError {
    /// `max` or `start` is zero, or `start` exceeds `max`.
    #[error("adaptive concurrency needs 1 ≤ start ({start}) ≤ max ({max})")]
    Bounds {
        /// The start given.
        start: usize,
        /// The max given.
        max: usize,
    },
    /// `gain` outside (0, 1].
    #[error("adaptive concurrency gain {0} is not in (0, 1]")]
    Gain(f64),
}

impl AdaptiveSettings {
    /// Checks the bounds and the gain.
    pub fn validate(&self) -> Result<(), SettingsError> {
        if self.start == 0 || self.start > self.max {
            return Err(SettingsError::Bounds {
                start: self.start,
                max: self.max,
            });
        }
        if !(self.gain > 0.0 && self.gain <= 1.0) {
            return Err(SettingsError::Gain(self.gain));
        }
        Ok(())
    }
}

/// What happened since the previous observation.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Observation {
    /// Time since the previous observation.
    pub elapsed: Duration,
    /// The endpoint's answers and errors in that time.
    pub counts: SignalCounts,
    /// Episodes in flight now.
    pub in_flight: usize,
}

/// Why the limit moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// A measured level probes the level above.
    ProbeUp,
    /// A measured level probes the level below.
    ProbeDown,
    /// The level above earned its keep; climbing on.
    ThroughputRising,
    /// The level above did not raise throughput enough: back.
    ThroughputFlat,
    /// The level below kept the throughput; going lower.
    ThroughputHeld,
    /// The level below lost throughput: back.
    ThroughputFell,
    /// 429s, 5xx, timeouts or refused connections: halved.
    Overload,
}

impl Reason {
    /// How the progress line says it.
    pub fn describe(self) -> &'static str {
        match self {
            Self::ProbeUp => "probing up",
            Self::ProbeDown => "probing down",
            Self::ThroughputRising => "throughput rising",
            Self::ThroughputFlat => "throughput flat",
            Self::ThroughputHeld => "throughput held with fewer",
            Self::ThroughputFell => "throughput fell",
            Self::Overload => "endpoint overloaded",
        }
    }
}

/// One move of the limit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Change {
    /// The limit before.
    pub from: usize,
    /// The limit after.
    pub to: usize,
    /// Why.
    pub reason: Reason,
    /// Answered calls per second in the window that decided (0 when an
    /// overload cut the window short).
    pub calls_per_sec: f64,
    /// The throughput it was compared with (`None` for a probe from a
    /// fresh measurement and for an overload).
    pub compared_with: Option<f64>,
    /// Mean latency of the window's answered calls, in milliseconds.
    pub mean_latency_ms: Option<f64>,
    /// The window's overload signals.
    pub overload: SignalCounts,
}

/// What the controller is measuring.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    /// The current level, for a baseline (after `hold` more windows).
    Baseline { hold: u32 },
    /// A probed level; `baseline` is the throughput at `from`.
    Probe { from: usize, baseline: f64 },
}

/// The adaptive limit.
#[derive(Debug, Clone)]
pub struct Controller {
    settings: AdaptiveSettings,
    limit: usize,
    phase: Phase,
    slow_start: bool,
    next_up: bool,
    window: Observation,
}

impl Controller {
    /// A controller at `settings.start` (validate the settings first).
    pub fn new(settings: AdaptiveSettings) -> Self {
        let limit = settings.start.clamp(1, settings.max.max(1));
        Self {
            settings,
            limit,
            phase: Phase::Baseline { hold: 0 },
            slow_start: true,
            next_up: true,
            window: Observation::default(),
        }
    }

    /// Episodes that may be in flight now.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// The settings it runs with.
    pub fn settings(&self) -> &AdaptiveSettings {
        &self.settings
    }

    /// Feeds what happened since the last call; a move of the limit, if any.
    pub fn observe(&mut self, obs: Observation) -> Option<Change> {
        if obs.in_flight > self.limit {
            // Draining after a decrease: neither its errors nor its
            // throughput belong to the new level.
            self.window = Observation::default();
            return None;
        }
        if obs.counts.overload() > 0 {
            return self.back_off(obs.counts);
        }
        if obs.in_flight < self.limit {
            // Short of work: the level is not being exercised.
            self.window = Observation::default();
            return None;
        }
        self.window.elapsed += obs.elapsed;
        self.window.counts = self.window.counts.plus(&obs.counts);
        let needed = self.settings.min_calls.max(2 * self.limit as u64);
        if self.window.elapsed < self.settings.min_window || self.window.counts.answered < needed {
            return None;
        }
        let window = std::mem::take(&mut self.window);
        let throughput = window.counts.answered as f64 / window.elapsed.as_secs_f64();
        let latency = window
            .counts
            .mean_latency()
            .map(|d| d.as_secs_f64() * 1000.0);
        match self.phase {
            Phase::Baseline { hold } if hold > 0 => {
                self.phase = Phase::Baseline { hold: hold - 1 };
                None
            }
            Phase::Baseline { .. } => self.probe(throughput, latency),
            Phase::Probe { from, baseline } => self.judge(from, baseline, throughput, latency),
        }
    }

    /// Halves the limit (at 1 already: stays, nothing to report).
    fn back_off(&mut self, overload: SignalCounts) -> Option<Change> {
        self.window = Observation::default();
        self.slow_start = false;
        self.next_up = false;
        self.phase = Phase::Baseline {
            hold: self.settings.hold_windows,
        };
        let from = self.limit;
        self.limit = (from / 2).max(1);
        (self.limit != from).then_some(Change {
            from,
            to: self.limit,
            reason: Reason::Overload,
            calls_per_sec: 0.0,
            compared_with: None,
            mean_latency_ms: overload.mean_latency().map(|d| d.as_secs_f64() * 1000.0),
            overload,
        })
    }

    /// Moves to a neighbour of the measured level.
    fn probe(&mut self, throughput: f64, latency: Option<f64>) -> Option<Change> {
        let from = self.limit;
        let can_up = from < self.settings.max;
        let can_down = from > 1 && !self.slow_start;
        let up = match (can_up, can_down) {
            (false, false) => return None,
            (true, false) => true,
            (false, true) => false,
            (true, true) => self.next_up,
        };
        let to = self.neighbour(from, up);
        self.phase = Phase::Probe {
            from,
            baseline: throughput,
        };
        self.limit = to;
        Some(Change {
            from,
            to,
            reason: if up {
                Reason::ProbeUp
            } else {
                Reason::ProbeDown
            },
            calls_per_sec: throughput,
            compared_with: None,
            mean_latency_ms: latency,
            overload: SignalCounts::default(),
        })
    }

    /// The level above (doubling in slow start) or below.
    fn neighbour(&self, from: usize, up: bool) -> usize {
        if !up {
            from - 1
        } else if self.slow_start {
            (from * 2).min(self.settings.max)
        } else {
            from + 1
        }
    }

    /// Keeps the probed level (and probes on the same way) or goes back.
    fn judge(
        &mut self,
        from: usize,
        baseline: f64,
        throughput: f64,
        latency: Option<f64>,
    ) -> Option<Change> {
        let at = self.limit;
        let up = at > from;
        let step = at.abs_diff(from) as f64 / from as f64;
        let kept = if up {
            throughput >= baseline * (1.0 + self.settings.gain * step)
        } else {
            throughput >= baseline * (1.0 - self.settings.gain * step)
        };
        let change = |to, reason| Change {
            from: at,
            to,
            reason,
            calls_per_sec: throughput,
            compared_with: Some(baseline),
            mean_latency_ms: latency,
            overload: SignalCounts::default(),
        };
        if kept {
            let can_go_on = if up { at < self.settings.max } else { at > 1 };
            let reason = if up {
                Reason::ThroughputRising
            } else {
                Reason::ThroughputHeld
            };
            if !can_go_on {
                self.phase = Phase::Baseline {
                    hold: self.settings.hold_windows,
                };
                self.next_up = !up;
                return Some(change(at, reason));
            }
            let to = self.neighbour(at, up);
            self.phase = Phase::Probe {
                from: at,
                baseline: throughput,
            };
            self.limit = to;
            return Some(change(to, reason));
        }
        self.slow_start = false;
        self.next_up = !up;
        self.phase = Phase::Baseline {
            hold: self.settings.hold_windows,
        };
        self.limit = from;
        Some(change(
            from,
            if up {
                Reason::ThroughputFlat
            } else {
                Reason::ThroughputFell
            },
        ))
    }
}

/// `Duration` as whole milliseconds in JSON.
mod duration_ms {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(d)?))
    }
}
