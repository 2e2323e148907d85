//! The configuration snapshot on a plugin mount, kept current by `ferrogate sidecar
//! --snapshot-file` (written whole, then renamed over the old one, so a read never sees half).
//!
//! Checked at most every `snapshotCheckMs`, and read only when its modification time or size
//! changed. A file that cannot be read or does not validate is logged and the last good
//! configuration keeps serving.

use ferrogate_core::config::Config;
use ferrogate_core::snapshot::Snapshot;
use ferrogate_core::traefik::Settings;

use crate::abi::{self, Level};

/// What the instance knows of the file.
#[derive(Debug, Default)]
pub(crate) struct SnapshotFile {
    /// When the file is next looked at.
    next_check_ms: u64,
    /// Modification time and size when it was last read.
    stamp: Option<(Option<std::time::SystemTime>, u64)>,
    /// The version in use.
    version: Option<String>,
    /// The file was missing or unreadable at the last check (logged once per episode).
    failing: bool,
}

impl SnapshotFile {
    /// A newer configuration from the file, when one is due and it changed.
    pub(crate) fn refresh(&mut self, settings: &Settings, now_ms: u64) -> Option<Config> {
        let path = settings.snapshot_file.as_deref()?;
        if now_ms < self.next_check_ms {
            return None;
        }
        self.next_check_ms = now_ms.saturating_add(settings.snapshot_check_ms);
        let meta = match std::fs::metadata(path) {
            Ok(meta) => meta,
            Err(e) => return self.failed(path, &e.to_string()),
        };
        let stamp = (meta.modified().ok(), meta.len());
        if self.stamp == Some(stamp) {
            return None;
        }
        self.stamp = Some(stamp);
        let body = match std::fs::read(path) {
            Ok(body) => body,
            Err(e) => return self.failed(path, &e.to_string()),
        };
        self.failing = false;
        match Snapshot::receive(&body) {
            Ok(received) if self.version.as_deref() == Some(received.version.as_str()) => None,
            Ok(received) => {
                abi::log_line(Level::Info, &format!("ferrogate: snapshot {} from {path}", received.version));
                self.version = Some(received.version);
                Some(received.config)
            }
            Err(e) => {
                abi::log_line(Level::Warn, &format!("ferrogate: {path}: {e}; the last good configuration stays"));
                None
            }
        }
    }

    fn failed(&mut self, path: &str, error: &str) -> Option<Config> {
        if !self.failing {
            abi::log_line(Level::Warn, &format!("ferrogate: cannot read the snapshot file {path}: {error}"));
            self.failing = true;
        }
        None
    }
}
