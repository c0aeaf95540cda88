//! Retry timing: exponential backoff with jitter, and `Retry-After`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::ModelError;

/// When and how often to retry a retryable failure (429, 5xx, 408,
/// timeouts, connection errors).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RetryPolicy {
    /// Retries after the first attempt (0 = try once).
    pub max_retries: u32,
    /// Backoff before the first retry; doubles on each further retry.
    #[serde(with = "crate::config::duration_ms")]
    pub initial_backoff: Duration,
    /// Cap of the exponential backoff.
    #[serde(with = "crate::config::duration_ms")]
    pub max_backoff: Duration,
    /// Cap of a server-requested `Retry-After` wait, so a misbehaving server
    /// cannot park a run for an hour.
    #[serde(with = "crate::config::duration_ms")]
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 5,
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
            max_retry_after: Duration::from_secs(300),
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `retry` (0-based) after `error`.
    ///
    /// A `Retry-After` from the endpoint is honoured as a floor (capped at
    /// `max_retry_after`) with up to +10% jitter, so clients that were told
    /// the same time do not all return in the same millisecond. Otherwise:
    /// "equal jitter" backoff, uniform in `[d/2, d]` with
    /// `d = min(initial * 2^retry, max_backoff)`, which keeps a minimum wait
    /// while still spreading concurrent clients.
    pub fn delay(&self, retry: u32, error: &ModelError) -> Duration {
        if let ModelError::RateLimited {
            retry_after_secs: Some(secs),
            ..
        } = error
            && secs.is_finite()
            && *secs >= 0.0
        {
            let floor = Duration::from_secs_f64(*secs).min(self.max_retry_after);
            return floor + floor.mul_f64(0.1 * jitter_unit());
        }
        let exp = self
            .initial_backoff
            .saturating_mul(2u32.saturating_pow(retry.min(31)))
            .min(self.max_backoff);
        exp / 2 + (exp / 2).mul_f64(jitter_unit())
    }
}

/// `Retry-After` in seconds from response headers: `retry-after-ms` (sent by
/// OpenAI, more precise) first, then `retry-after` as (fractional) seconds.
/// The HTTP-date form is not supported; it falls back to backoff.
pub(crate) fn retry_after_secs(headers: &reqwest::header::HeaderMap) -> Option<f64> {
    let number = |name: &str| -> Option<f64> {
        headers
            .get(name)?
            .to_str()
            .ok()?
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && *v >= 0.0)
    };
    number("retry-after-ms")
        .map(|ms| ms / 1000.0)
        .or_else(|| number("retry-after"))
}

/// A number in `[0, 1)` for jitter. Derived from blake3 of a process-wide
/// counter and the pid: no RNG dependency, distinct across concurrent
/// callers and processes, and reproducible within a run's call order.
fn jitter_unit() -> f64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut hasher = blake3::Hasher::new();
    hasher.update(b"ecdysis-retry-jitter");
    hasher.update(&n.to_le_bytes());
    hasher.update(&std::process::id().to_le_bytes());
    let bytes = hasher.finalize();
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes.as_bytes()[..8]);
    // 53 random bits -> uniform double in [0, 1).
    (u64::from_le_bytes(word) >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::{HeaderMap, HeaderValue};

    fn unavailable() -> ModelError {
        ModelError::Unavailable {
            endpoint: "e".into(),
            status: 500,
            message: "m".into(),
        }
    }

    #[test]
    fn backoff_doubles_with_jitter_and_caps() {
        let policy = RetryPolicy {
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(1000),
            ..RetryPolicy::default()
        };
        for (retry, full) in [
            (0, 100),
            (1, 200),
            (2, 400),
            (3, 800),
            (4, 1000),
            (40, 1000),
        ] {
            for _ in 0..20 {
                let d = policy.delay(retry, &unavailable()).as_millis();
                assert!(d >= full / 2 && d <= full, "retry {retry}: {d}ms");
            }
        }
    }

    #[test]
    fn retry_after_is_a_capped_floor() {
        let policy = RetryPolicy {
            max_retry_after: Duration::from_secs(10),
            ..RetryPolicy::default()
        };
        let limited = |secs| ModelError::RateLimited {
            endpoint: "e".into(),
            message: "m".into(),
            retry_after_secs: Some(secs),
        };
        let d = policy.delay(0, &limited(2.0));
        assert!(d >= Duration::from_secs(2) && d <= Duration::from_millis(2200));
        let d = policy.delay(0, &limited(3600.0));
        assert!(d >= Duration::from_secs(10) && d <= Duration::from_secs(11));
    }

    #[test]
    fn parses_retry_after_headers() {
        let mut headers = HeaderMap::new();
        assert_eq!(retry_after_secs(&headers), None);
        headers.insert("retry-after", HeaderValue::from_static("3"));
        assert_eq!(retry_after_secs(&headers), Some(3.0));
        headers.insert("retry-after-ms", HeaderValue::from_static("1500"));
        assert_eq!(retry_after_secs(&headers), Some(1.5));
        let mut dated = HeaderMap::new();
        dated.insert(
            "retry-after",
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(retry_after_secs(&dated), None);
    }

    #[test]
    fn jitter_is_in_unit_interval_and_varies() {
        let samples: Vec<f64> = (0..100).map(|_| jitter_unit()).collect();
        assert!(samples.iter().all(|x| (0.0..1.0).contains(x)));
        assert!(samples.windows(2).any(|w| w[0] != w[1]));
    }
}
