//! [`UsageBackend`]: where usage goes, chosen once at start from the configuration store, so
//! the filter-facing API and the admin API do not care which it is.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;

use super::{split_lines, AddError, Added, Answer, Query, QueryError, UsageStore};
use crate::services::pg::usage::UsageRow;
use crate::services::source::Database;

/// The usage store of a running sidecar.
#[derive(Debug)]
pub enum UsageBackend {
    /// The file store's: memory, plus the JSON lines file when one is configured.
    Memory(UsageStore),
    /// The `postgres` store's `fg_usage` table, once the database is connected (until then
    /// batches are refused with 503 and the filters keep them).
    Postgres(Arc<OnceLock<Database>>),
}

impl UsageBackend {
    /// Postgres when the configuration store is (`db` receives the database once connected),
    /// else memory with `file` read back and appended to. With Postgres the file is not used.
    pub fn choose(postgres: bool, db: &Arc<OnceLock<Database>>, file: Option<PathBuf>) -> UsageBackend {
        if !postgres {
            return UsageBackend::Memory(UsageStore::open(file));
        }
        if let Some(file) = file {
            tracing::warn!(file = %file.display(), "usage goes to the fg_usage table; the usage file is not written");
        }
        UsageBackend::Postgres(db.clone())
    }

    /// Stores a batch of JSON lines (blank lines ignored), all or nothing: the caller may
    /// acknowledge it once this returns `Ok`.
    ///
    /// # Errors
    /// [`AddError::BadLine`] when a line is not a usage record (the sender's fault); the
    /// others when the store cannot take it now (worth a retry).
    pub async fn add(&self, batch: Bytes) -> Result<Added, AddError> {
        match self {
            UsageBackend::Memory(store) => store.add(batch),
            UsageBackend::Postgres(db) => {
                let rows = parse(&batch)?;
                if rows.is_empty() {
                    return Ok(Added::default());
                }
                let db = db.get().ok_or(AddError::NotConnected)?;
                let stored = usize::try_from(db.store.insert_usage(&rows).await?).unwrap_or(rows.len());
                Ok(Added { stored, duplicates: rows.len().saturating_sub(stored) })
            }
        }
    }

    /// Answers a usage query.
    ///
    /// # Errors
    /// The database is not connected or fails (the memory store always answers).
    pub async fn query(&self, q: &Query) -> Result<Answer, QueryError> {
        match self {
            UsageBackend::Memory(store) => Ok(store.query(q)),
            UsageBackend::Postgres(db) => {
                let db = db.get().ok_or(QueryError::NotConnected)?;
                Ok(db.store.query_usage(q).await?)
            }
        }
    }
}

/// Every line of the batch as a typed record; the first that is not one refuses the batch.
fn parse(batch: &Bytes) -> Result<Vec<UsageRow>, AddError> {
    split_lines(batch)?
        .into_iter()
        .map(|(line, text)| UsageRow::parse(&text).map_err(|_| AddError::BadLine { line }))
        .collect()
}
