//! Incidents of this sidecar's stores: Redis (the shared limit counters) or PostgreSQL (the
//! configuration and usage database) lost and regained. They join the analytics events feed
//! (`store_down`, `store_up`) from the `fg_events` table, so a dashboard shows when limits ran
//! on local counts or records waited for the database.
//!
//! [`record`] queues an incident in memory (bounded: the oldest go first); the writer started by
//! [`start`] stores the queue in `fg_events` once the database is connected, and notes its own
//! outages: the first failed write or health check queues `store_down` for `postgres` with the
//! moment it began, the first success after it `store_up`, both stored once the database is back.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use tokio::sync::watch;

use super::now_ms;
use super::source::Database;

/// Incidents waiting for the database; more are dropped oldest first (an outage that long has
/// said what it had to say).
const MAX_PENDING: usize = 1000;
/// How often the queue is written, and the database checked when it is empty.
const WRITE_EVERY: Duration = Duration::from_secs(1);
const CHECK_EVERY_TICKS: u32 = 5;

/// A store lost (`store_down`) or regained (`store_up`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incident {
    /// When it happened, Unix ms.
    pub at_ms: u64,
    /// `store_down` or `store_up`.
    pub kind: &'static str,
    /// `redis` or `postgres`.
    pub store: &'static str,
    /// What failed (the error text), or how long the outage lasted.
    pub detail: String,
}

/// A bounded queue of incidents; the process has one ([`journal`]), tests their own.
#[derive(Debug, Default)]
pub struct Journal(Mutex<VecDeque<Incident>>);

impl Journal {
    fn push(&self, incident: Incident) {
        let mut q = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if q.len() >= MAX_PENDING {
            q.pop_front();
        }
        q.push_back(incident);
    }

    fn take_all(&self) -> Vec<Incident> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).drain(..).collect()
    }

    /// Puts back what could not be written, ahead of anything queued since.
    fn put_back(&self, mut unwritten: Vec<Incident>) {
        let mut q = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        unwritten.extend(q.drain(..));
        let excess = unwritten.len().saturating_sub(MAX_PENDING);
        q.extend(unwritten.into_iter().skip(excess));
    }
}

/// The process's journal.
fn journal() -> &'static Journal {
    static JOURNAL: OnceLock<Journal> = OnceLock::new();
    JOURNAL.get_or_init(Journal::default)
}

/// Queues an incident for `fg_events` (cheap without a database: the queue is bounded and only
/// transitions are recorded).
pub fn record(kind: &'static str, store: &'static str, detail: impl Into<String>) {
    journal().push(Incident { at_ms: now_ms(), kind, store, detail: detail.into() });
}

/// Starts the writer: every second, once `db` is connected, the queue goes to `fg_events`
/// with this sidecar's `replica` id; until `shutdown`.
pub fn start(db: Arc<OnceLock<Database>>, replica: String, mut shutdown: watch::Receiver<bool>) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(WRITE_EVERY);
        let mut down_since: Option<u64> = None;
        let mut ticks = 0u32;
        loop {
            tokio::select! {
                _ = shutdown.changed() => return,
                _ = tick.tick() => {}
            }
            let Some(db) = db.get() else { continue };
            ticks = ticks.wrapping_add(1);
            let batch = journal().take_all();
            if batch.is_empty() && !ticks.is_multiple_of(CHECK_EVERY_TICKS) && down_since.is_none() {
                continue;
            }
            let result = write(db.store.pool(), &replica, &batch).await;
            track(journal(), &mut down_since, result, batch);
        }
    });
}

/// Notes the database's own outage from a write's outcome.
fn track(journal: &Journal, down_since: &mut Option<u64>, result: Result<(), String>, batch: Vec<Incident>) {
    match (result, *down_since) {
        (Ok(()), Some(since)) => {
            *down_since = None;
            let secs = now_ms().saturating_sub(since) / 1000;
            let detail = format!("reachable again after {secs} s");
            journal.push(Incident { at_ms: now_ms(), kind: "store_up", store: "postgres", detail });
        }
        (Ok(()), None) => {}
        (Err(e), since) => {
            journal.put_back(batch);
            if since.is_none() {
                let at_ms = now_ms();
                *down_since = Some(at_ms);
                journal.push(Incident { at_ms, kind: "store_down", store: "postgres", detail: e });
            }
        }
    }
}

/// Inserts `batch` in one transaction (nothing stored twice on a retry), or checks the
/// connection when it is empty.
async fn write(pool: &deadpool_postgres::Pool, replica: &str, batch: &[Incident]) -> Result<(), String> {
    let mut client = pool.get().await.map_err(|e| e.to_string())?;
    if batch.is_empty() {
        return client.simple_query("SELECT 1").await.map(|_| ()).map_err(|e| e.to_string());
    }
    let tx = client.transaction().await.map_err(|e| e.to_string())?;
    let insert = "INSERT INTO fg_events (at, kind, store, replica, detail) \
                  VALUES (to_timestamp($1::float8 / 1000), $2, $3, $4, $5)";
    for i in batch {
        #[allow(clippy::cast_precision_loss)] // ms since 1970 fit a double's 53 bits exactly
        let at = i.at_ms as f64;
        tx.execute(insert, &[&at, &i.kind, &i.store, &replica, &i.detail]).await.map_err(|e| e.to_string())?;
    }
    tx.commit().await.map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_write_keeps_the_batch_and_notes_one_outage() {
        let j = Journal::default();
        let mut since = None;
        let lost = Incident { at_ms: 1, kind: "store_down", store: "redis", detail: "x".into() };
        track(&j, &mut since, Err("refused".into()), vec![lost.clone()]);
        let retry = j.take_all();
        track(&j, &mut since, Err("refused".into()), retry);
        let queued = j.take_all();
        assert_eq!(queued.len(), 2, "the batch back, and one store_down for postgres: {queued:?}");
        assert_eq!(queued[0], lost);
        assert_eq!((queued[1].kind, queued[1].store, queued[1].detail.as_str()), ("store_down", "postgres", "refused"));
        track(&j, &mut since, Ok(()), Vec::new());
        let back = j.take_all();
        assert_eq!((back.len(), back[0].kind, back[0].store), (1, "store_up", "postgres"));
        assert!(since.is_none());
    }

    #[test]
    fn the_queue_is_bounded_oldest_first() {
        let j = Journal::default();
        for n in 0..(MAX_PENDING as u64 + 5) {
            j.push(Incident { at_ms: n, kind: "store_down", store: "redis", detail: String::new() });
        }
        j.put_back(vec![Incident { at_ms: 0, kind: "store_up", store: "redis", detail: String::new() }]);
        let q = j.take_all();
        assert_eq!((q.len(), q[0].at_ms, q[1].at_ms), (MAX_PENDING, 5, 6), "the oldest dropped first");
    }
}
