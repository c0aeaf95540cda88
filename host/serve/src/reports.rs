//! Rendered reports, kept by the evaluation's content version.
//!
//! A report of a large evaluation is megabytes of HTML built from every
//! episode, so `/report` renders it once per version of the evaluation
//! ([`ReportVersion`]: what changes whenever an episode finishes or the
//! evaluation ends) and answers later requests from memory. Requests for a
//! version being rendered wait for that one render instead of starting
//! their own. The cache holds at most `[http] report_cache_bytes` of HTML,
//! dropping the least recently used reports first; a report larger than
//! the whole bound is answered but not kept.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use tokio::sync::OnceCell;

/// What a report is a function of: the evaluation's state, how many of its
/// episodes have finished, the last completion's sequence number and when
/// the evaluation ended. Any finished episode or state change makes a new
/// version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportVersion {
    /// `running`, `done` or `cancelled`.
    pub state: String,
    /// Finished episodes (`evaluations.done_count`).
    pub done: i64,
    /// The latest completion's `done_seq`.
    pub last_seq: Option<i64>,
    /// When the evaluation ended.
    pub finished_ms: Option<i64>,
}

/// Whether a report was rendered for this request or taken from the cache
/// (including waiting for another request's render).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Served {
    /// Rendered for this request.
    Rendered,
    /// Rendered before, or by a concurrent request for the same version.
    Cached,
}

impl Served {
    /// The `x-report-cache` header's value.
    pub fn header(self) -> &'static str {
        match self {
            Served::Rendered => "miss",
            Served::Cached => "hit",
        }
    }
}

struct Slot {
    version: ReportVersion,
    html: Arc<OnceCell<Bytes>>,
    /// Bytes counted against the bound (0 until rendered and kept).
    size: usize,
    used: u64,
}

#[derive(Default)]
struct Slots {
    by_eval: HashMap<String, Slot>,
    bytes: usize,
    clock: u64,
}

/// The cache of rendered reports: one slot per evaluation, for its latest
/// version asked for.
pub struct ReportCache {
    max_bytes: usize,
    slots: Mutex<Slots>,
    renders: AtomicU64,
}

impl ReportCache {
    /// A cache holding at most `max_bytes` of HTML.
    pub fn new(max_bytes: usize) -> ReportCache {
        ReportCache {
            max_bytes,
            slots: Mutex::new(Slots::default()),
            renders: AtomicU64::new(0),
        }
    }

    /// Renders started since the cache was made.
    pub fn renders(&self) -> u64 {
        self.renders.load(Ordering::Relaxed)
    }

    /// Bytes of HTML held.
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The report of `eval` at `version`: from the cache, from a render of
    /// the same version under way, or from `render`.
    pub async fn get_or_render<E, F, Fut>(
        &self,
        eval: &str,
        version: ReportVersion,
        render: F,
    ) -> Result<(Bytes, Served), E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<String, E>>,
    {
        let cell = {
            let mut s = self.lock();
            s.clock += 1;
            let now = s.clock;
            match s.by_eval.get_mut(eval) {
                Some(slot) if slot.version == version => {
                    slot.used = now;
                    slot.html.clone()
                }
                _ => {
                    let cell = Arc::new(OnceCell::new());
                    let old = s.by_eval.insert(
                        eval.to_string(),
                        Slot {
                            version,
                            html: cell.clone(),
                            size: 0,
                            used: now,
                        },
                    );
                    if let Some(old) = old {
                        s.bytes -= old.size;
                    }
                    cell
                }
            }
        };
        let mut rendered = false;
        let html = cell
            .get_or_try_init(|| {
                rendered = true;
                self.renders.fetch_add(1, Ordering::Relaxed);
                async move { render().await.map(Bytes::from) }
            })
            .await?
            .clone();
        if rendered {
            self.keep(eval, &cell, html.len());
        }
        let served = if rendered {
            Served::Rendered
        } else {
            Served::Cached
        };
        Ok((html, served))
    }

