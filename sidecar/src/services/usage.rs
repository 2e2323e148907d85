//! Usage records received from filters, and the queries the admin API answers (by key, model
//! and time range). Where they are kept is chosen at start ([`UsageBackend`]):
//!
//! - with the `postgres` configuration store, in the `fg_usage` table (`services::pg::usage`);
//! - otherwise in memory (the newest [`MEMORY_LIMIT`] records), and appended as JSON lines to
//!   the usage file when one is configured. At start the file's last [`MEMORY_LIMIT`] lines
//!   are read back, so queries after a restart still see the records before it.
//!
//! In memory records are kept as the JSON lines the filters sent: ingestion splits a batch into
//! lines (slices of the request body, no copy, no parse) and a query parses the lines it reads.
//! In `ferrogate serve` ingestion shares the cores with the data path at every request rate,
//! queries are rare admin calls. Each line is checked to be one JSON object at ingestion, so a
//! garbled batch is refused whole (400) rather than stored. The file store delivers at least
//! once: a batch whose acknowledgement is lost is sent again and kept twice (Postgres stores
//! it once); the file is not fsynced, so it survives a process restart, not a power cut.
//!
//! The same records answer `GET /api/v1/requests` ([`requests`]: filters, keyset paging) and,
//! with `--request-log`, are written for log shippers as they are ingested ([`request_log`]).
//! Filters that cannot post their records append them to a file instead ([`inbox`]).

use std::collections::VecDeque;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;

use bytes::Bytes;
use ferrogate_core::usage::Record;
use serde::{Deserialize, Serialize};

use super::pg::StoreError;

mod backend;
pub mod inbox;
pub mod request_log;
pub mod requests;
mod tail;

pub use backend::UsageBackend;

/// Records kept in memory for queries (and read back from the usage file at start); older
/// ones are dropped first.
pub const MEMORY_LIMIT: usize = 100_000;

/// Why a batch was not stored.
#[derive(Debug, thiserror::Error)]
pub enum AddError {
    /// The sender's fault (400): a line is not a JSON object.
    #[error("line {line}: not a usage record (one JSON object per line expected)")]
    BadLine {
        /// 1-based line number in the batch.
        line: usize,
    },
    /// Ours (503): the usage file cannot be written.
    #[error("usage file: {0}")]
    Io(#[from] std::io::Error),
    /// Ours (503): the usage database has not been reached yet.
    #[error("the usage database is not connected yet")]
    NotConnected,
    /// Ours (503): the usage database refused or is unreachable.
    #[error("usage database: {0}")]
    Store(#[from] StoreError),
}

/// Why a query could not be answered (503).
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// The usage database has not been reached yet.
    #[error("the usage database is not connected yet")]
    NotConnected,
    /// The usage database refused or is unreachable.
    #[error("usage database: {0}")]
    Store(#[from] StoreError),
}

/// What a batch did to the store.
#[derive(Debug, Default, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct Added {
    /// Records newly stored.
    pub stored: usize,
    /// Records already stored (a batch sent again), skipped.
    #[serde(skip_serializing_if = "is_zero_usize")]
    pub duplicates: usize,
}

fn is_zero_usize(n: &usize) -> bool {
    *n == 0
}

/// Filters of a usage query; every field is optional.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Query {
    /// Key name.
    pub key: Option<String>,
    /// Model as the client asked for it.
    pub model: Option<String>,
    /// Inclusive lower bound, Unix milliseconds.
    pub since: Option<u64>,
    /// Exclusive upper bound, Unix milliseconds.
    pub until: Option<u64>,
    /// Most records returned (newest first); default 100, at most 10,000.
    pub limit: Option<usize>,
}

impl Query {
    /// The number of records to return: `limit`, 100 by default, at most 10,000.
    pub fn effective_limit(&self) -> usize {
        self.limit.unwrap_or(100).min(10_000)
    }
}

/// Sums over the records matching a query.
#[derive(Debug, Default, Clone, Serialize, PartialEq, Eq)]
pub struct Totals {
    /// Matching requests.
    pub requests: u64,
    /// Prompt tokens.
    pub prompt_tokens: u64,
    /// Completion tokens.
    pub completion_tokens: u64,
    /// Cost in micro-USD of the priced requests.
    pub cost_micro_usd: u64,
}

