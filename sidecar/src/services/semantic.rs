//! The semantic response cache's store, in the sidecar: answers found again by the *meaning*
//! of the last user turn, not only its bytes. The filter asks before forwarding a request whose
//! cache policy is semantic, and hands the complete answer back on a miss. Entries are opaque
//! bytes here; the filter frames them.
//!
//! Filter-facing routes (sidecar listener, internal bearer token):
//!
//! - `POST /v1/cache/semantic/lookup` with JSON `{"embedding_model", "threshold", "model",
//!   "scope", "context", "text", "ttl_secs"}`. The text is embedded ([`embed`]) and compared
//!   with the stored turns of the same partition ([`Partition`]: `scope` — `key:<name>`,
//!   `group:<name>` or `global` —, `model`, `context` — the digest of the rest of the
//!   conversation — and the embedding model all equal) whose turn has the same lexical
//!   signature ([`signature`]: its numbers, names, units, negation — so "capital of Austria"
//!   never answers "capital of Australia", nor "5 km to miles" "5 miles to km"). Hit: `200`,
//!   `application/octet-stream`, the entry bytes, `x-ferrogate-cache-similarity: 0.9731`. Miss:
//!   `404` with `x-ferrogate-cache-ticket: <32 hex>` — the vector waits under that ticket
//!   ([`tickets`]) for the store call. When no vector can be had (unknown model, provider not
//!   OpenAI-speaking, unreachable, slower than 2 s, bad answer): `404` without a ticket, logged
//!   once per outage — the cache fails open. `ttl_secs` (the policy's TTL now) also bounds the
//!   age of what is served, so a shortened TTL applies to older entries at once; it is the
//!   entry's lifetime when the store call names none. A body that is not such JSON, or a
//!   threshold outside (0, 1], is `400`.
//! - `PUT /v1/cache/semantic/{ticket}` with the entry bytes and `x-ferrogate-cache-ttl:
//!   <secs>` (capped at 30 days): `204`. An unknown, used or expired ticket is `404`; a body
//!   over the served `cache_store.max_entry_bytes`, or an entry costing more than the whole
//!   `cache_store.semantic_max_bytes` (see below), is `413`; a TTL header that is not a number
//!   is `400`. A TTL of 0 stores nothing (still `204`).
//!
//! Memory: the store ([`store`]) holds at most the served `cache_store.semantic_max_entries`
//! entries (default 10,000) **and** `cache_store.semantic_max_bytes` bytes (default 64 MiB),
//! both read from the served configuration on each store call; to fit a new entry, expired
//! entries are evicted first, then the least recently used (a hit is a use), until both hold.
//! An entry costs its answer bytes (≤ `max_entry_bytes`) + `4·d` bytes of vector (1,536 B for
//! all-MiniLM-L6-v2's d = 384) + its partition's names (~100–200 B) + a fixed
//! [`store::ENTRY_OVERHEAD`] of 512 B of bookkeeping (record, text digest, signature, index
//! slots, a partition of its own); the answer is copied on store, so the count is what is
//! held. With the defaults, 10,000 entries of 2 KB answers take ~42 MB (the count binds), and
//! ~250 entries of the largest allowed 256 KiB answers fill the 64 MiB: whatever the answers'
//! sizes, the store stays within `semantic_max_bytes` (plus allocator slack). Pending tickets
//! add at most ~15 MB. Lookups scan their partition by brute force: one `d`-long dot product
//! per candidate (384 multiply-adds, ~0.1 µs), about 1 ms for a 10,000-entry partition.
//! Everything is lost on restart, and each sidecar has its own (Redis here has no vector
//! search). `POST /api/v1/cache/purge` drops entries through [`SemanticApi::purge_hook`].

pub mod embed;
pub mod signature;
pub mod store;
pub mod tickets;
pub mod vector;

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{post, put};
use axum::{Json, Router};
use ferrogate_core::config::cache::{
    DEFAULT_MAX_ENTRY_BYTES, DEFAULT_SEMANTIC_MAX_BYTES, DEFAULT_SEMANTIC_MAX_ENTRIES,
};
use serde::Deserialize;
use sha2::{Digest, Sha256};

