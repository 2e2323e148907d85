//! The request log in Postgres: `GET /api/v1/requests` pages over `fg_usage` newest first by
//! (`started_at`, `id`), with the filters and the keyset cursor of [`RequestFilter`] (the
//! memory store answers the same, see `services::usage::requests`).
//!
//! A page is one statement: the filters that are set, `(started_at, id) < (cursor)` after a
//! cursor, and `LIMIT limit + 1` (the extra row only says whether another page follows). The
//! `(started_at DESC, id DESC)` indexes serve the order and the cursor, with a key or model
//! filter too; `request_id` has an index of its own (migration 8).

use ferrogate_core::usage::Record;

use super::usage::{record_of, time_of, to_u64, Filter, COLUMNS};
use super::{PgStore, StoreError};
use crate::services::usage::requests::{Cursor, RequestFilter};

impl PgStore {
    /// The newest records matching `f` after its cursor, up to `f.limit + 1`, each with its
    /// position (start, `id`).
    ///
    /// # Errors
    /// The database is unreachable.
    pub async fn query_requests(&self, f: &RequestFilter) -> Result<Vec<(Cursor, Record)>, StoreError> {
        let filter = where_of(f);
        let sql = format!(
            "SELECT {COLUMNS}, id FROM fg_usage{} ORDER BY started_at DESC, id DESC LIMIT {}",
            filter.sql,
            f.limit.saturating_add(1)
        );
        let client = self.pool.get().await?;
        let rows = client.query(&sql, &filter.params()).await?;
        let mut hits = Vec::with_capacity(rows.len());
        for row in &rows {
            let record = record_of(row)?;
            let id: i64 = row.try_get("id")?;
            hits.push((Cursor { started_ms: record.started_at_unix_ms, id: to_u64(id) }, record));
        }
        Ok(hits)
    }
}

/// The `WHERE` clause of `f`: only the filters it sets.
fn where_of(f: &RequestFilter) -> Filter {
    let mut w = Filter::default();
    let text = [
        ("request_id =", &f.request_id),
        ("key =", &f.key),
        ("model_requested =", &f.model),
        ("provider =", &f.provider),
    ];
    for (condition, value) in text {
        if let Some(v) = value {
            w.push(condition, Box::new(v.clone()));
        }
    }
    if let Some(status) = f.status {
        w.push("status =", Box::new(i32::from(status)));
    }
    if let Some((low, high)) = f.status_class {
        w.push("status >=", Box::new(i32::from(low)));
        w.push("status <", Box::new(i32::from(high)));
    }
    if let Some(since) = f.since {
        w.push("started_at >=", Box::new(time_of(since)));
    }
    if let Some(until) = f.until {
        w.push("started_at <", Box::new(time_of(until)));
    }
    for (condition, value) in [("streamed =", f.streamed), ("partial =", f.partial)] {
        if let Some(v) = value {
            w.push(condition, Box::new(v));
        }
    }
    if let Some(c) = f.after {
        w.push_before(c.started_ms, c.id);
    }
    w
}

#[cfg(test)]
mod tests;
