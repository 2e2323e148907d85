//! The response cache on the data path ([`ferrogate_core::cache`]).
//!
//! - **Key.** When a model's, group's or key's `cache:` applies, the request's canonical digest
//!   is taken from the body as the client sent it, before guardrails rewrite it: an answer with
//!   restored values then only ever returns to the same prompt. The key's grants are checked
//!   first, so a shared (`group`, `global`) entry never reaches a caller who may not use the model.
//! - **Lookup**, after the input guardrails (a blocked prompt is still blocked): in the proxy's
//!   shared data ([`slots`]), or through the sidecar — Redis (`GET /v1/cache/entries/{digest}`)
//!   or the semantic store (`POST /v1/cache/semantic/lookup`) — while the request waits. Any
//!   failure there is a miss. A hit is answered here, in the caller's dialect, as a stream when
//!   the caller asked for one ([`ferrogate_core::cache::replay`]).
//! - **Store.** A miss copies what the client gets (a stream is assembled back into one answer);
//!   a complete 2xx answer is stored at its end — in shared data at once, or through the sidecar
//!   while the answer's last bytes wait (so the next request finds it).
//!
//! `Cache-Control: no-cache` skips the lookup (the fresh answer is stored), `no-store` skips
//! both, `x-ferrogate-cache: bypass` too. With no `cache:` configured, a request pays one
//! emptiness test.

mod lookup;
mod slots;
mod store;

use ferrogate_core::cache::assemble::Assembler;
use ferrogate_core::cache::key::{self, SemanticParts};
use ferrogate_core::cache::Shape;
use ferrogate_core::config::cache::Policy;
use ferrogate_core::config::{Config, Resolved};
use ferrogate_core::header_map;
use ferrogate_core::route::{self, Api};

use super::Stream;

pub(crate) use ferrogate_core::cache::wire::HEADER;

/// What the cache did for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Answered from the cache.
    Hit,
    /// Looked up, not found: forwarded (and stored when it succeeds).
    Miss,
    /// Not looked up (the client asked, or the request cannot be cached).
    Bypass,
}

impl Outcome {
    /// The header value and metric label.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Outcome::Hit => "hit",
            Outcome::Miss => "miss",
            Outcome::Bypass => "bypass",
        }
    }
}

/// The cache's state for one request under a `cache:` policy.
pub(crate) struct CacheState {
    policy: Policy,
    /// Exact digest (empty when the request cannot be cached).
    digest: String,
    family: &'static str,
    /// Resolved public model name, and the isolation scope (`key:…`, `group:…`, `global`).
    model: String,
    scope: String,
    /// The semantic lookup's inputs, when the policy is semantic.
    semantic: Option<SemanticParts>,
    pub(crate) outcome: Outcome,
    /// The lookup ran (a request resumed after waiting is not looked up again).
    looked_up: bool,
    /// The answer may be stored.
    store: bool,
    /// How the client gets its answer, and the model name it sent.
    shape: Shape,
    include_usage: bool,
    requested: String,
    /// The lookup or store call in flight through the sidecar.
    call: Option<lookup::Call>,
    /// The semantic store's ticket for this request's embedding.
    ticket: Option<String>,
    /// The answer as the client gets it: whole, or assembled from its stream.
    copy: Vec<u8>,
    assembler: Option<Assembler>,
    too_big: bool,
    /// The tokens the stored answer cost when it was made (set on a hit).
    pub(crate) hit_tokens: Option<(u64, u64)>,
}

/// The client's answer shape for `api` (the body's `stream` flag; Gemini's path says).
fn shape_of(api: Api, path: &str, body: &[u8]) -> (Shape, bool) {
    let v: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let streamed = v.get("stream").and_then(serde_json::Value::as_bool).unwrap_or(false);
    let usage = v.pointer("/stream_options/include_usage").and_then(serde_json::Value::as_bool).unwrap_or(false);
    let shape = match api {
        Api::ChatCompletions if streamed => Shape::ChatSse,
        Api::Messages if streamed => Shape::AnthropicSse,
        Api::Responses if streamed => Shape::ResponsesSse,
        Api::StreamGenerateContent if route::split_query(path).1.is_some_and(|q| q.contains("alt=sse")) => {
            Shape::GeminiSse
        }
        Api::StreamGenerateContent => Shape::GeminiJsonArray,
        _ => Shape::Json,
    };
    (shape, usage)
}