pub use embed::{EmbedError, Embedder};
pub use store::{Limits, Partition, SemanticStore, TooLarge};
pub use tickets::Tickets;

use super::auth::{bearer_ok, unauthorized};
use super::now_ms;
use super::snapshot::Snapshots;

/// The similarity of a hit, the ticket of a miss, the stored entry's lifetime: the headers the
/// filter reads and sends.
pub use ferrogate_core::cache::wire::{SIMILARITY_HEADER, TICKET_HEADER, TTL_HEADER};
/// Longest lifetime stored (as `cache.ttl_secs` allows).
const MAX_TTL_SECS: u64 = 30 * 24 * 3600;
/// Bodies read at most: the largest `max_entry_bytes` a configuration may set, plus slack, so
/// the served bound (checked in the handler) is what answers 413.
const BODY_LIMIT: usize = (16 << 20) + 1024;

/// State of the semantic cache routes; `store` is what the admin purge reaches.
#[derive(Clone, Debug)]
pub struct SemanticApi {
    /// The entries.
    pub store: Arc<SemanticStore>,
    /// Vectors of missed lookups waiting for their answer.
    pub tickets: Arc<Tickets>,
    /// The embeddings client.
    pub embedder: Arc<Embedder>,
    /// The served configuration (embedding models, bounds).
    pub snapshots: Arc<Snapshots>,
    /// The internal token filters must present.
    pub internal_token: Option<String>,
}

impl SemanticApi {
    /// An empty store serving `snapshots`' configuration.
    pub fn new(snapshots: Arc<Snapshots>, internal_token: Option<String>) -> SemanticApi {
        SemanticApi {
            store: Arc::new(SemanticStore::new()),
            tickets: Arc::new(Tickets::default()),
            embedder: Arc::new(Embedder::new()),
            snapshots,
            internal_token,
        }
    }

    /// The store's purge as the admin's cache purge calls it
    /// (`services::cache::Cache::set_semantic_purge`).
    pub fn purge_hook(&self) -> super::cache::SemanticPurge {
        let store = self.store.clone();
        Arc::new(move |scopes: &[String], model: Option<&str>| store.purge(scopes, model))
    }

    /// The unit vector of `text`, or `None` (already reported) when none can be had.
    async fn vector(&self, model: &str, text: &str) -> Option<Box<[f32]>> {
        let result = match self.snapshots.current() {
            Some(served) => self.embedder.embed(&served.config, model, text).await,
            None => Err(EmbedError::NoConfig),
        };
        let result = result.and_then(|v| vector::normalized(v).ok_or(EmbedError::Answer("a zero vector".into())));
        self.embedder.report(model, &result);
        result.ok()
    }

    /// `max_entry_bytes` and the store's [`Limits`] (`semantic_max_entries`,
    /// `semantic_max_bytes`) of the served configuration.
    fn bounds(&self) -> (usize, Limits) {
        let (entry_bytes, entries, bytes) = self.snapshots.current().map_or(
            (DEFAULT_MAX_ENTRY_BYTES, DEFAULT_SEMANTIC_MAX_ENTRIES, DEFAULT_SEMANTIC_MAX_BYTES),
            |s| {
                (s.config.cache.max_entry_bytes, s.config.cache.semantic_max_entries, s.config.cache.semantic_max_bytes)
            },
        );
        (entry_bytes as usize, Limits { entries: entries as usize, bytes })
    }
}

/// The semantic cache routes, to merge into the filter-facing router.
pub fn router(state: SemanticApi) -> Router {
    Router::new()
        .route("/v1/cache/semantic/lookup", post(lookup))
        .route("/v1/cache/semantic/{ticket}", put(store))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(state)
}

/// `POST /v1/cache/semantic/lookup`.
#[derive(Debug, Deserialize)]
struct LookupRequest {
    embedding_model: String,
    threshold: f32,
    model: String,
    scope: String,
    context: String,
    text: String,
    #[serde(default)]
    ttl_secs: u64,
}

