//! [`UsageBackend`]: where usage goes, chosen once at start from the configuration store, so
//! the filter-facing API and the admin API do not care which it is; and the request log that
//! every stored record is written to when `--request-log` is given.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;

use super::request_log::RequestLog;
use super::requests::{Page, RequestFilter};
use super::{record_lines, split_lines, AddError, Added, Answer, Query, QueryError, UsageStore};
use crate::services::pg::usage::UsageRow;
use crate::services::source::Database;

/// The usage store of a running sidecar, and its request log.
#[derive(Debug)]
pub struct UsageBackend {
    store: Store,
    log: Option<RequestLog>,
}

/// Where the records are kept.
#[derive(Debug)]
enum Store {
    /// The file store's: memory, plus the JSON lines file when one is configured.
    Memory(UsageStore),
    /// The `postgres` store's `fg_usage` table, once the database is connected (until then
    /// batches are refused with 503 and the filters keep them).
    Postgres(Arc<OnceLock<Database>>),
}

impl UsageBackend {
    /// Records kept by `store` (memory, and its file).
    pub fn memory(store: UsageStore) -> UsageBackend {
        UsageBackend { store: Store::Memory(store), log: None }
    }

    /// Records kept in `fg_usage`, once `db` holds the database.
    pub fn postgres(db: Arc<OnceLock<Database>>) -> UsageBackend {
        UsageBackend { store: Store::Postgres(db), log: None }
    }

    /// The same, also writing every record it stores to `log`.
    pub fn with_request_log(self, log: RequestLog) -> UsageBackend {
        UsageBackend { log: Some(log), ..self }
    }

    /// Postgres when the configuration store is (`db` receives the database once connected),
    /// else memory with `file` read back and appended to. With Postgres the file is not used.
    /// With `request_log` (a path, or `-` for stdout) every stored record is also written there.
    ///
    /// # Errors
    /// The request log file cannot be opened for appending (the message names the flag).
    pub fn choose(
        postgres: bool,
        db: &Arc<OnceLock<Database>>,
        file: Option<PathBuf>,
        request_log: Option<&Path>,
    ) -> std::io::Result<UsageBackend> {
        let backend = if postgres {
            if let Some(file) = file {
                tracing::warn!(file = %file.display(), "usage goes to the fg_usage table; the usage file is not written");
            }
            UsageBackend::postgres(db.clone())
        } else {
            UsageBackend::memory(UsageStore::open(file))
        };
        Ok(match request_log {
            Some(path) => backend.with_request_log(RequestLog::open(path)?),
            None => backend,
        })
    }

    /// Stores a batch of JSON lines (blank lines ignored), all or nothing: the caller may
    /// acknowledge it once this returns `Ok`. The records stored then go to the request log
    /// (with Postgres, only those not stored before).
    ///
    /// # Errors
    /// [`AddError::BadLine`] when a line is not a usage record (the sender's fault); the
    /// others when the store cannot take it now (worth a retry).
    pub async fn add(&self, batch: Bytes) -> Result<Added, AddError> {
        match &self.store {
            Store::Memory(store) => {
                let lines = record_lines(&batch)?;
                let added = store.add_lines(&lines)?;
                self.log(lines);
                Ok(added)
            }
            Store::Postgres(db) => self.add_postgres(db, &batch).await,
        }
    }

    async fn add_postgres(&self, db: &OnceLock<Database>, batch: &Bytes) -> Result<Added, AddError> {
        let (lines, rows): (Vec<Bytes>, Vec<UsageRow>) = parse(batch)?.into_iter().unzip();
        if rows.is_empty() {
            return Ok(Added::default());
        }
        let db = db.get().ok_or(AddError::NotConnected)?;
        let mut new = db.store.insert_usage_new(&rows).await?;
        let stored = new.len();
        if self.log.is_some() {
            // A line repeated within the batch was stored once: logged at its first place.
            let fresh = lines.into_iter().zip(&rows).filter(|(_, row)| new.remove(&row.digest));
            self.log(fresh.map(|(line, _)| line).collect());
        }
        Ok(Added { stored, duplicates: rows.len().saturating_sub(stored) })
    }

    fn log(&self, lines: Vec<Bytes>) {
        if let Some(log) = &self.log {
            log.write(lines);
        }
    }

    /// Answers a usage query.
    ///
    /// # Errors
    /// The database is not connected or fails (the memory store always answers).
    pub async fn query(&self, q: &Query) -> Result<Answer, QueryError> {
        match &self.store {
            Store::Memory(store) => Ok(store.query(q)),
            Store::Postgres(db) => {
                let db = db.get().ok_or(QueryError::NotConnected)?;
                Ok(db.store.query_usage(q).await?)
            }
        }
    }

    /// One page of the request log.
    ///
    /// # Errors
    /// The database is not connected or fails (the memory store always answers).
    pub async fn requests(&self, f: &RequestFilter) -> Result<Page, QueryError> {
        let hits = match &self.store {
            Store::Memory(store) => store.requests(f),
            Store::Postgres(db) => {
                let db = db.get().ok_or(QueryError::NotConnected)?;
                db.store.query_requests(f).await?
            }
        };
        Ok(Page::of(hits, f.limit))
    }

    /// The request log's metric (`ferrogate_request_log_dropped_total`), when there is a log.
    pub fn prometheus(&self, out: &mut String) {
        if let Some(log) = &self.log {
            log.prometheus(out);
        }
    }
}

/// Every line of the batch (a slice of it) with its typed record; the first that is not one
/// refuses the batch.
fn parse(batch: &Bytes) -> Result<Vec<(Bytes, UsageRow)>, AddError> {
    split_lines(batch)?
        .into_iter()
        .map(|(line, text)| UsageRow::parse(&text).map(|row| (text, row)).map_err(|_| AddError::BadLine { line }))
        .collect()
}
