//! Usage records received from filters: a bounded in-memory store with the queries the
//! admin API answers (by key, model and time range).
//!
//! This is the file-store flavour: records are also appended as JSON lines to a file when one
//! is configured, so they survive a restart; the Postgres table comes with the store work.

use std::collections::VecDeque;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;

use ferrogate_core::usage::Record;
use serde::{Deserialize, Serialize};

/// Records kept in memory for queries; older ones are dropped first.
const MEMORY_LIMIT: usize = 100_000;

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
#[derive(Debug, Serialize)]
pub struct Answer {
    /// Totals over every match (not only the returned page).
    pub totals: Totals,
    /// The newest matches, up to the limit.
    pub records: Vec<Record>,
}

/// Thread-safe usage store.
#[derive(Debug, Default)]
pub struct UsageStore {
    records: Mutex<VecDeque<Record>>,
    file: Option<PathBuf>,
}

impl UsageStore {
    /// A store, appending JSON lines to `file` when given.
    pub fn new(file: Option<PathBuf>) -> UsageStore {
        UsageStore { records: Mutex::new(VecDeque::new()), file }
    }

    /// Adds records; returns how many were stored.
    pub fn add(&self, batch: Vec<Record>) -> std::io::Result<usize> {
        if let Some(path) = &self.file {
            let mut out = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
            let mut buf = Vec::new();
            for r in &batch {
                serde_json::to_writer(&mut buf, r).map_err(std::io::Error::other)?;
                buf.push(b'\n');
            }
            out.write_all(&buf)?;
        }
        let n = batch.len();
        let mut records = self.records.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for r in batch {
            if records.len() == MEMORY_LIMIT {
                records.pop_front();
            }
            records.push_back(r);
        }
        Ok(n)
    }

    /// Runs a query.
    pub fn query(&self, q: &Query) -> Answer {
        let limit = q.limit.unwrap_or(100).min(10_000);
        let records = self.records.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut totals = Totals::default();
        let mut page = Vec::new();
        for r in records.iter().rev().filter(|r| matches(q, r)) {
            totals.requests += 1;
            totals.prompt_tokens += r.prompt_tokens;
            totals.completion_tokens += r.completion_tokens;
            totals.cost_micro_usd += r.cost_micro_usd.unwrap_or(0);
            if page.len() < limit {
                page.push(r.clone());
            }
        }
        Answer { totals, records: page }
    }
}

fn matches(q: &Query, r: &Record) -> bool {
    q.key.as_deref().is_none_or(|k| r.key.as_deref() == Some(k))
        && q.model.as_deref().is_none_or(|m| r.model_requested == m)
        && q.since.is_none_or(|s| r.started_at_unix_ms >= s)
        && q.until.is_none_or(|u| r.started_at_unix_ms < u)
}
