//! The controller against synthetic endpoints: one observation is one
//! second of an endpoint whose throughput is a function of the limit.

use std::collections::BTreeMap;
use std::time::Duration;

use ecdysis_model::SignalCounts;

use super::controller::{AdaptiveSettings, Controller, Observation, Reason, SettingsError};
use super::describe;

fn settings(max: usize) -> AdaptiveSettings {
    AdaptiveSettings {
        max,
        min_window: Duration::from_secs(2),
        ..AdaptiveSettings::default()
    }
}

/// One second at the controller's limit of an endpoint with `slots` slots
/// each answering `per_slot` calls a second; a queue of `queue` more, and
/// 429 for each episode beyond. `wobble` (±) varies the throughput from
/// second to second, deterministically.
struct Endpoint {
    slots: usize,
    queue: usize,
    per_slot: f64,
    wobble: f64,
    second: u64,
}

impl Endpoint {
    fn new(slots: usize, queue: usize) -> Self {
        Self {
            slots,
            queue,
            per_slot: 10.0,
            wobble: 0.0,
            second: 0,
        }
    }

    fn second(&mut self, limit: usize) -> Observation {
        self.second += 1;
        // A fixed pseudo-random sign and size per second: −1..1.
        let h = self.second.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
        let jitter = (h % 2001) as f64 / 1000.0 - 1.0;
        let served = limit.min(self.slots) as f64 * self.per_slot * (1.0 + self.wobble * jitter);
        let refused = limit.saturating_sub(self.slots + self.queue) as u64;
        Observation {
            elapsed: Duration::from_secs(1),
            counts: SignalCounts {
                answered: served.round() as u64,
                answered_micros: served.round() as u64 * 100_000,
                rate_limited: refused,
                ..SignalCounts::default()
            },
            in_flight: limit,
        }
    }
}

/// Seconds spent at each limit.
type TimeAt = BTreeMap<usize, u64>;

/// A move: from, to, why.
type Move = (usize, usize, Reason);

/// Runs `seconds` seconds; the seconds spent at each limit and the moves.
fn run(controller: &mut Controller, endpoint: &mut Endpoint, seconds: u64) -> (TimeAt, Vec<Move>) {
    let mut at = BTreeMap::new();
    let mut moves = Vec::new();
    for _ in 0..seconds {
        let limit = controller.limit();
        *at.entry(limit).or_default() += 1;
        if let Some(c) = controller.observe(endpoint.second(limit)) {
            moves.push((c.from, c.to, c.reason));
        }
    }
    (at, moves)
}

fn share(at: &BTreeMap<usize, u64>, limits: &[usize]) -> f64 {
    let total: u64 = at.values().sum();
    limits
        .iter()
        .map(|l| at.get(l).copied().unwrap_or(0))
        .sum::<u64>() as f64
        / total as f64
}

#[test]
fn rising_throughput_climbs_by_doubling_to_the_max_and_stays_near_it() {
    let mut c = Controller::new(settings(16));
    let mut endpoint = Endpoint::new(64, 0);
    let (_, moves) = run(&mut c, &mut endpoint, 9);
    assert_eq!(
        moves,
        [
            (1, 2, Reason::ProbeUp),
            (2, 4, Reason::ThroughputRising),
            (4, 8, Reason::ThroughputRising),
            (8, 16, Reason::ThroughputRising),
        ],
    );
    let (at, _) = run(&mut c, &mut endpoint, 300);
    assert!(share(&at, &[16]) > 0.7, "{at:?}");
    assert!(share(&at, &[15, 16]) == 1.0, "{at:?}");
}

#[test]
fn a_plateau_settles_at_the_knee() {
    for slots in [1, 2, 3, 5] {
        let mut c = Controller::new(settings(16));
        let mut endpoint = Endpoint::new(slots, 100);
        endpoint.wobble = 0.05;
        run(&mut c, &mut endpoint, 60);
        let (at, moves) = run(&mut c, &mut endpoint, 600);
        assert!(
            share(&at, &[slots]) > 0.6,
            "{slots} slots: {at:?} {moves:?}"
        );
        // Noise (±5 %) may carry a probe one level further now and then.
        assert!(
            share(&at, &[slots.saturating_sub(1), slots, slots + 1]) > 0.95,
            "{slots} slots: {at:?}"
        );
    }
}

#[test]
fn a_flat_probe_goes_back_and_holds_before_probing_down() {
    let mut c = Controller::new(settings(16));
    let mut endpoint = Endpoint::new(2, 100);
    let (_, moves) = run(&mut c, &mut endpoint, 30);
    assert_eq!(
        moves[..4],
        [
            (1, 2, Reason::ProbeUp),
            (2, 4, Reason::ThroughputRising),
            (4, 2, Reason::ThroughputFlat),
            // Held 3 windows of 2 s, then the other way.
            (2, 1, Reason::ProbeDown),
        ],
    );
    assert_eq!(moves[4], (1, 2, Reason::ThroughputFell));
}

