//! Stored Responses API responses: what a `POST /v1/responses` with `store: true` (or no
//! `store`, OpenAI's default) produced, kept so the client can read it back.
//!
//! The filter hands each finished response to the filter-facing `POST /v1/responses` before
//! the client gets its last bytes, so a read right after the answer finds it. It forwards
//! `GET`/`DELETE /v1/responses/{id}` and `GET /v1/responses/{id}/input_items` here after
//! authenticating the virtual key, naming the key by its digest ([`api`]). Every entry belongs
//! to that owner: another key gets 404, exactly as for an id that never existed.
//!
//! Entries live in the `fg_responses` table with the Postgres store ([`crate::services::pg`]),
//! else in a bounded map in memory ([`memory`]); both keep the retention of the `responses:`
//! block ([`Responses`]): a TTL, a number of entries, and bytes per key (a key's oldest go
//! first).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use ferrogate_core::config::Responses;
use tokio::sync::watch;

use super::pg::StoreError;
use super::source::Database;

pub mod api;
pub mod build;
pub mod chain;
pub mod conversation_api;
pub mod conversations;
pub mod memory;

pub use api::router;

/// One stored response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The response id (`resp_…`).
    pub id: String,
    /// When it was stored (Unix ms).
    pub created_ms: u64,
    /// When it expires (Unix ms).
    pub expires_ms: u64,
    /// The `response` object, as JSON text.
    pub response: String,
    /// The input items that produced it, a JSON array.
    pub input_items: String,
    /// The provider that answered it without translation, which keeps it too; a chain all of
    /// one origin may be continued there natively. A translated one is `translated:<family>`
    /// (whose signatures its reasoning bears), or `""` from before families were recorded
    /// (`chain::provenance`).
    pub origin: String,
    /// Input + output tokens, as the provider billed them.
    pub tokens: u64,
    /// Its price in micro-USD (0 when its model is not priced).
    pub cost_micros: u64,
}

impl Entry {
    /// What it counts against its key's `max_bytes_per_key`.
    pub fn bytes(&self) -> u64 {
        (self.response.len() + self.input_items.len()) as u64
    }
}

/// Why the store could not answer (the filter's client gets 503).
#[derive(Debug, thiserror::Error)]
pub enum ResponsesError {
    /// The Postgres store is not connected yet.
    #[error("the database is not connected yet")]
    NotConnected,
    /// The database failed.
    #[error(transparent)]
    Db(#[from] StoreError),
}

/// Where stored responses are kept, chosen once at start.
#[derive(Debug)]
pub enum ResponseStore {
    /// The file store's: in memory, lost on restart.
    Memory(memory::MemoryStore),
    /// `fg_responses`, once the database is connected.
    Postgres(Arc<OnceLock<Database>>, Responses),
}

impl ResponseStore {
    /// Postgres when the configuration store is (`db` receives it once connected), else memory.
    pub fn choose(postgres: bool, db: &Arc<OnceLock<Database>>, retention: Responses) -> ResponseStore {
        if postgres {
            ResponseStore::Postgres(db.clone(), retention)
        } else {
            ResponseStore::Memory(memory::MemoryStore::new(retention))
        }
    }

    /// The retention in force.
    pub fn retention(&self) -> Responses {
        match self {
            ResponseStore::Memory(m) => m.retention(),
            ResponseStore::Postgres(_, r) => *r,
        }
    }

    pub(super) fn db(db: &OnceLock<Database>) -> Result<&Database, ResponsesError> {
        db.get().ok_or(ResponsesError::NotConnected)
    }

    /// Keeps `entry` for `owner` (replacing one of the same id); false when it alone is larger
    /// than a key may keep. A key over its bytes loses its oldest entries.
    ///
    /// # Errors
    /// The database is not connected or failed.
    pub async fn put(&self, owner: &str, entry: Entry) -> Result<bool, ResponsesError> {
        match self {
            ResponseStore::Memory(m) => Ok(m.put(owner, entry)),
            ResponseStore::Postgres(db, r) => Ok(Self::db(db)?.store.put_response(owner, &entry, r).await?),
        }
    }

    /// `owner`'s unexpired entry `id`.
    ///
    /// # Errors
    /// The database is not connected or failed.
    pub async fn get(&self, owner: &str, id: &str, now_ms: u64) -> Result<Option<Entry>, ResponsesError> {
        match self {
            ResponseStore::Memory(m) => Ok(m.get(owner, id, now_ms)),
            ResponseStore::Postgres(db, _) => Ok(Self::db(db)?.store.get_response(owner, id, now_ms).await?),
        }
    }

    /// Deletes `owner`'s unexpired entry `id`; false when there was none.
    ///
    /// # Errors
    /// The database is not connected or failed.
    pub async fn delete(&self, owner: &str, id: &str, now_ms: u64) -> Result<bool, ResponsesError> {
        match self {
            ResponseStore::Memory(m) => Ok(m.delete(owner, id, now_ms)),
            ResponseStore::Postgres(db, _) => Ok(Self::db(db)?.store.delete_response(owner, id, now_ms).await?),
        }
    }

    /// Drops expired entries and those beyond `max_entries` (reads never see expired ones
    /// anyway; this frees their room).
    ///
    /// # Errors
    /// The database is not connected or failed.
    pub async fn sweep(&self, now_ms: u64) -> Result<u64, ResponsesError> {
        match self {
            ResponseStore::Memory(m) => Ok(m.sweep(now_ms)),
            ResponseStore::Postgres(db, r) => Ok(Self::db(db)?.store.sweep_responses(now_ms, r.max_entries).await?),
        }
    }
}

/// Sweeps `store` every minute (or every TTL, when shorter; at least each second) until
/// `shutdown` changes.
pub fn start_sweeper(store: Arc<ResponseStore>, mut shutdown: watch::Receiver<bool>) {
    let every = Duration::from_millis(store.retention().ttl_ms.clamp(1_000, 60_000));
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = tokio::time::sleep(every) => {}
                _ = shutdown.changed() => return,
            }
            match store.sweep(super::now_ms()).await {
                Ok(0) | Err(ResponsesError::NotConnected) => {}
                Ok(n) => tracing::debug!(dropped = n, "stored responses swept"),
                Err(e) => tracing::warn!(error = %e, "stored responses not swept"),
            }
        }
    });
}

/// The retention of the `responses:` block of the file at `path` (defaults when the file
/// cannot be read: the snapshot's own validation reports that).
pub fn retention_of(path: &std::path::Path) -> Responses {
    let raw = crate::serve::config::read_raw(path).ok();
    let block = raw.as_ref().and_then(|r| r.responses.as_ref());
    ferrogate_core::config::responses::from_raw(block).unwrap_or_default()
}

#[cfg(test)]
mod chain_tests;
#[cfg(test)]
mod tests;
