//! The request log for log shippers (`--request-log PATH|-`): every record the usage store
//! takes, written once as it is ingested, one JSON object per line: the fields of a
//! `GET /api/v1/requests` item ([`RequestItem`], `attempts` included) after
//! `"log":"ferrogate.request"` and `"time"`, the ingestion time (RFC 3339, UTC, milliseconds).
//!
//! Ingestion never waits for it: [`RequestLog::write`] hands the batch's lines (slices of the
//! request body, no copy, no parse) to a bounded queue, and a writer thread parses, formats
//! and writes them, a burst at a time. When the queue is full (the writer fell behind: a slow
//! disk, a stdout pipe nobody reads) or a write fails, the records are dropped and counted in
//! `ferrogate_request_log_dropped_total`. A file is opened (append, created if missing) for
//! every burst, so it may be rotated by renaming it; `-` is the process's stdout, where
//! nothing else writes JSON objects (logs go to stderr).
//!
//! With the memory store every stored line is logged, a batch sent again after a lost
//! acknowledgement included (the store keeps it twice too); with Postgres only the rows newly
//! stored are (a batch sent again is skipped there, and here).

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;

use bytes::Bytes;
use ferrogate_core::usage::Record;
use serde::Serialize;

use super::requests::RequestItem;
use crate::services::now_ms;

/// Batches waiting for the writer; one more is dropped. A batch is at most one
/// `POST /v1/usage` body (the filter sends 128 KiB at a time).
pub const QUEUE: usize = 256;

/// The `log` field of every line.
pub const LOG_NAME: &str = "ferrogate.request";

/// The writing end of the request log; the writer thread ends when it is dropped.
#[derive(Debug)]
pub struct RequestLog {
    queue: SyncSender<Burst>,
    dropped: Arc<AtomicU64>,
}

/// One ingested batch.
struct Burst {
    time_ms: u64,
    lines: Vec<Bytes>,
}

/// Where lines go.
#[derive(Debug, Clone)]
enum Target {
    Stdout,
    File(PathBuf),
}

impl RequestLog {
    /// The log on `path` (`-`: stdout), checked by opening the file for appending now.
    ///
    /// # Errors
    /// The file cannot be opened; the message names the flag and the path.
    pub fn open(path: &Path) -> std::io::Result<RequestLog> {
        let target = if path.as_os_str() == "-" { Target::Stdout } else { Target::File(path.to_path_buf()) };
        if let Target::File(file) = &target {
            append(file)
                .map_err(|e| std::io::Error::new(e.kind(), format!("--request-log {}: {e}", file.display())))?;
        }
        Ok(RequestLog::start(target))
    }

    fn start(target: Target) -> RequestLog {
        let (queue, rx) = sync_channel(QUEUE);
        let dropped = Arc::new(AtomicU64::new(0));
        let counter = dropped.clone();
        let spawned =
            std::thread::Builder::new().name("ferrogate-request-log".into()).spawn(move || run(&rx, &target, &counter));
        if let Err(e) = spawned {
            tracing::error!(error = %e, "the request log writer did not start; its records are dropped");
        }
        RequestLog { queue, dropped }
    }

    /// Queues the records of one stored batch (JSON lines as the filter sent them), stamped
    /// with the time now; never blocks. Lines that are not records are skipped when written.
    pub fn write(&self, lines: Vec<Bytes>) {
        if lines.is_empty() {
            return;
        }
        let n = lines.len() as u64;
        match self.queue.try_send(Burst { time_ms: now_ms(), lines }) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(n, Ordering::Relaxed);
            }
        }
    }

    /// Records dropped so far (queue full, or the write failed).
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Appends `ferrogate_request_log_dropped_total` in Prometheus text.
    pub fn prometheus(&self, out: &mut String) {
        let _ = write!(
            out,
            "# HELP ferrogate_request_log_dropped_total Records the request log (--request-log) dropped: its writer fell behind or could not write.\n\
             # TYPE ferrogate_request_log_dropped_total counter\n\
             ferrogate_request_log_dropped_total {}\n",
            self.dropped()
        );
    }
}

/// The writer: waits for a batch, takes every batch queued behind it, writes them at once.
fn run(rx: &Receiver<Burst>, target: &Target, dropped: &AtomicU64) {
    let mut failing = false;
    while let Ok(first) = rx.recv() {
        let bursts: Vec<Burst> = std::iter::once(first).chain(rx.try_iter()).collect();
        let mut text = Vec::with_capacity(bursts.iter().flat_map(|b| &b.lines).map(|l| l.len() + 200).sum());
        let mut records = 0u64;
        for burst in &bursts {
            let time = rfc3339(burst.time_ms);
            for line in &burst.lines {
                records += u64::from(render(line, &time, &mut text));
            }
        }
        match emit(target, &text) {
            Ok(()) if failing => {
                failing = false;
                tracing::info!("the request log is written again");
            }
            Ok(()) => {}
            Err(e) => {
                dropped.fetch_add(records, Ordering::Relaxed);
                if !std::mem::replace(&mut failing, true) {
                    tracing::error!(error = %e, "cannot write the request log; its records are dropped until it can");
                }
            }
        }
    }
}