impl Stream {
    /// Sets up the cache for a request about to be routed: its policy, digest and outcome so
    /// far. Runs once, on the body as the client sent it.
    pub(super) fn cache_prepare(&mut self, config: &Config, api: Api, body: &[u8]) {
        if config.cache.is_empty() || self.cache.is_some() {
            return;
        }
        let path = self.head_map.get(self.path.clone()).unwrap_or_default();
        let path = String::from_utf8_lossy(path).into_owned();
        let requested = route::requested_name(api, &path, body);
        let Some((policy, model)) = self.cache_policy(config, &requested) else { return };
        let scope = self.cache_scope(config, policy.scope);
        let (shape, include_usage) = shape_of(api, &path, body);
        let (asked, no_store) = self.cache_directives();
        let exact = key::exact_key(api, body, &model, &scope);
        let family = ferrogate_core::cache::entry::family(api).unwrap_or("");
        let stateful = api == Api::Responses && ferrogate_core::stored::wants_store(body);
        let cacheable = exact.is_ok() && !stateful && !family.is_empty();
        let semantic = policy.semantic.as_ref().and_then(|_| key::semantic_parts(api, body, &model, &scope));
        let outcome = if cacheable && asked { Outcome::Miss } else { Outcome::Bypass };
        self.cache = Some(Box::new(CacheState {
            store: cacheable && !no_store,
            digest: exact.unwrap_or_default(),
            family,
            model,
            scope,
            semantic,
            outcome,
            looked_up: false,
            shape,
            include_usage,
            requested,
            call: None,
            ticket: None,
            copy: Vec::new(),
            assembler: None,
            too_big: false,
            hit_tokens: None,
            policy,
        }));
    }

    /// The policy that applies to `requested` for this caller, and the resolved model's name;
    /// `None` when none does, or the caller may not use the model (routing then refuses it).
    fn cache_policy(&self, config: &Config, requested: &str) -> Option<(Policy, String)> {
        let (model_index, model) = match config.authorize(self.caller, requested).ok()? {
            Resolved::Model(i) => (Some(i), config.models.get(i)?.name.clone()),
            Resolved::Pinned { provider, model } => (None, format!("{}/{model}", config.providers.get(provider)?.name)),
        };
        let key = self.caller.key_index();
        let groups = key.and_then(|k| config.keys.get(k)).map_or(&[][..], |k| k.groups.as_slice());
        let policy = config.cache.for_request(model_index, key, groups)?.clone();
        Some((policy, model))
    }

    /// The isolation scope of this caller under `scope`.
    fn cache_scope(&self, config: &Config, scope: ferrogate_core::config::cache::Scope) -> String {
        use ferrogate_core::config::cache::Scope;
        let key = config.key(self.caller);
        let group = key.and_then(|k| config.groups.get(config.cache.scope_group(&k.groups)?)).map(|g| &g.name);
        match (scope, key, group) {
            (Scope::Global, _, _) => "global".to_string(),
            (Scope::Group, _, Some(g)) => format!("group:{g}"),
            (_, Some(k), _) => format!("key:{}", k.name),
            // No keys configured: every caller is the same one.
            (_, None, _) => "global".to_string(),
        }
    }

    /// `(look up, may store)` from `Cache-Control` and `x-ferrogate-cache: bypass`.
    fn cache_directives(&self) -> (bool, bool) {
        let (mut lookup, mut store) = (true, true);
        for (name, value) in header_map::pairs(&self.head_map) {
            if name.eq_ignore_ascii_case(b"cache-control") {
                let value = String::from_utf8_lossy(value).to_ascii_lowercase();
                for directive in value.split(',').map(str::trim) {
                    match directive {
                        "no-cache" => lookup = false,
                        "no-store" => (lookup, store) = (false, false),
                        _ => {}
                    }
                }
            } else if name.eq_ignore_ascii_case(HEADER.as_bytes()) && value.eq_ignore_ascii_case(b"bypass") {
                (lookup, store) = (false, false);
            }
        }
        (lookup, !store)
    }

    /// The outcome for the response header, when a policy applied.
    pub(super) fn cache_outcome(&self) -> Option<Outcome> {
        self.cache.as_ref().map(|c| c.outcome)
    }

    /// Copies bytes the client gets, for the store.
    pub(super) fn cache_bytes(&mut self, bytes: &[u8]) {
        let Some(c) = self.cache.as_mut().filter(|c| c.store && c.outcome != Outcome::Hit) else { return };
        if c.too_big {
            return;
        }
        let limit = self.config.as_deref().map_or(0, |cfg| cfg.cache.max_entry_bytes as usize);
        if c.shape == Shape::Json {
            if c.copy.len() + bytes.len() > limit {
                (c.too_big, c.copy) = (true, Vec::new());
                return;
            }
            c.copy.extend_from_slice(bytes);
        } else {
            c.assembler.get_or_insert_with(|| Assembler::new(c.shape, limit)).feed(bytes);
        }
    }
}
