//! The request log's query (`GET /api/v1/requests`): every usage record as one request, with
//! filters and keyset paging, answered alike by the memory store and by Postgres
//! (`services::pg::requests`): both return their matches with a position, and [`Page::of`]
//! makes the page.
//!
//! Pages run newest first by (start time, arrival id); ties on the start millisecond go to the
//! later arrival first, as `GET /api/v1/usage` orders. A page's `next_cursor` encodes the
//! position of its last item, and the next page holds the matches strictly after it in that
//! order. The position is a key, not an offset: records arriving between two calls shift
//! nothing. One that started after the cursor (the usual case) belongs to pages already read;
//! one that started before it (a long stream reported late) shows up in its place on a later
//! page; no record is returned twice and none present at the first call is skipped.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use bytes::Bytes;
use ferrogate_core::usage::{GuardrailRecord, Record};
use serde::{Deserialize, Serialize};

use super::UsageStore;

/// Items per page when `limit` is not given.
pub const DEFAULT_LIMIT: usize = 100;
/// Most items per page (a larger `limit` is lowered to it); also the most records
/// `GET /api/v1/requests/{request_id}` returns.
pub const MAX_LIMIT: usize = 1000;

/// The query string of `GET /api/v1/requests`; every parameter is optional.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// The request's `x-request-id`.
    pub request_id: Option<String>,
    /// Key name.
    pub key: Option<String>,
    /// `model_requested`.
    pub model: Option<String>,
    /// Provider that served it.
    pub provider: Option<String>,
    /// Exact HTTP status.
    pub status: Option<u16>,
    /// Status class: `1xx` to `5xx`.
    pub status_class: Option<String>,
    /// Inclusive lower bound on the start, Unix milliseconds.
    pub since: Option<u64>,
    /// Exclusive upper bound on the start, Unix milliseconds.
    pub until: Option<u64>,
    /// Whether the answer was streamed.
    pub streamed: Option<bool>,
    /// Whether the streamed answer stopped before its end.
    pub partial: Option<bool>,
    /// Items per page: [`DEFAULT_LIMIT`] by default, 1 to [`MAX_LIMIT`].
    pub limit: Option<usize>,
    /// `next_cursor` of the previous page; absent or empty: the first page.
    pub cursor: Option<String>,
}

/// A parameter that parses but means nothing (400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParamError {
    /// The cursor was not made by this API.
    #[error("cursor: not a cursor of this API (pass next_cursor exactly as it was returned)")]
    Cursor,
    /// Not one of `1xx` … `5xx`.
    #[error("status_class: {0:?} is not one of 1xx, 2xx, 3xx, 4xx, 5xx")]
    StatusClass(String),
}

/// A position in the newest-first order: the record's start and its arrival id (the `fg_usage`
/// row id, or the memory store's arrival count). Ordered as the pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cursor {
    /// `started_at_unix_ms` of the record.
    pub started_ms: u64,
    /// Its arrival id.
    pub id: u64,
}

impl Cursor {
    /// The opaque form handed to clients: base64url (unpadded) of `"<started_ms>:<id>"`.
    pub fn encode(self) -> String {
        URL_SAFE_NO_PAD.encode(format!("{}:{}", self.started_ms, self.id))
    }

    /// Reads back what [`Cursor::encode`] made.
    ///
    /// # Errors
    /// [`ParamError::Cursor`] for anything else.
    pub fn decode(text: &str) -> Result<Cursor, ParamError> {
        let bytes = URL_SAFE_NO_PAD.decode(text).map_err(|_| ParamError::Cursor)?;
        let text = std::str::from_utf8(&bytes).map_err(|_| ParamError::Cursor)?;
        let (started, id) = text.split_once(':').ok_or(ParamError::Cursor)?;
        let number = |s: &str| {
            let digits = !s.is_empty() && s.len() <= 20 && s.bytes().all(|b| b.is_ascii_digit());
            digits.then(|| s.parse::<u64>().ok()).flatten().ok_or(ParamError::Cursor)
        };
        Ok(Cursor { started_ms: number(started)?, id: number(id)? })
    }
}

