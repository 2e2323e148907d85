//! `--usage-inbox`: usage records that filters append to a file, ingested like `POST /v1/usage`.
//!
//! A guest that makes no network calls (an http-wasm build of the filter, run as a proxy
//! plugin) cannot post its records; it appends them to a file on its plugin mount instead, one
//! JSON object per line, opening, appending and closing the file for each record. Every
//! [`POLL`] the sidecar reads what was appended since its offset, takes the complete lines (a
//! line whose newline is not written yet waits for the next poll) and stores them as one batch
//! through [`UsageBackend::add`], the path `/v1/usage` takes, then hands the batch to the
//! `stored` callback (the limits ledger, as `/v1/usage` does).
//!
//! - **Offset.** It advances only once the batch is stored, and is kept in `PATH.offset`
//!   (replaced atomically) with the file's inode, so a restart does not ingest a record twice.
//!   Delivery is at least once: a crash between storing a batch and writing the offset ingests
//!   that batch again (the Postgres store keeps it once, the file store twice).
//! - **Truncated or replaced.** A file shorter than the offset, or another file (another
//!   inode), is read from its start.
//! - **Rotation.** Once the whole file is ingested and it is larger than [`ROTATE_BYTES`], it
//!   is renamed to `PATH.1` (replacing the previous one); one poll later, when writers that
//!   opened it before the rename have finished, the rest of `PATH.1` is ingested and reading
//!   goes on with a new `PATH` from 0 (a line still unfinished in `PATH.1` then never ends:
//!   it is skipped). A file rotated by someone else the same way (renamed to `PATH.1`) is
//!   followed the same way.
//! - **Bad lines.** A line that is not a JSON object (or that the store refuses as a record)
//!   is skipped with a warning and counted: one bad line does not hold up the inbox.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::{AddError, UsageBackend};
use crate::services::snapshot::file::{sibling, write_atomically};

/// How often the inbox is read: records show up within about this.
pub const POLL: Duration = Duration::from_millis(500);

/// Size past which a fully ingested inbox is rotated to `PATH.1` (64 MiB).
pub const ROTATE_BYTES: u64 = 64 << 20;

/// Most bytes read in one go; a longer backlog is read in several batches.
const MAX_READ: u64 = 4 << 20;

/// Called with each stored batch (JSON lines).
pub type OnStored = Box<dyn Fn(&[u8]) + Send + Sync>;

/// Why a poll did not ingest everything it found.
#[derive(Debug, thiserror::Error)]
pub enum InboxError {
    /// The inbox (or its rotated file) cannot be read or renamed.
    #[error("usage inbox {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// The store cannot take the batch now; it is read again on the next poll.
    #[error("usage inbox: {0}")]
    Store(#[from] AddError),
}

/// Where reading stands, as kept in `PATH.offset`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Cursor {
    /// The file being read, by inode (`None`: no file yet).
    inode: Option<u64>,
    /// Bytes of it ingested.
    offset: u64,
}

/// What one read of a file did.
#[derive(Debug, Clone, Copy)]
struct Progress {
    /// Whether everything in the file was ingested.
    caught_up: bool,
    /// Its length when last read.
    len: u64,
}

/// The inbox reader: its files, its cursor and the store it feeds.
pub struct Inbox {
    path: PathBuf,
    rotated: PathBuf,
    offset_file: PathBuf,
    usage: Arc<UsageBackend>,
    stored: Option<OnStored>,
    cursor: Cursor,
    /// The cursor's file was seen at `PATH.1` one poll ago (its writers had a poll to finish).
    rotation_settled: bool,
    rotate_at: u64,
    skipped: u64,
    failing: bool,
}

impl std::fmt::Debug for Inbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inbox").field("path", &self.path).field("cursor", &self.cursor).finish_non_exhaustive()
    }
}

/// Polls the inbox at `path` every [`POLL`] until `shutdown`, storing its records in `usage`
/// and handing each stored batch to `stored`.
pub fn start(
    path: PathBuf,
    usage: Arc<UsageBackend>,
    stored: Option<OnStored>,
    mut shutdown: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut inbox = Inbox::open(path, usage);
        inbox.stored = stored;
        let mut tick = tokio::time::interval(POLL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.changed() => return,
            }
            // Outside the select: a poll is not cut between storing a batch and its offset.
            inbox.poll().await;
        }
    })
}

