//! Looking a request up — in shared data, or through the sidecar (Redis, the semantic store)
//! while the request waits — and answering a hit.

use std::time::Duration;

use ferrogate_core::cache::entry::{self, Entry};
use ferrogate_core::cache::replay::{self, ReplayOptions};
use ferrogate_core::cache::wire::{ENTRIES_PATH, SEMANTIC_LOOKUP_PATH, TICKET_HEADER};
use ferrogate_core::cache::Shape;
use ferrogate_core::config::cache::StoreKind;
use ferrogate_core::config::Config;
use ferrogate_core::headers;
use proxy_wasm::hostcalls;
use proxy_wasm::traits::HttpContext;
use proxy_wasm::types::{Action, BufferType, MapType};

use super::{slots, Outcome, Stream, HEADER};
use crate::sidecar_call;

/// How long a lookup through the sidecar may hold a request before it counts as a miss.
const LOOKUP_TIMEOUT: Duration = Duration::from_millis(500);

/// Which sidecar call a request waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Call {
    /// A lookup: the request waits.
    Lookup(u32),
    /// A store: the answer's end waits.
    Store(u32),
}

impl Stream {
    /// Looks the request up once its input guardrails passed. `Some`: answered here, or
    /// waiting for the sidecar; `None`: route it.
    pub(in crate::http) fn cache_lookup(&mut self, config: &Config) -> Option<Action> {
        let c = self.cache.as_mut().filter(|c| !c.looked_up && c.outcome == Outcome::Miss)?;
        c.looked_up = true;
        if let (Some(parts), Some(sem)) = (&c.semantic, &c.policy.semantic) {
            let body = serde_json::json!({
                "embedding_model": sem.embedding_model, "threshold": sem.threshold, "model": c.model,
                "scope": c.scope, "context": parts.context, "text": parts.text, "ttl_secs": c.policy.ttl_secs,
            });
            let body = serde_json::to_vec(&body).unwrap_or_default();
            return self.sidecar_lookup("POST", SEMANTIC_LOOKUP_PATH, Some(&body));
        }
        match config.cache.store {
            StoreKind::Memory => {
                let bytes = slots::get(&c.digest, config.cache.max_entries)?;
                self.try_hit(config, &bytes)
            }
            StoreKind::Redis => {
                let path = format!("{ENTRIES_PATH}{}", c.digest);
                self.sidecar_lookup("GET", &path, None)
            }
        }
    }

    /// Asks the sidecar; the request waits (`Pause`), or goes on as a miss when it cannot.
    fn sidecar_lookup(&mut self, method: &str, path: &str, body: Option<&[u8]>) -> Option<Action> {
        let sidecar = self.shared.plugin.as_ref().and_then(|p| p.sidecar.clone())?;
        let extra = [("content-type", "application/json")];
        match sidecar_call::call(&sidecar, method, path, &extra, body, LOOKUP_TIMEOUT) {
            Ok(token) => {
                if let Some(c) = self.cache.as_mut() {
                    c.call = Some(Call::Lookup(token));
                }
                Some(Action::Pause)
            }
            Err(e) => {
                log::debug!("#{} cache lookup not made: the sidecar cannot be called ({e:?})", self.id);
                None
            }
        }
    }

    /// Handles the answer to `token` when it is one of the cache's calls; false otherwise.
    pub(in crate::http) fn on_cache_answer(&mut self, token: u32, num_headers: usize, body_size: usize) -> bool {
        let Some(c) = self.cache.as_mut() else { return false };
        match c.call {
            Some(Call::Lookup(t)) if t == token => {
                c.call = None;
                self.timed(|s| s.on_lookup_answer(num_headers, body_size));
                true
            }
            Some(Call::Store(t)) if t == token => {
                c.call = None;
                if sidecar_call::answer_status(num_headers) != Some(204) {
                    log::debug!("#{} cache entry not stored by the sidecar", self.id);
                }
                self.resume_http_response();
                true
            }
            _ => false,
        }
    }

    /// The sidecar's lookup answer: serve the hit, or route the request (a miss, or any failure).
    fn on_lookup_answer(&mut self, num_headers: usize, body_size: usize) -> Action {
        let status = sidecar_call::answer_status(num_headers);
        let ticket = hostcalls::get_map_value_bytes(MapType::HttpCallResponseHeaders, TICKET_HEADER).ok().flatten();
        let body = match status {
            Some(200) => hostcalls::get_buffer(BufferType::HttpCallResponseBody, 0, body_size).ok().flatten(),
            _ => None,
        };
        if let (Some(config), Some(body)) = (self.config.clone(), body) {
            if let Some(action) = self.try_hit(&config, &body) {
                return action;
            }
        }
        if let (Some(c), Some(t)) = (self.cache.as_mut(), ticket) {
            c.ticket = String::from_utf8(t).ok().filter(|t| !t.is_empty() && t.len() <= 128);
        }
        let Some(plugin) = self.shared.plugin.clone() else { return Action::Continue };
        let action = self.finish(&plugin);
        if action == Action::Continue {
            self.resume_http_request();
        }
        action
    }

    /// Serves `bytes` (an encoded entry) when it is a live entry for this request.
    fn try_hit(&mut self, config: &Config, bytes: &[u8]) -> Option<Action> {
        let entry = entry::decode(bytes).ok()?;
        let now_ms = self.callback_start_ns / 1_000_000;
        let c = self.cache.as_ref()?;
        let live = entry.expires_ms > now_ms && !config.cache.purged(&entry.model, &entry.scope, entry.created_ms);
        let ours = entry.family == c.family && entry.model == c.model && entry.scope == c.scope;
        if !(live && ours) {
            return None;
        }
        self.serve_hit(entry)
    }

    /// Answers from `entry`, as a stream when the client asked for one.
    fn serve_hit(&mut self, entry: Entry) -> Option<Action> {
        let c = self.cache.as_mut()?;
        let streamed = c.shape != Shape::Json;
        let body = if streamed {
            let opts = ReplayOptions {
                model: &c.requested,
                created: self.callback_start_ns / 1_000_000_000,
                include_usage: c.include_usage,
            };
            match replay::stream(c.shape, &entry.body, &opts) {
                Ok(body) => body,
                Err(e) => {
                    log::warn!("#{} cached answer not replayed ({e}); forwarding", self.id);
                    return None;
                }
            }
        } else {
            entry.body
        };
        (c.outcome, c.store) = (Outcome::Hit, false);
        c.hit_tokens = Some((entry.prompt_tokens, entry.completion_tokens));
        self.model_requested = c.requested.clone();
        let content_type = match c.shape {
            Shape::Json | Shape::GeminiJsonArray => "application/json",
            _ => "text/event-stream",
        };
        self.streamed = streamed;
        self.first_byte_ns = Some(self.callback_start_ns);
        let mut hdrs = vec![("content-type", content_type), (HEADER, "hit")];
        if let Some(id) = &self.request_id {
            hdrs.push((headers::REQUEST_ID, id.as_str()));
        }
        self.send_http_response(200, hdrs, Some(&body));
        self.local_status = Some(200);
        self.api = None;
        Some(Action::Pause)
    }
}