/// The validated filters and page of a request query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestFilter {
    /// Exact `request_id`.
    pub request_id: Option<String>,
    /// Exact key name (records without a key never match).
    pub key: Option<String>,
    /// Exact `model_requested`.
    pub model: Option<String>,
    /// Exact provider.
    pub provider: Option<String>,
    /// Exact status.
    pub status: Option<u16>,
    /// Status in `[low, high)` (`2xx`: 200 to 299).
    pub status_class: Option<(u16, u16)>,
    /// Inclusive lower bound on the start, Unix milliseconds.
    pub since: Option<u64>,
    /// Exclusive upper bound on the start, Unix milliseconds.
    pub until: Option<u64>,
    /// `streamed` equal to it.
    pub streamed: Option<bool>,
    /// `partial` equal to it.
    pub partial: Option<bool>,
    /// Only positions strictly after this one in the newest-first order.
    pub after: Option<Cursor>,
    /// Items per page, 1 to [`MAX_LIMIT`].
    pub limit: usize,
}

impl Default for RequestFilter {
    fn default() -> RequestFilter {
        RequestFilter {
            request_id: None,
            key: None,
            model: None,
            provider: None,
            status: None,
            status_class: None,
            since: None,
            until: None,
            streamed: None,
            partial: None,
            after: None,
            limit: DEFAULT_LIMIT,
        }
    }
}

impl RequestFilter {
    /// Checks the query string: the status class and the cursor must mean something; `limit`
    /// is brought into 1 to [`MAX_LIMIT`].
    ///
    /// # Errors
    /// A status class or a cursor this API does not know.
    pub fn parse(p: Params) -> Result<RequestFilter, ParamError> {
        let status_class = p.status_class.filter(|c| !c.is_empty()).map(|c| class_range(&c)).transpose()?;
        let after = p.cursor.filter(|c| !c.is_empty()).map(|c| Cursor::decode(&c)).transpose()?;
        Ok(RequestFilter {
            request_id: p.request_id,
            key: p.key,
            model: p.model,
            provider: p.provider,
            status: p.status,
            status_class,
            since: p.since,
            until: p.until,
            streamed: p.streamed,
            partial: p.partial,
            after,
            limit: p.limit.unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT),
        })
    }

    /// Every record of one request id (newest first, at most [`MAX_LIMIT`]).
    pub fn by_id(request_id: String) -> RequestFilter {
        RequestFilter { request_id: Some(request_id), limit: MAX_LIMIT, ..RequestFilter::default() }
    }

    /// Whether the record passes the filters (the cursor aside: see [`RequestFilter::follows`]).
    pub fn matches(&self, r: &Record) -> bool {
        let same = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
        same(&self.request_id, &r.request_id)
            && self.key.as_deref().is_none_or(|k| r.key.as_deref() == Some(k))
            && same(&self.model, &r.model_requested)
            && same(&self.provider, &r.provider)
            && self.status.is_none_or(|s| r.status == s)
            && self.status_class.is_none_or(|(low, high)| (low..high).contains(&r.status))
            && self.since.is_none_or(|s| r.started_at_unix_ms >= s)
            && self.until.is_none_or(|u| r.started_at_unix_ms < u)
            && self.streamed.is_none_or(|s| r.streamed == s)
            && self.partial.is_none_or(|p| r.partial == p)
    }

    /// Whether `at` comes after the cursor in the newest-first order (always, without one).
    pub fn follows(&self, at: Cursor) -> bool {
        self.after.is_none_or(|c| at < c)
    }
}

/// `2xx` (or `2XX`) as the statuses `[200, 300)`.
fn class_range(class: &str) -> Result<(u16, u16), ParamError> {
    match class.as_bytes() {
        [d @ b'1'..=b'5', x, y] if x.eq_ignore_ascii_case(&b'x') && y.eq_ignore_ascii_case(&b'x') => {
            let low = u16::from(d - b'0') * 100;
            Ok((low, low + 100))
        }
        _ => Err(ParamError::StatusClass(class.to_string())),
    }
}