#[test]
fn a_burst_of_429s_halves_the_limit_and_draining_errors_are_not_held_against_it() {
    let mut c = Controller::new(settings(16));
    let mut endpoint = Endpoint::new(64, 0);
    run(&mut c, &mut endpoint, 12);
    assert_eq!(c.limit(), 16);
    let burst = Observation {
        elapsed: Duration::from_millis(100),
        counts: SignalCounts {
            answered: 3,
            rate_limited: 4,
            ..SignalCounts::default()
        },
        in_flight: 16,
    };
    let change = c.observe(burst).expect("a move");
    assert_eq!((change.from, change.to), (16, 8));
    assert_eq!(change.reason, Reason::Overload);
    assert!(
        describe(&change).contains("4 rate-limited (429)"),
        "{}",
        describe(&change)
    );
    // The 16 episodes started before drain with more 429s: no further cut.
    assert!(c.observe(burst).is_none());
    assert_eq!(c.limit(), 8);
    // Once at the new level, fresh errors cut again.
    assert_eq!(
        c.observe(Observation {
            in_flight: 8,
            ..burst
        })
        .map(|c| c.to),
        Some(4)
    );
}

#[test]
fn timeouts_and_5xx_back_off_too_and_one_is_the_floor() {
    let mut c = Controller::new(settings(4));
    let mut endpoint = Endpoint::new(64, 0);
    run(&mut c, &mut endpoint, 8);
    assert_eq!(c.limit(), 4);
    let failing = |counts, in_flight| Observation {
        elapsed: Duration::from_secs(1),
        counts,
        in_flight,
    };
    let timeouts = SignalCounts {
        timeouts: 1,
        ..SignalCounts::default()
    };
    let unavailable = SignalCounts {
        unavailable: 2,
        ..SignalCounts::default()
    };
    assert_eq!(c.observe(failing(timeouts, 4)).map(|c| c.to), Some(2));
    assert_eq!(c.observe(failing(unavailable, 2)).map(|c| c.to), Some(1));
    assert!(c.observe(failing(unavailable, 1)).is_none());
    assert_eq!(c.limit(), 1);
}

#[test]
fn an_endpoint_that_rate_limits_beyond_a_queue_keeps_the_limit_below_it() {
    let mut c = Controller::new(settings(32));
    // 4 slots, 2 queued, 429 beyond 6.
    let mut endpoint = Endpoint::new(4, 2);
    endpoint.wobble = 0.05;
    let (at, moves) = run(&mut c, &mut endpoint, 600);
    assert!(moves.iter().any(|m| m.2 == Reason::Overload), "{moves:?}");
    let late = run(&mut c, &mut endpoint, 600).0;
    assert!(share(&late, &[3, 4, 5]) == 1.0, "{late:?} (first: {at:?})");
    assert!(share(&late, &[4]) > 0.6, "{late:?}");
}

#[test]
fn windows_short_of_work_or_calls_decide_nothing() {
    let mut c = Controller::new(settings(8));
    let starved = Observation {
        elapsed: Duration::from_secs(10),
        counts: SignalCounts {
            answered: 100,
            ..SignalCounts::default()
        },
        in_flight: 0,
    };
    for _ in 0..10 {
        assert!(c.observe(starved).is_none());
    }
    // Long enough but too few calls (8 needed).
    let sparse = Observation {
        elapsed: Duration::from_secs(10),
        counts: SignalCounts {
            answered: 1,
            ..SignalCounts::default()
        },
        in_flight: 1,
    };
    for _ in 0..7 {
        assert!(c.observe(sparse).is_none());
    }
    assert_eq!(c.observe(sparse).map(|c| c.to), Some(2));
}

#[test]
fn settings_are_checked() {
    let bad = |start, max, gain| AdaptiveSettings {
        start,
        max,
        gain,
        ..AdaptiveSettings::default()
    };
    assert_eq!(
        bad(0, 4, 0.3).validate(),
        Err(SettingsError::Bounds { start: 0, max: 4 })
    );
    assert_eq!(
        bad(5, 4, 0.3).validate(),
        Err(SettingsError::Bounds { start: 5, max: 4 })
    );
    assert_eq!(bad(1, 4, 0.0).validate(), Err(SettingsError::Gain(0.0)));
    assert!(bad(1, 1, 1.0).validate().is_ok());
    // At a max of 1 nothing ever moves.
    let mut c = Controller::new(bad(1, 1, 0.3));
    let mut endpoint = Endpoint::new(8, 0);
    assert!(run(&mut c, &mut endpoint, 50).1.is_empty());
}

#[test]
fn the_report_weighs_time_at_each_limit_and_the_lines_say_the_numbers() {
    use super::{ConcurrencyReport, summary_line};
    let report = ConcurrencyReport {
        settings: settings(8),
        final_limit: 3,
        seconds_at: [(1, 10.0), (3, 30.0)].into(),
        changes: Vec::new(),
        signals: SignalCounts {
            answered: 40,
            rate_limited: 2,
            ..SignalCounts::default()
        },
    };
    assert_eq!(report.mean_limit(), 2.5);
    assert_eq!(report.most_used_limit(), Some(3));
    let line = summary_line(&report);
    assert!(line.contains("mostly 3, mean 2.5"), "{line}");
    assert!(line.contains("2 rate-limited (429)"), "{line}");
    let mut c = Controller::new(settings(8));
    let mut endpoint = Endpoint::new(64, 0);
    let (_, _) = run(&mut c, &mut endpoint, 1);
    let first = c.observe(endpoint.second(1)).expect("a probe");
    assert_eq!(
        describe(&first),
        "concurrency 1 -> 2 (probing up: 10.00 calls/s, mean latency 100 ms)"
    );
}
