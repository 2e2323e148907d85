//! Storing a complete answer at its end: in shared data at once, or through the sidecar
//! (Redis, the semantic store) while the answer's last bytes wait, so the next request finds it.

use std::time::Duration;

use ferrogate_core::cache::entry::{self, Entry};
use ferrogate_core::cache::Shape;
use ferrogate_core::config::cache::StoreKind;
use ferrogate_core::decimal::Decimal;
use proxy_wasm::types::Action;

use ferrogate_core::cache::wire::{ENTRIES_PATH, MODEL_HEADER, SCOPE_HEADER, SEMANTIC_PATH, TTL_HEADER};

use super::lookup::Call;
use super::{slots, Outcome, Stream};
use crate::sidecar_call;

/// How long the answer's end may wait for the sidecar to store it.
const STORE_TIMEOUT: Duration = Duration::from_secs(1);

impl Stream {
    /// At the end of the answer: stores a miss's complete 2xx answer; `Pause` while the
    /// sidecar stores it (the end goes on when it answers), else `action`.
    pub(in crate::http) fn cache_at_end(&mut self, action: Action) -> Action {
        let complete = self.status == 200 && !self.upstream_failed && !self.was_cut() && !self.guard_refused();
        let Some(entry) = self.cache_entry().filter(|_| complete) else { return action };
        let Some(config) = self.config.clone() else { return action };
        let Some(c) = self.cache.as_mut() else { return action };
        let bytes = entry::encode(&entry);
        let (method, path) = match (&c.ticket, config.cache.store) {
            (Some(ticket), _) => ("PUT", format!("{SEMANTIC_PATH}{ticket}")),
            (None, _) if c.semantic.is_some() && c.policy.semantic.is_some() => return action,
            (None, StoreKind::Memory) => {
                if !slots::put(&c.digest, config.cache.max_entries, &bytes) {
                    log::debug!("#{} cache entry not stored in shared data", self.id);
                }
                return action;
            }
            (None, StoreKind::Redis) => ("PUT", format!("{ENTRIES_PATH}{}", c.digest)),
        };
        let Some(sidecar) = self.shared.plugin.as_ref().and_then(|p| p.sidecar.clone()) else { return action };
        let ttl = Decimal::new(c.policy.ttl_secs);
        let extra = [
            ("content-type", "application/octet-stream"),
            (TTL_HEADER, ttl.as_str()),
            (MODEL_HEADER, c.model.as_str()),
            (SCOPE_HEADER, c.scope.as_str()),
        ];
        match sidecar_call::call(&sidecar, method, &path, &extra, Some(&bytes), STORE_TIMEOUT) {
            Ok(token) => {
                c.call = Some(Call::Store(token));
                Action::Pause
            }
            Err(e) => {
                log::debug!("#{} cache entry not stored: the sidecar cannot be called ({e:?})", self.id);
                action
            }
        }
    }

    /// The entry a miss stores: the answer as the client got it, whole; `None` when there is
    /// none to store (not a miss, too big, a stream that did not end properly).
    fn cache_entry(&mut self) -> Option<Entry> {
        let c = self.cache.as_mut().filter(|c| c.store && c.outcome != Outcome::Hit && !c.too_big)?;
        let body = match c.shape {
            Shape::Json => std::mem::take(&mut c.copy),
            _ => c.assembler.take()?.finish()?,
        };
        let limit = self.config.as_deref().map_or(0, |cfg| cfg.cache.max_entry_bytes as usize);
        if body.is_empty() || body.len() > limit {
            return None;
        }
        let (family, model, scope, ttl) = (c.family.to_string(), c.model.clone(), c.scope.clone(), c.policy.ttl_secs);
        let usage = self.tracker.as_mut().and_then(|t| t.finish()).unwrap_or_default();
        let now_ms = self.now_nanos() / 1_000_000;
        Some(Entry {
            family,
            model,
            scope,
            created_ms: now_ms,
            expires_ms: now_ms.saturating_add(ttl.saturating_mul(1_000)),
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            body,
        })
    }
}