/// One request as the API and the request log show it: the record's fields (all of them
/// written, defaults included, but `guardrails` only when set; not `admitted`, which only
/// steers the limits ledger at ingestion and is not kept by Postgres), and `attempts`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[allow(missing_docs)] // field for field the documented `Record`
pub struct RequestItem {
    pub request_id: String,
    pub key: Option<String>,
    pub groups: Vec<String>,
    pub model_requested: String,
    pub provider: String,
    pub upstream_model: String,
    pub status: u16,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cached_tokens: u64,
    pub cost_micro_usd: Option<u64>,
    pub latency_ms: u64,
    pub ttft_ms: Option<u64>,
    pub started_at_unix_ms: u64,
    pub streamed: bool,
    pub cut: bool,
    pub partial: bool,
    pub queued_ms: u64,
    pub retries: u64,
    pub continues: Option<String>,
    pub rebuilt: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guardrails: Option<GuardrailRecord>,
    /// Answered from the response cache (no provider call).
    pub cached: bool,
    /// The client's `User-Agent`, bounded (`null`: it sent none, or a record of an older filter).
    pub user_agent: Option<String>,
    /// The pool endpoint that served (`null`: a target without a pool, or an older record).
    pub endpoint: Option<String>,
    /// Upstream attempts the request took: `retries + 1`.
    pub attempts: u64,
}

impl From<Record> for RequestItem {
    fn from(r: Record) -> RequestItem {
        RequestItem {
            attempts: r.retries.saturating_add(1),
            request_id: r.request_id,
            key: r.key,
            groups: r.groups,
            model_requested: r.model_requested,
            provider: r.provider,
            upstream_model: r.upstream_model,
            status: r.status,
            prompt_tokens: r.prompt_tokens,
            completion_tokens: r.completion_tokens,
            cached_tokens: r.cached_tokens,
            cost_micro_usd: r.cost_micro_usd,
            latency_ms: r.latency_ms,
            ttft_ms: r.ttft_ms,
            started_at_unix_ms: r.started_at_unix_ms,
            streamed: r.streamed,
            cut: r.cut,
            partial: r.partial,
            queued_ms: r.queued_ms,
            retries: r.retries,
            continues: r.continues,
            rebuilt: r.rebuilt,
            guardrails: r.guardrails,
            cached: r.cached,
            user_agent: r.user_agent,
            endpoint: r.endpoint,
        }
    }
}

/// One page of `GET /api/v1/requests`.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct Page {
    /// The matches, newest first.
    pub requests: Vec<RequestItem>,
    /// Pass as `cursor` for the next page; `null` on the last one.
    pub next_cursor: Option<String>,
}

impl Page {
    /// The page from a store's matches in newest-first order (up to `limit + 1`: one more than
    /// the page says that another follows).
    pub fn of(mut hits: Vec<(Cursor, Record)>, limit: usize) -> Page {
        let more = hits.len() > limit;
        hits.truncate(limit);
        let next_cursor = if more { hits.last().map(|(at, _)| at.encode()) } else { None };
        Page { requests: hits.into_iter().map(|(_, r)| RequestItem::from(r)).collect(), next_cursor }
    }
}

impl UsageStore {
    /// The newest records matching `f` after its cursor, up to `f.limit + 1`, each with its
    /// position (start, arrival id); lines that are not records are skipped.
    pub fn requests(&self, f: &RequestFilter) -> Vec<(Cursor, Record)> {
        // Parse outside the lock, as `query` does.
        let (first, lines) = self.snapshot();
        let mut hits: Vec<(Cursor, usize)> = Vec::new();
        for (at, line) in lines.iter().enumerate() {
            let Ok(r) = serde_json::from_slice::<Record>(line) else { continue };
            let position = Cursor { started_ms: r.started_at_unix_ms, id: first + at as u64 };
            if f.matches(&r) && f.follows(position) {
                hits.push((position, at));
            }
        }
        hits.sort_unstable_by(|a, b| b.cmp(a));
        hits.truncate(f.limit.saturating_add(1));
        hits.into_iter().filter_map(|(position, at)| Some((position, parse(lines.get(at)?)?))).collect()
    }
}

fn parse(line: &Bytes) -> Option<Record> {
    serde_json::from_slice(line).ok()
}

#[cfg(test)]
pub(crate) mod tests;