impl Inbox {
    /// The inbox at `path`, resuming from the offset kept in `PATH.offset` (from 0 when there
    /// is none or it cannot be read, with a warning for the latter).
    pub fn open(path: PathBuf, usage: Arc<UsageBackend>) -> Inbox {
        let offset_file = sibling(&path, ".offset");
        let cursor = load_cursor(&offset_file);
        let rotated = sibling(&path, ".1");
        Inbox {
            path,
            rotated,
            offset_file,
            usage,
            stored: None,
            cursor,
            rotation_settled: false,
            rotate_at: ROTATE_BYTES,
            skipped: 0,
            failing: false,
        }
    }

    /// Lines skipped so far because they were not records.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// One poll; failures are logged (once per outage) and retried on the next one.
    pub async fn poll(&mut self) {
        match self.try_poll().await {
            Ok(()) => {
                if std::mem::take(&mut self.failing) {
                    tracing::info!(path = %self.path.display(), "usage inbox ingested again");
                }
            }
            Err(e) if !self.failing => {
                self.failing = true;
                tracing::warn!(error = %e, path = %self.path.display(), "usage inbox not ingested; trying again every poll");
            }
            Err(e) => tracing::debug!(error = %e, "usage inbox not ingested"),
        }
    }

    async fn try_poll(&mut self) -> Result<(), InboxError> {
        if !self.follow_rotation().await? {
            return Ok(());
        }
        let Some(read) = self.ingest(&self.path.clone()).await? else {
            return Ok(());
        };
        if read.caught_up && read.len > self.rotate_at {
            self.rotate()?;
        }
        Ok(())
    }

    /// When the cursor's file is no longer `PATH` but `PATH.1` (rotated), ingests the rest of
    /// it and, a poll after it was first seen there (or renamed there by [`Inbox::rotate`]),
    /// moves on to `PATH` from 0. Whether `PATH` may be read now.
    async fn follow_rotation(&mut self) -> Result<bool, InboxError> {
        let Some(inode) = self.cursor.inode else { return Ok(true) };
        if inode_of(&self.path) == Some(inode) {
            return Ok(true);
        }
        if inode_of(&self.rotated) != Some(inode) {
            // Replaced (or removed) by someone else: the new file is read from its start.
            tracing::info!(path = %self.path.display(), "usage inbox replaced; reading the new file from its start");
            self.move_to(Cursor::default());
            return Ok(true);
        }
        // Gone since: the next poll sees the cursor's file nowhere and starts over.
        let Some(read) = self.ingest(&self.rotated.clone()).await? else { return Ok(false) };
        if !std::mem::replace(&mut self.rotation_settled, true) {
            return Ok(false);
        }
        if !read.caught_up {
            // Its writers had a poll to finish: a line still without its newline never ends.
            self.skip(1, "a line left unfinished in the rotated file");
        }
        self.rotation_settled = false;
        self.move_to(Cursor::default());
        Ok(true)
    }

    /// Renames the fully ingested `PATH` to `PATH.1`; the next poll ingests what writers still
    /// appended to it.
    fn rotate(&mut self) -> Result<(), InboxError> {
        std::fs::rename(&self.path, &self.rotated)
            .map_err(|source| InboxError::Io { path: self.path.clone(), source })?;
        tracing::info!(path = %self.path.display(), "usage inbox rotated");
        self.rotation_settled = true;
        Ok(())
    }

