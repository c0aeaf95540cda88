//! The event streams' shared poller. Episodes finish in worker processes,
//! possibly on other machines, so a stream learns of them from the
//! database; one poller reads, for every evaluation with an open stream,
//! its state and latest completion in one query, and wakes only the
//! streams whose evaluation changed. A stream reads its new events only
//! when woken, so the database work of idle streams does not grow with
//! their number, and each tenant may hold at most `[http]
//! event_streams_per_tenant` of them (per API server).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::Row;
use tokio::sync::watch;

use super::db::{Db, DbError, SqlContext};

/// How often the poller reads the watched evaluations.
pub const POLL_INTERVAL: Duration = Duration::from_millis(250);

/// Evaluations read by one query of the poller.
const IDS_PER_QUERY: usize = 200;

/// The open event streams: counts per tenant, and one change signal per
/// watched evaluation.
pub struct EventHub {
    db: Db,
    per_tenant: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    by_tenant: HashMap<i64, usize>,
    watched: HashMap<String, Watched>,
}

struct Watched {
    changes: watch::Sender<()>,
    streams: usize,
    /// The latest completion and state the poller saw.
    seen: Option<(Option<i64>, String)>,
}

/// An open stream's place in the hub, released when dropped (the client
/// went away or the stream ended).
pub struct Subscription {
    hub: Arc<EventHub>,
    tenant: i64,
    eval: String,
    changes: watch::Receiver<()>,
}

impl Subscription {
    /// Wait until the poller sees the evaluation change, or `at_most`.
    pub async fn changed(&mut self, at_most: Duration) {
        if let Ok(Err(_)) = tokio::time::timeout(at_most, self.changes.changed()).await {
            tokio::time::sleep(at_most).await;
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut state = self.hub.state.lock().expect("event hub");
        if let Some(n) = state.by_tenant.get_mut(&self.tenant) {
            *n -= 1;
            if *n == 0 {
                state.by_tenant.remove(&self.tenant);
            }
        }
        if let Some(w) = state.watched.get_mut(&self.eval) {
            w.streams -= 1;
            if w.streams == 0 {
                state.watched.remove(&self.eval);
            }
        }
    }
}

impl EventHub {
    /// A hub allowing `per_tenant` open streams per tenant.
    pub fn new(db: Db, per_tenant: usize) -> Arc<EventHub> {
        Arc::new(EventHub {
            db,
            per_tenant,
            state: Mutex::default(),
        })
    }

    /// Open a stream of `tenant` on evaluation `eval`, or the limit that
    /// refuses it. Subscribe before the stream's first read, so no change
    /// after that read goes unsignalled.
    pub fn subscribe(self: &Arc<Self>, tenant: i64, eval: &str) -> Result<Subscription, usize> {
        let mut state = self.state.lock().expect("event hub");
        let open = state.by_tenant.get(&tenant).copied().unwrap_or(0);
        if open >= self.per_tenant {
            return Err(self.per_tenant);
        }
        state.by_tenant.insert(tenant, open + 1);
        let w = state
            .watched
            .entry(eval.to_string())
            .or_insert_with(|| Watched {
                changes: watch::channel(()).0,
                streams: 0,
                seen: None,
            });
        w.streams += 1;
        let changes = w.changes.subscribe();
        Ok(Subscription {
            hub: self.clone(),
            tenant,
            eval: eval.to_string(),
            changes,
        })
    }

    /// Read every watched evaluation once; wake the streams of those that
    /// changed.
    pub async fn poll(&self) -> Result<(), DbError> {
        let ids: Vec<String> = {
            let state = self.state.lock().expect("event hub");
            state.watched.keys().cloned().collect()
        };
        for chunk in ids.chunks(IDS_PER_QUERY) {
            let placeholders: Vec<String> = (1..=chunk.len()).map(|i| format!("${i}")).collect();
            let sql = format!(
                "SELECT e.id, e.state, (SELECT MAX(done_seq) FROM episodes WHERE eval_id = e.id)
                 FROM evaluations e WHERE e.id IN ({})",
                placeholders.join(", ")
            );
            let mut query = sqlx::query(&sql);
            for id in chunk {
                query = query.bind(id.as_str());
            }
            let rows = query.fetch_all(self.db.pool()).await.ctx("event streams")?;
            let mut state = self.state.lock().expect("event hub");
            for row in rows {
                let id: String = row.try_get(0).ctx("event streams")?;
                let now = (
                    row.try_get::<Option<i64>, _>(2).ctx("event streams")?,
                    row.try_get::<String, _>(1).ctx("event streams")?,
                );
                if let Some(w) = state.watched.get_mut(&id)
                    && w.seen.as_ref() != Some(&now)
                {
                    w.seen = Some(now);
                    w.changes.send_replace(());
                }
            }
        }
        Ok(())
    }

    /// Poll every [`POLL_INTERVAL`] until `stop`.
    pub async fn run(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        loop {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => return,
                _ = tokio::time::sleep(POLL_INTERVAL) => {}
            }
            if let Err(e) = self.poll().await {
                tracing::warn!("{e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn streams_are_capped_per_tenant_and_woken_only_by_a_change() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&format!("sqlite:{}", dir.path().join("e.db").display()))
            .await
            .unwrap();
        let mut w = db.write().await.unwrap();
        for statement in [
            "INSERT INTO tenants (id, name, token_hash, quotas, created_ms) VALUES (7, 't', 'h', '{}', 0)",
            "INSERT INTO evaluations (id, tenant_id, request, job, config, state, total, created_ms)
             VALUES ('e1', 7, '{}', '{}', '{}', 'running', 1, 0)",
            "INSERT INTO episodes (eval_id, tenant_id, idx, task_id, trial, state, attempt)
             VALUES ('e1', 7, 0, '0', 0, 'queued', 0)",
        ] {
            sqlx::query(statement).execute(w.conn()).await.unwrap();
        }
        w.commit().await.unwrap();

        let hub = EventHub::new(db.clone(), 2);
        let mut first = hub.subscribe(7, "e1").unwrap();
        let second = hub.subscribe(7, "e1").unwrap();
        assert_eq!(hub.subscribe(7, "e1").err(), Some(2));
        drop(hub.subscribe(8, "e1").unwrap());

        // The first read wakes (a change may have come before it), then
        // nothing until the evaluation changes.
        hub.poll().await.unwrap();
        assert!(first.changes.has_changed().unwrap());
        first.changes.borrow_and_update();
        hub.poll().await.unwrap();
        assert!(!first.changes.has_changed().unwrap());
        sqlx::query("UPDATE episodes SET state = 'done', done_seq = 1 WHERE eval_id = 'e1'")
            .execute(db.pool())
            .await
            .unwrap();
        hub.poll().await.unwrap();
        assert!(first.changes.has_changed().unwrap());

        drop(second);
        let third = hub.subscribe(7, "e1").unwrap();
        drop((first, third));
        let state = hub.state.lock().unwrap();
        assert!(state.watched.is_empty() && state.by_tenant.is_empty());
    }
}