/// One log line as written.
#[derive(Serialize)]
struct Line<'a> {
    log: &'static str,
    time: &'a str,
    #[serde(flatten)]
    item: RequestItem,
}

/// Appends the log line of one stored JSON line to `out`; false (nothing appended) when the
/// line is not a record (the memory store keeps any JSON object).
fn render(line: &[u8], time: &str, out: &mut Vec<u8>) -> bool {
    let Ok(record) = serde_json::from_slice::<Record>(line) else { return false };
    let line = Line { log: LOG_NAME, time, item: RequestItem::from(record) };
    if serde_json::to_writer(&mut *out, &line).is_err() {
        return false;
    }
    out.push(b'\n');
    true
}

fn emit(target: &Target, text: &[u8]) -> std::io::Result<()> {
    if text.is_empty() {
        return Ok(());
    }
    match target {
        Target::Stdout => {
            let mut out = std::io::stdout().lock();
            out.write_all(text)?;
            out.flush()
        }
        Target::File(path) => append(path)?.write_all(text),
    }
}

fn append(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new().create(true).append(true).open(path)
}

/// Unix milliseconds as RFC 3339 in UTC with milliseconds: `2025-12-01T11:53:20.000Z`.
pub fn rfc3339(ms: u64) -> String {
    let secs = ms / 1000;
    let (year, month, day) = civil(secs / 86_400);
    let s = secs % 86_400;
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z", s / 3600, s / 60 % 60, s % 60, ms % 1000)
}

/// Year, month, day of a count of days since 1970-01-01 (Howard Hinnant's `civil_from_days`,
/// for days on or after the epoch).
fn civil(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(id: &str, retries: u64) -> Bytes {
        let r =
            Record { request_id: id.into(), model_requested: "chat".into(), status: 200, retries, ..Record::default() };
        Bytes::from(r.to_json_line().trim_end().to_string())
    }

    #[test]
    fn times_are_rfc3339_in_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_764_590_000_123), "2025-12-01T11:53:20.123Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(rfc3339(253_402_300_799_999), "9999-12-31T23:59:59.999Z");
    }

    #[test]
    fn a_line_has_the_item_fields_after_log_and_time() {
        let mut out = Vec::new();
        assert!(render(&line("r1", 2), "2025-12-01T11:53:20.123Z", &mut out));
        assert!(!render(b"{\"not\":\"a record\"}", "t", &mut out), "not a record: skipped");
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.lines().count(), 1);
        assert!(text.starts_with(r#"{"log":"ferrogate.request","time":"2025-12-01T11:53:20.123Z","request_id":"r1","#));
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            (v["retries"].as_u64(), v["attempts"].as_u64(), v["partial"].as_bool()),
            (Some(2), Some(3), Some(false))
        );
        assert!(v.get("admitted").is_none());
    }

    #[test]
    fn a_file_gets_one_line_per_record_and_a_full_queue_counts_drops() {
        let dir = std::env::temp_dir().join(format!("fg-request-log-{}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("requests.jsonl");
        let log = RequestLog::open(&path).unwrap();
        log.write(vec![line("a", 0), line("b", 1)]);
        log.write(vec![line("c", 0)]);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while std::fs::read_to_string(&path).unwrap().lines().count() < 3 {
            assert!(std::time::Instant::now() < deadline, "the writer never wrote");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(log.dropped(), 0);
        // A writer that never reads: the queue fills, then every record is counted.
        let (queue, _rx) = sync_channel(1);
        let stuck = RequestLog { queue, dropped: Arc::default() };
        stuck.write(vec![line("x", 0)]);
        stuck.write(vec![line("y", 0), line("z", 0)]);
        assert_eq!(stuck.dropped(), 2);
        let mut metrics = String::new();
        stuck.prometheus(&mut metrics);
        assert!(metrics.contains("# HELP ferrogate_request_log_dropped_total "));
        assert!(metrics.ends_with("ferrogate_request_log_dropped_total 2\n"));
        assert!(RequestLog::open(&dir.join("missing/dir/x.jsonl"))
            .unwrap_err()
            .to_string()
            .starts_with("--request-log "));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