    /// Ingests the complete lines of `path` past the cursor (from 0 when it is another file or
    /// shorter than the offset). `None` when there is no such file.
    async fn ingest(&mut self, path: &Path) -> Result<Option<Progress>, InboxError> {
        let io = |source| InboxError::Io { path: path.to_path_buf(), source };
        let mut file = match std::fs::File::open(path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(e)),
        };
        loop {
            let meta = file.metadata().map_err(io)?;
            let (inode, len) = (inode(&meta), meta.len());
            if self.cursor.inode != Some(inode) || len < self.cursor.offset {
                if self.cursor.inode == Some(inode) {
                    tracing::warn!(path = %path.display(), "usage inbox truncated; reading it from its start");
                }
                self.move_to(Cursor { inode: Some(inode), offset: 0 });
            }
            let chunk = read_from(&mut file, self.cursor.offset, len).map_err(io)?;
            let consumed = self.store_chunk(&chunk).await?;
            let caught_up = self.cursor.offset + consumed >= len;
            if consumed > 0 {
                self.move_to(Cursor { inode: Some(inode), offset: self.cursor.offset + consumed });
            }
            // Whatever is left past a full read is read at once; a partial line waits.
            if consumed == 0 || chunk.len() as u64 != MAX_READ {
                return Ok(Some(Progress { caught_up, len }));
            }
        }
    }

    /// Stores the complete lines of `chunk`; the bytes consumed (up to the last newline, or
    /// the whole chunk when it is one line longer than [`MAX_READ`], skipped).
    async fn store_chunk(&mut self, chunk: &[u8]) -> Result<u64, InboxError> {
        let complete = match memchr::memrchr(b'\n', chunk) {
            Some(end) => &chunk[..=end],
            None if chunk.len() as u64 == MAX_READ => {
                self.skip(1, "a line longer than the read size");
                return Ok(MAX_READ);
            }
            None => return Ok(0),
        };
        let mut lines = self.record_lines(complete);
        while !lines.is_empty() {
            match self.usage.add(Bytes::from(lines.join(&b'\n'))).await {
                Ok(_) => break,
                // A JSON object the store does not take as a record (Postgres parses it).
                Err(AddError::BadLine { line }) if (1..=lines.len()).contains(&line) => {
                    lines.remove(line - 1);
                    self.skip(1, "not a usage record");
                }
                Err(e) => return Err(e.into()),
            }
        }
        if let (false, Some(stored)) = (lines.is_empty(), &self.stored) {
            stored(&lines.join(&b'\n'));
        }
        Ok(complete.len() as u64)
    }

    /// The non-blank lines of `complete` that are JSON objects; the others are skipped.
    fn record_lines<'a>(&mut self, complete: &'a [u8]) -> Vec<&'a [u8]> {
        let mut lines = Vec::new();
        let mut bad = 0;
        for line in complete.split(|b| *b == b'\n').map(<[u8]>::trim_ascii).filter(|l| !l.is_empty()) {
            if serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(line).is_ok() {
                lines.push(line);
            } else {
                bad += 1;
            }
        }
        self.skip(bad, "not a JSON object");
        lines
    }

    fn skip(&mut self, lines: u64, why: &str) {
        if lines == 0 {
            return;
        }
        self.skipped += lines;
        tracing::warn!(path = %self.path.display(), lines, skipped_total = self.skipped, "usage inbox: lines skipped: {why}");
    }

    /// Moves the cursor and keeps it in `PATH.offset`; a failed write is logged (a restart
    /// would then ingest again what was read since the last write).
    fn move_to(&mut self, cursor: Cursor) {
        if self.cursor == cursor {
            return;
        }
        self.cursor = cursor;
        let text = serde_json::to_vec(&cursor).unwrap_or_default();
        if let Err(e) = write_atomically(&self.offset_file, &text) {
            tracing::warn!(error = %e, file = %self.offset_file.display(), "cannot keep the usage inbox offset");
        }
    }
}

/// The cursor kept in `file`; from 0 when there is none, or (with a warning) when it cannot
/// be read.
fn load_cursor(file: &Path) -> Cursor {
    let read = std::fs::read(file)
        .map_err(|e| e.to_string())
        .and_then(|text| serde_json::from_slice(&text).map_err(|e| e.to_string()));
    match read {
        Ok(cursor) => cursor,
        Err(_) if !file.exists() => Cursor::default(),
        Err(e) => {
            tracing::warn!(error = %e, file = %file.display(), "usage inbox offset unreadable; reading from 0");
            Cursor::default()
        }
    }
}

/// At most [`MAX_READ`] bytes of `file` from `offset` (up to `len`).
fn read_from(file: &mut std::fs::File, offset: u64, len: u64) -> std::io::Result<Vec<u8>> {
    let want = len.saturating_sub(offset).min(MAX_READ);
    let mut chunk = Vec::with_capacity(usize::try_from(want).unwrap_or(0));
    file.seek(SeekFrom::Start(offset))?;
    file.take(want).read_to_end(&mut chunk)?;
    Ok(chunk)
}

fn inode_of(path: &Path) -> Option<u64> {
    std::fs::metadata(path).ok().map(|m| inode(&m))
}

#[cfg(unix)]
fn inode(meta: &std::fs::Metadata) -> u64 {
    std::os::unix::fs::MetadataExt::ino(meta)
}

/// Without inodes a file is known by nothing: replacement is seen only when it is shorter.
#[cfg(not(unix))]
fn inode(_meta: &std::fs::Metadata) -> u64 {
    0
}

#[cfg(test)]
#[path = "inbox_tests.rs"]
mod tests;