/// The answer to a usage query.
#[derive(Debug, Default, Serialize)]
pub struct Answer {
    /// Totals over every match (not only the returned page).
    pub totals: Totals,
    /// The newest matches by start time (ties: the later arrival first), up to the limit.
    pub records: Vec<Record>,
    /// Stored lines that could not be read as records (skipped).
    #[serde(skip_serializing_if = "is_zero")]
    pub unreadable: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Thread-safe usage store.
#[derive(Debug, Default)]
pub struct UsageStore {
    kept: Mutex<Kept>,
    file: Option<PathBuf>,
}

/// The records in memory.
#[derive(Debug, Default)]
struct Kept {
    /// One JSON record per entry, oldest first.
    lines: VecDeque<Bytes>,
    /// Arrival id of the first line (ids count every line kept since start, dropped ones
    /// included, so a line keeps its id: the request log's cursors point at them).
    first_id: u64,
}

impl UsageStore {
    /// A store, appending JSON lines to `file` when given.
    pub fn new(file: Option<PathBuf>) -> UsageStore {
        UsageStore { kept: Mutex::new(Kept::default()), file }
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The arrival id of the first line and every line, copied out of the lock (a query must
    /// not hold up ingestion).
    fn snapshot(&self) -> (u64, Vec<Bytes>) {
        let kept = self.kept();
        (kept.first_id, kept.lines.iter().cloned().collect())
    }

    /// A store on `file` (when given) with its last [`MEMORY_LIMIT`] records read back, so a
    /// restart keeps what queries see. A line cut short by a crash is skipped (and ended, so
    /// the next batch starts on a line of its own); an unreadable file is logged, not fatal.
    pub fn open(file: Option<PathBuf>) -> UsageStore {
        let store = UsageStore::new(file);
        let Some(path) = &store.file else { return store };
        match tail::load(path, MEMORY_LIMIT) {
            Ok(lines) => {
                if !lines.is_empty() {
                    tracing::info!(records = lines.len(), file = %path.display(), "usage records read back");
                }
                store.kept().lines = lines.into();
            }
            Err(e) => tracing::warn!(error = %e, file = %path.display(), "usage file not read back"),
        }
        store
    }

    /// Adds a batch of JSON lines (blank lines ignored); returns how many records were stored.
    /// Nothing is stored when any line is not a JSON object.
    pub fn add(&self, batch: Bytes) -> Result<Added, AddError> {
        self.add_lines(&record_lines(&batch)?)
    }

    /// Adds lines already split and checked ([`record_lines`]).
    fn add_lines(&self, lines: &[Bytes]) -> Result<Added, AddError> {
        if lines.is_empty() {
            return Ok(Added::default());
        }
        if let Some(path) = &self.file {
            let mut out = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
            let mut text = Vec::with_capacity(lines.iter().map(|l| l.len() + 1).sum());
            for line in lines {
                text.extend_from_slice(line);
                text.push(b'\n');
            }
            out.write_all(&text)?;
        }
        let mut kept = self.kept();
        for line in lines {
            if kept.lines.len() == MEMORY_LIMIT {
                kept.lines.pop_front();
                kept.first_id += 1;
            }
            kept.lines.push_back(line.clone());
        }
        Ok(Added { stored: lines.len(), duplicates: 0 })
    }

    /// Runs a query: totals over every match, then the newest matches by start time (ties:
    /// the later arrival first), the same order the Postgres store answers in.
    pub fn query(&self, q: &Query) -> Answer {
        // Parse outside the lock: ingestion must not wait for a long query.
        let (_, snapshot) = self.snapshot();
        let mut answer = Answer::default();
        // (start, arrival) of every match; only the page's lines are parsed a second time.
        let mut hits: Vec<(u64, usize)> = Vec::new();
        for (at, line) in snapshot.iter().enumerate() {
            let Ok(r) = serde_json::from_slice::<Record>(line) else {
                answer.unreadable += 1;
                continue;
            };
            if !matches(q, &r) {
                continue;
            }
            let t = &mut answer.totals;
            t.requests += 1;
            t.prompt_tokens += r.prompt_tokens;
            t.completion_tokens += r.completion_tokens;
            t.cost_micro_usd += r.cost_micro_usd.unwrap_or(0);
            hits.push((r.started_at_unix_ms, at));
        }
        hits.sort_unstable_by(|a, b| b.cmp(a));
        hits.truncate(q.effective_limit());
        answer.records = hits.iter().filter_map(|&(_, at)| serde_json::from_slice(snapshot.get(at)?).ok()).collect();
        answer
    }
}

/// The batch's non-blank lines, trimmed, as slices of it (no copy); each must look like one
/// JSON object.
fn record_lines(batch: &Bytes) -> Result<Vec<Bytes>, AddError> {
    Ok(split_lines(batch)?.into_iter().map(|(_, line)| line).collect())
}

/// The batch's non-blank lines, trimmed, as slices of it with their 1-based line numbers; each
/// must look like one JSON object.
fn split_lines(batch: &Bytes) -> Result<Vec<(usize, Bytes)>, AddError> {
    let mut lines = Vec::new();
    let mut from = 0;
    // memchr finds the line ends many bytes at a time: this runs for every request's record.
    let ends = memchr::memchr_iter(b'\n', batch).chain(std::iter::once(batch.len()));
    for (i, line_end) in ends.enumerate() {
        let raw = &batch[from..line_end];
        let start = from + raw.iter().take_while(|b| b.is_ascii_whitespace()).count();
        let end = line_end - raw.iter().rev().take_while(|b| b.is_ascii_whitespace()).count();
        from = line_end + 1;
        if start >= end {
            continue;
        }
        if batch[start] != b'{' || batch[end - 1] != b'}' {
            return Err(AddError::BadLine { line: i + 1 });
        }
        lines.push((i + 1, batch.slice(start..end)));
    }
    Ok(lines)
}

fn matches(q: &Query, r: &Record) -> bool {
    q.key.as_deref().is_none_or(|k| r.key.as_deref() == Some(k))
        && q.model.as_deref().is_none_or(|m| r.model_requested == m)
        && q.since.is_none_or(|s| r.started_at_unix_ms >= s)
        && q.until.is_none_or(|u| r.started_at_unix_ms < u)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(key: &str, model: &str, at: u64, prompt: u64) -> String {
        format!(
            r#"{{"request_id":"r{at}","key":"{key}","groups":[],"model_requested":"{model}","provider":"p","upstream_model":"u","status":200,"prompt_tokens":{prompt},"completion_tokens":1,"cached_tokens":0,"cost_micro_usd":3,"latency_ms":1,"ttft_ms":null,"started_at_unix_ms":{at},"streamed":false}}"#
        )
    }

    #[test]
    fn stores_lines_and_answers_queries_newest_first() {
        let store = UsageStore::new(None);
        let batch = format!("{}\n\n  {}\r\n{}\n", line("a", "m", 1, 10), line("b", "m", 2, 20), line("a", "n", 3, 30));
        assert_eq!(store.add(Bytes::from(batch)).unwrap().stored, 3);
        let all = store.query(&Query::default());
        assert_eq!(all.totals.requests, 3);
        assert_eq!(all.records.iter().map(|r| r.started_at_unix_ms).collect::<Vec<_>>(), [3, 2, 1]);
        let a = store.query(&Query { key: Some("a".into()), ..Query::default() });
        assert_eq!((a.totals.requests, a.totals.prompt_tokens, a.totals.cost_micro_usd), (2, 40, 6));
        let window = store.query(&Query { since: Some(2), until: Some(3), ..Query::default() });
        assert_eq!(window.records.len(), 1);
        assert_eq!(window.records[0].key.as_deref(), Some("b"));
        let model = store.query(&Query { model: Some("n".into()), limit: Some(0), ..Query::default() });
        assert_eq!((model.totals.requests, model.records.len()), (1, 0));
    }

    #[test]
    fn a_garbled_batch_is_refused_whole() {
        let store = UsageStore::new(None);
        let batch = format!("{}\nnot json\n", line("a", "m", 1, 10));
        assert!(matches!(store.add(Bytes::from(batch)), Err(AddError::BadLine { line: 2 })));
        assert_eq!(store.query(&Query::default()).totals.requests, 0);
    }

    #[test]
    fn unreadable_lines_are_counted_not_returned() {
        let store = UsageStore::new(None);
        store.add(Bytes::from(format!("{}\n{{\"status\":\"x\"}}", line("a", "m", 1, 10)))).unwrap();
        let answer = store.query(&Query::default());
        assert_eq!((answer.totals.requests, answer.unreadable), (1, 1));
    }

    #[test]
    fn memory_keeps_the_newest_records() {
        let store = UsageStore::new(None);
        let one = line("a", "m", 1, 1);
        let batch = format!("{one}\n").repeat(MEMORY_LIMIT);
        store.add(Bytes::from(batch)).unwrap();
        store.add(Bytes::from(line("a", "m", 2, 1))).unwrap();
        let answer = store.query(&Query { limit: Some(1), ..Query::default() });
        assert_eq!(answer.totals.requests, MEMORY_LIMIT as u64);
        assert_eq!(answer.records[0].started_at_unix_ms, 2);
    }

    #[test]
    fn newest_means_latest_start_then_latest_arrival() {
        let store = UsageStore::new(None);
        // A long stream that started first is reported last.
        let batch = format!("{}\n{}\n{}\n", line("a", "m", 5, 1), line("b", "m", 7, 1), line("c", "m", 2, 1));
        store.add(Bytes::from(batch)).unwrap();
        store.add(Bytes::from(line("d", "m", 5, 1))).unwrap();
        let answer = store.query(&Query { limit: Some(3), ..Query::default() });
        let keys: Vec<_> = answer.records.iter().map(|r| r.key.clone().unwrap()).collect();
        assert_eq!(keys, ["b", "d", "a"]);
        assert_eq!(answer.totals.requests, 4);
    }

    #[test]
    fn a_reopened_file_store_answers_about_the_records_before() {
        let dir = std::env::temp_dir().join(format!("fg-usage-reopen-{}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("usage.jsonl");
        let before = UsageStore::open(Some(path.clone()));
        before.add(Bytes::from(format!("{}\n{}", line("a", "m", 1, 10), line("b", "m", 2, 20)))).unwrap();
        drop(before);
        let after = UsageStore::open(Some(path.clone()));
        after.add(Bytes::from(line("a", "m", 3, 30))).unwrap();
        let a = after.query(&Query { key: Some("a".into()), ..Query::default() });
        assert_eq!((a.totals.requests, a.totals.prompt_tokens), (2, 40));
        assert_eq!(after.query(&Query::default()).totals.requests, 3);
        assert_eq!(Record::parse_lines(&std::fs::read(&path).unwrap()).unwrap().len(), 3);
        // Guardrails survive the file and its reading back.
        use ferrogate_core::usage::{GuardrailHit, GuardrailRecord};
        let guarded = Record {
            request_id: "g".into(),
            started_at_unix_ms: 4,
            guardrails: Some(GuardrailRecord {
                blocked: Some("pii/\"ssn\"".into()),
                hits: vec![GuardrailHit {
                    rule: "pii/ssn".into(),
                    stage: "input".into(),
                    action: "block".into(),
                    count: 1,
                }],
                checks: Vec::new(),
            }),
            ..Record::default()
        };
        after.add(Bytes::from(guarded.to_json_line())).unwrap();
        drop(after);
        let reopened = UsageStore::open(Some(path.clone()));
        assert_eq!(reopened.query(&Query { limit: Some(1), ..Query::default() }).records, [guarded]);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn the_file_gets_every_line() {
        let dir = std::env::temp_dir().join(format!("fg-usage-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("usage.jsonl");
        let store = UsageStore::new(Some(path.clone()));
        store.add(Bytes::from(format!("{}\n{}", line("a", "m", 1, 1), line("b", "m", 2, 1)))).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(Record::parse_lines(text.as_bytes()).unwrap().len(), 2);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