async fn lookup(State(api): State<SemanticApi>, headers: HeaderMap, body: Bytes) -> Response {
    if !bearer_ok(&headers, api.internal_token.as_deref()) {
        return unauthorized().into_response();
    }
    let req: LookupRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return bad_request(format!("not a semantic lookup: {e}")),
    };
    if !(req.threshold > 0.0 && req.threshold <= 1.0) {
        return bad_request("threshold must be in (0, 1]".into());
    }
    let Some(vector) = api.vector(&req.embedding_model, &req.text).await else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let LookupRequest { embedding_model, threshold, model, scope, context, text, ttl_secs } = req;
    let partition = Arc::new(Partition { scope, model, context, embedding_model });
    let now = now_ms();
    let max_age_ms = (ttl_secs > 0).then_some(ttl_secs.saturating_mul(1000));
    let signature = signature::signature(&text);
    let query = store::Query { partition: &partition, vector: &vector, signature, threshold, max_age_ms };
    if let Some(hit) = api.store.lookup(query, now) {
        let similarity = format!("{:.4}", hit.similarity);
        let headers =
            [(CONTENT_TYPE.as_str(), "application/octet-stream".to_string()), (SIMILARITY_HEADER, similarity)];
        return (StatusCode::OK, headers, hit.body).into_response();
    }
    let text_digest = Sha256::digest(text.as_bytes()).into();
    let pending = tickets::Pending { partition, vector, text_digest, signature, ttl_secs };
    let ticket = api.tickets.issue(pending, now);
    (StatusCode::NOT_FOUND, [(TICKET_HEADER, ticket)]).into_response()
}

async fn store(
    State(api): State<SemanticApi>,
    Path(ticket): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !bearer_ok(&headers, api.internal_token.as_deref()) {
        return unauthorized().into_response();
    }
    let now = now_ms();
    let (max_bytes, limits) = api.bounds();
    if body.len() > max_bytes {
        // The answer will never be stored: free its vector now.
        api.tickets.take(&ticket, now);
        return too_large(format!("entry of {} bytes over cache_store.max_entry_bytes ({max_bytes})", body.len()));
    }
    // Its answer alone (with the fixed bookkeeping) already exceeds the store's whole budget.
    let least = body.len() as u64 + store::ENTRY_OVERHEAD;
    if least > limits.bytes {
        api.tickets.take(&ticket, now);
        let budget = limits.bytes;
        return too_large(format!(
            "entry of at least {least} bytes (answer and bookkeeping) over cache_store.semantic_max_bytes ({budget})"
        ));
    }
    let ttl = match headers.get(TTL_HEADER).map(|v| v.to_str().ok().and_then(|s| s.trim().parse::<u64>().ok())) {
        None => None,
        Some(Some(secs)) => Some(secs),
        Some(None) => return bad_request(format!("{TTL_HEADER}: not a number of seconds")),
    };
    let Some(pending) = api.tickets.take(&ticket, now) else {
        let body = Json(serde_json::json!({"error": "unknown, used or expired ticket"}));
        return (StatusCode::NOT_FOUND, body).into_response();
    };
    let tickets::Pending { partition, vector, text_digest, signature, ttl_secs } = pending;
    let ttl_secs = ttl.unwrap_or(ttl_secs).min(MAX_TTL_SECS);
    if ttl_secs == 0 {
        return StatusCode::NO_CONTENT.into_response();
    }
    let entry = store::NewEntry { partition, vector, text_digest, signature, body, ttl_ms: ttl_secs * 1000 };
    match api.store.insert(entry, limits, now) {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(TooLarge { cost, budget }) => too_large(format!(
            "entry of {cost} bytes (answer, vector and bookkeeping) over cache_store.semantic_max_bytes ({budget})"
        )),
    }
}

fn too_large(error: String) -> Response {
    (StatusCode::PAYLOAD_TOO_LARGE, Json(serde_json::json!({ "error": error }))).into_response()
}

fn bad_request(error: String) -> Response {
    (StatusCode::BAD_REQUEST, Json(serde_json::json!({ "error": error }))).into_response()
}
