//! Snapshot publication: the configuration the filters serve, built once per change.
//!
//! A store hands in a [`RawConfig`]; [`Snapshots::publish`] prunes unservable rows
//! ([`ferrogate_core::snapshot::build`]), serializes the snapshot once, and makes it the
//! answer of `GET /v1/snapshot` (with `ETag`; `If-None-Match` → 304). A build that fails
//! keeps the last good snapshot and records why (`/api/v1/config/problems`).
//!
//! Last known good: with a cache file, every published snapshot is written to it (atomically),
//! and a sidecar whose store is unreachable at start serves the cached one until the store
//! answers.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use ferrogate_core::config::{Config, ConfigError, RawConfig};
use ferrogate_core::snapshot::{self, Snapshot, SnapshotError, WireProblem};
use serde::Serialize;
use tokio::sync::watch;

/// One published snapshot.
#[derive(Debug)]
pub struct Served {
    /// Its version (the ETag without quotes).
    pub version: String,
    /// The serialized [`Snapshot`], sent as is.
    pub body: Bytes,
    /// The validated configuration (for the sidecar's own use: clusters, admin).
    pub config: Config,
    /// The rows that were dropped to build it.
    pub problems: Vec<WireProblem>,
}

/// What `/api/v1/config/problems` shows.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ProblemReport {
    /// Version being served, if any.
    pub version: Option<String>,
    /// Rows dropped from the served snapshot.
    pub dropped: Vec<WireProblem>,
    /// Why the latest build failed (empty when the latest build is the one served).
    pub rejected: Vec<WireProblem>,
}

/// Why a cached snapshot could not be restored.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// The file cannot be read.
    #[error("snapshot cache: {0}")]
    Io(#[from] std::io::Error),
    /// The file does not hold a servable snapshot.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
}

/// The current snapshot and the last build failure.
#[derive(Debug)]
pub struct Snapshots {
    current: watch::Sender<Option<Arc<Served>>>,
    rejected: Mutex<Vec<WireProblem>>,
    cache: Option<PathBuf>,
}

impl Snapshots {
    /// No snapshot yet; published ones are also written to `cache` when given.
    pub fn new(cache: Option<PathBuf>) -> Snapshots {
        Snapshots { current: watch::channel(None).0, rejected: Mutex::new(Vec::new()), cache }
    }

    /// The snapshot being served.
    pub fn current(&self) -> Option<Arc<Served>> {
        self.current.borrow().clone()
    }

    /// Notified on every publication.
    pub fn subscribe(&self) -> watch::Receiver<Option<Arc<Served>>> {
        self.current.subscribe()
    }

    /// Builds and serves `raw`; on failure the previous snapshot stays.
    ///
    /// # Errors
    /// The problems that fail the whole build (they are also kept for the problems report).
    pub fn publish(&self, raw: RawConfig) -> Result<Arc<Served>, ConfigError> {
        let built = match snapshot::build(raw) {
            Ok(built) => built,
            Err(e) => {
                *self.lock_rejected() = e.problems.iter().map(WireProblem::from).collect();
                return Err(e);
            }
        };
        let config_json = serde_json::to_vec(&built.raw).unwrap_or_default();
        let problems: Vec<WireProblem> = built.problems.iter().map(WireProblem::from).collect();
        let doc = Snapshot { version: snapshot::content_version(&config_json), config: built.raw, problems };
        let body = Bytes::from(serde_json::to_vec(&doc).unwrap_or_default());
        let served = Arc::new(Served { version: doc.version, body, config: built.config, problems: doc.problems });
        self.lock_rejected().clear();
        self.persist(&served.body);
        self.replace(served.clone());
        Ok(served)
    }

    /// Records a store failure (unreadable file, syntax error) without touching the snapshot.
    pub fn reject(&self, path: &str, message: String) {
        *self.lock_rejected() = vec![WireProblem { path: path.to_string(), message }];
    }

    /// Serves the cached snapshot (the store is unreachable at start).
    ///
    /// # Errors
    /// No cache configured is `Ok(false)`; an unreadable or invalid cache is an error.
    pub fn restore_cached(&self) -> Result<bool, CacheError> {
        let Some(path) = &self.cache else { return Ok(false) };
        let body = std::fs::read(path)?;
        let (doc, config) = Snapshot::parse(&body)?;
        let served = Arc::new(Served { version: doc.version, body: Bytes::from(body), config, problems: doc.problems });
        self.replace(served);
        Ok(true)
    }

    /// What was dropped from the served snapshot and why the latest build failed.
    pub fn report(&self) -> ProblemReport {
        let current = self.current();
        ProblemReport {
            version: current.as_ref().map(|s| s.version.clone()),
            dropped: current.map(|s| s.problems.clone()).unwrap_or_default(),
            rejected: self.lock_rejected().clone(),
        }
    }

    fn replace(&self, served: Arc<Served>) {
        let changed = self.current().is_none_or(|old| old.version != served.version);
        if changed {
            tracing::info!(version = %served.version, dropped = served.problems.len(), "configuration snapshot published");
            for p in &served.problems {
                tracing::warn!(path = %p.path, "{}", p.message);
            }
        }
        self.current.send_replace(Some(served));
    }

    fn persist(&self, body: &[u8]) {
        let Some(path) = &self.cache else { return };
        // Write then rename: a crash mid-write never leaves a torn cache behind.
        let tmp = path.with_extension("tmp");
        if let Err(e) = std::fs::write(&tmp, body).and_then(|()| std::fs::rename(&tmp, path)) {
            tracing::warn!(error = %e, path = %path.display(), "cannot write the snapshot cache");
        }
    }

    fn lock_rejected(&self) -> std::sync::MutexGuard<'_, Vec<WireProblem>> {
        self.rejected.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests;