    /// Count a finished render against the bound, dropping the least
    /// recently used other reports until the cache fits.
    fn keep(&self, eval: &str, cell: &Arc<OnceCell<Bytes>>, size: usize) {
        let mut s = self.lock();
        let Some(slot) = s.by_eval.get_mut(eval) else {
            return;
        };
        // A newer version may have replaced the slot while this rendered.
        if !Arc::ptr_eq(&slot.html, cell) || slot.size != 0 {
            return;
        }
        if size > self.max_bytes {
            s.by_eval.remove(eval);
            return;
        }
        slot.size = size;
        s.bytes += size;
        while s.bytes > self.max_bytes {
            let victim = s
                .by_eval
                .iter()
                .filter(|(k, v)| v.size > 0 && k.as_str() != eval)
                .min_by_key(|(_, v)| v.used)
                .map(|(k, _)| k.clone());
            let Some(gone) = victim.and_then(|k| s.by_eval.remove(&k)) else {
                break;
            };
            s.bytes -= gone.size;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(done: i64) -> ReportVersion {
        ReportVersion {
            state: "running".into(),
            done,
            last_seq: Some(done),
            finished_ms: None,
        }
    }

    async fn get(cache: &ReportCache, eval: &str, v: i64, html: &str) -> (Bytes, Served) {
        let html = html.to_string();
        cache
            .get_or_render(eval, version(v), || async move { Ok::<_, ()>(html) })
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_second_request_is_served_from_the_cache_until_the_version_changes() {
        let cache = ReportCache::new(1 << 20);
        assert_eq!(get(&cache, "e1", 1, "a").await.1, Served::Rendered);
        let (html, served) = get(&cache, "e1", 1, "other").await;
        assert_eq!((&html[..], served), (&b"a"[..], Served::Cached));
        assert_eq!(cache.renders(), 1);
        let (html, served) = get(&cache, "e1", 2, "b").await;
        assert_eq!((&html[..], served), (&b"b"[..], Served::Rendered));
        assert_eq!((cache.renders(), cache.bytes()), (2, 1));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_requests_for_one_version_share_one_render() {
        let cache = Arc::new(ReportCache::new(1 << 20));
        let gate = Arc::new(tokio::sync::Barrier::new(16));
        let tasks: Vec<_> = (0..16)
            .map(|_| {
                let (cache, gate) = (cache.clone(), gate.clone());
                tokio::spawn(async move {
                    gate.wait().await;
                    cache
                        .get_or_render("e1", version(1), || async {
                            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                            Ok::<_, ()>("x".repeat(100))
                        })
                        .await
                        .unwrap()
                        .1
                })
            })
            .collect();
        let mut rendered = 0;
        for t in tasks {
            if t.await.unwrap() == Served::Rendered {
                rendered += 1;
            }
        }
        assert_eq!((rendered, cache.renders()), (1, 1));
    }

    #[tokio::test]
    async fn the_cache_stays_within_its_bytes_dropping_the_least_recently_used() {
        let cache = ReportCache::new(250);
        get(&cache, "e1", 1, &"1".repeat(100)).await;
        get(&cache, "e2", 1, &"2".repeat(100)).await;
        get(&cache, "e1", 1, "").await;
        get(&cache, "e3", 1, &"3".repeat(100)).await;
        assert_eq!(cache.bytes(), 200);
        assert_eq!(get(&cache, "e1", 1, "").await.1, Served::Cached);
        assert_eq!(
            get(&cache, "e2", 1, &"2".repeat(100)).await.1,
            Served::Rendered
        );
        // Larger than the whole bound: answered, not kept.
        let (html, _) = get(&cache, "big", 1, &"b".repeat(300)).await;
        assert_eq!(html.len(), 300);
        assert!(cache.bytes() <= 250, "{}", cache.bytes());
        assert_eq!(get(&cache, "big", 1, "small").await.1, Served::Rendered);
    }

    #[tokio::test]
    async fn a_failed_render_is_not_kept() {
        let cache = ReportCache::new(1 << 20);
        let failed = cache
            .get_or_render("e1", version(1), || async { Err::<String, _>("broken") })
            .await;
        assert!(failed.is_err());
        assert_eq!(get(&cache, "e1", 1, "ok").await.1, Served::Rendered);
    }
}
