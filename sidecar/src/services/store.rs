//! The `file` store: the YAML (or JSON) configuration file is the source of truth.
//!
//! The file is read at start and then checked every `interval` (size, modification time and
//! content): an edit is published as a new snapshot within one interval, without a restart. An
//! edit that cannot be used (unreadable, not YAML, a problem outside single rows) keeps the
//! last good snapshot and is reported, in the log and in `/api/v1/config/problems`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;

use super::snapshot::Snapshots;
use crate::serve::config::{read_raw, LoadError};

/// Default time between checks of the file.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);

/// A configuration file watched for edits.
#[derive(Debug, Clone)]
pub struct FileStore {
    path: PathBuf,
    interval: Duration,
}

/// What the file looked like when last read.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
    text: Vec<u8>,
}

impl FileStore {
    /// A store for `path`, checked every `interval`.
    pub fn new(path: &Path, interval: Duration) -> FileStore {
        FileStore { path: path.to_path_buf(), interval }
    }

    /// Reads the file and publishes it.
    ///
    /// # Errors
    /// Why the file could not be published (also recorded in `snapshots`).
    pub fn load_into(&self, snapshots: &Snapshots) -> Result<(), LoadError> {
        let raw = match read_raw(&self.path) {
            Ok(raw) => raw,
            Err(e) => {
                snapshots.reject(&self.path.display().to_string(), e.to_string());
                return Err(e);
            }
        };
        let path = self.path.display().to_string();
        snapshots.publish(raw).map(|_| ()).map_err(|source| LoadError::Invalid { path, source })
    }

    /// Checks the file every interval and publishes edits, until `shutdown` changes.
    pub async fn watch(self, snapshots: Arc<Snapshots>, mut shutdown: watch::Receiver<bool>) {
        let mut last = self.stamp();
        loop {
            tokio::select! {
                () = tokio::time::sleep(self.interval) => {}
                _ = shutdown.changed() => return,
            }
            let now = self.stamp();
            if now == last {
                continue;
            }
            last = now;
            match self.load_into(&snapshots) {
                Ok(()) => {}
                Err(e) => tracing::error!("configuration edit not applied, the last good one stays: {e}"),
            }
        }
    }

    fn stamp(&self) -> Option<Stamp> {
        let meta = std::fs::metadata(&self.path).ok()?;
        // Size and time can stay equal across a quick edit on coarse clocks: compare content.
        let text = std::fs::read(&self.path).ok()?;
        Some(Stamp { len: meta.len(), modified: meta.modified().ok(), text })
    }
}
