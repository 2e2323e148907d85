//! Stored responses in Postgres: the `fg_responses` table (`0009_responses.sql`), one row per
//! (owner, id), with the retention of the `responses:` block. Reads and deletes ignore
//! expired rows, so expiry holds between sweeps; a key over `max_bytes_per_key` loses its
//! oldest rows in the transaction that stores a new one.

use ferrogate_core::config::Responses;

use super::{PgStore, StoreError};
use crate::services::responses::Entry;

/// A count or a time in milliseconds as a `bigint` (clamped: nothing here reaches the clamp).
fn bigint(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

const UPSERT: &str = "INSERT INTO fg_responses \
    (owner, id, created_ms, expires_ms, bytes, response, input_items, origin, tokens, cost_micros) \
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
    ON CONFLICT (owner, id) DO UPDATE SET created_ms = EXCLUDED.created_ms, expires_ms = EXCLUDED.expires_ms, \
    bytes = EXCLUDED.bytes, response = EXCLUDED.response, input_items = EXCLUDED.input_items, origin = EXCLUDED.origin, \
    tokens = EXCLUDED.tokens, cost_micros = EXCLUDED.cost_micros";

/// The owner's rows beyond its bytes, newest kept first (the running total from the newest).
const TRIM_OWNER: &str = "DELETE FROM fg_responses WHERE owner = $1 AND id IN (\
    SELECT id FROM (SELECT id, (sum(bytes) OVER (ORDER BY created_ms DESC, id DESC))::bigint AS running \
    FROM fg_responses WHERE owner = $1) AS t WHERE running > $2)";

const TRIM_ALL: &str = "DELETE FROM fg_responses WHERE (owner, id) IN (\
    SELECT owner, id FROM fg_responses ORDER BY created_ms DESC, id DESC OFFSET $1)";

impl PgStore {
    /// See [`crate::services::responses::ResponseStore::put`].
    ///
    /// # Errors
    /// The database failed.
    pub async fn put_response(&self, owner: &str, e: &Entry, retention: &Responses) -> Result<bool, StoreError> {
        let bytes = e.bytes();
        if bytes > retention.max_bytes_per_key {
            // Replaced by nothing: the old entry of that id must not answer for the new one.
            self.delete_response(owner, &e.id, 0).await?;
            return Ok(false);
        }
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let (created, expires, size) = (bigint(e.created_ms), bigint(e.expires_ms), bigint(bytes));
        let (tokens, cost) = (bigint(e.tokens), bigint(e.cost_micros));
        let row: [&(dyn tokio_postgres::types::ToSql + Sync); 10] =
            [&owner, &e.id, &created, &expires, &size, &e.response, &e.input_items, &e.origin, &tokens, &cost];
        tx.execute(UPSERT, &row).await?;
        tx.execute(TRIM_OWNER, &[&owner, &bigint(retention.max_bytes_per_key)]).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// See [`crate::services::responses::ResponseStore::get`].
    ///
    /// # Errors
    /// The database failed.
    pub async fn get_response(&self, owner: &str, id: &str, now_ms: u64) -> Result<Option<Entry>, StoreError> {
        let client = self.pool.get().await?;
        let row = client
            .query_opt(
                "SELECT created_ms, expires_ms, response, input_items, origin, tokens, cost_micros FROM fg_responses \
                 WHERE owner = $1 AND id = $2 AND expires_ms > $3",
                &[&owner, &id, &bigint(now_ms)],
            )
            .await?;
        Ok(row.map(|r| Entry {
            id: id.to_string(),
            created_ms: u64::try_from(r.get::<_, i64>(0)).unwrap_or_default(),
            expires_ms: u64::try_from(r.get::<_, i64>(1)).unwrap_or_default(),
            response: r.get(2),
            input_items: r.get(3),
            origin: r.get(4),
            tokens: u64::try_from(r.get::<_, i64>(5)).unwrap_or_default(),
            cost_micros: u64::try_from(r.get::<_, i64>(6)).unwrap_or_default(),
        }))
    }

    /// See [`crate::services::responses::ResponseStore::delete`].
    ///
    /// # Errors
    /// The database failed.
    pub async fn delete_response(&self, owner: &str, id: &str, now_ms: u64) -> Result<bool, StoreError> {
        let client = self.pool.get().await?;
        let sql = "DELETE FROM fg_responses WHERE owner = $1 AND id = $2 AND expires_ms > $3";
        Ok(client.execute(sql, &[&owner, &id, &bigint(now_ms)]).await? > 0)
    }

    /// See [`crate::services::responses::ResponseStore::sweep`].
    ///
    /// # Errors
    /// The database failed.
    pub async fn sweep_responses(&self, now_ms: u64, max_entries: u64) -> Result<u64, StoreError> {
        let client = self.pool.get().await?;
        let expired = client.execute("DELETE FROM fg_responses WHERE expires_ms <= $1", &[&bigint(now_ms)]).await?;
        let over = client.execute(TRIM_ALL, &[&bigint(max_entries)]).await?;
        Ok(expired + over)
    }
}
