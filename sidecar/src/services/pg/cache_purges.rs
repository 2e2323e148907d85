//! Response-cache purges in Postgres (`fg_cache_purges`, `0015_cache.sql`): every sidecar on
//! the database, and one that restarts, sends its filters the same purges.

use ferrogate_core::config::cache::Purge;

use super::{PgStore, StoreError};
use crate::services::snapshot::MAX_PURGES;

impl PgStore {
    /// Records `purge`; a purge of everything deletes the older ones, and only the newest
    /// [`MAX_PURGES`] are kept (as the sidecar keeps them).
    ///
    /// # Errors
    /// The database is unreachable.
    pub async fn record_purge(&self, purge: &Purge) -> Result<(), StoreError> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let at = i64::try_from(purge.at_ms).unwrap_or(i64::MAX);
        tx.execute(
            "INSERT INTO fg_cache_purges (at_ms, scopes, model) VALUES ($1, $2, $3)",
            &[&at, &purge.scopes, &purge.model],
        )
        .await?;
        if purge.scopes.is_empty() && purge.model.is_none() {
            tx.execute("DELETE FROM fg_cache_purges WHERE at_ms < $1", &[&at]).await?;
        }
        let keep = i64::try_from(MAX_PURGES).unwrap_or(i64::MAX);
        tx.execute(
            "DELETE FROM fg_cache_purges WHERE id NOT IN \
             (SELECT id FROM fg_cache_purges ORDER BY at_ms DESC, id DESC LIMIT $1)",
            &[&keep],
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// The purges recorded, oldest first (at most [`MAX_PURGES`]).
    ///
    /// # Errors
    /// The database is unreachable.
    pub async fn cache_purges(&self) -> Result<Vec<Purge>, StoreError> {
        let client = self.pool.get().await?;
        let keep = i64::try_from(MAX_PURGES).unwrap_or(i64::MAX);
        let rows = client
            .query(
                "SELECT at_ms, scopes, model FROM \
                 (SELECT id, at_ms, scopes, model FROM fg_cache_purges ORDER BY at_ms DESC, id DESC LIMIT $1) newest \
                 ORDER BY at_ms, id",
                &[&keep],
            )
            .await?;
        let purge = |r: &tokio_postgres::Row| Purge {
            at_ms: u64::try_from(r.get::<_, i64>(0)).unwrap_or(0),
            scopes: r.get(1),
            model: r.get(2),
        };
        Ok(rows.iter().map(purge).collect())
    }
}
