//! The end of the request phase: the whole body is buffered, so the request is routed
//! (balancer, flow control, limits) and the decision applied to its head and body, or it is
//! answered here; a request held for token ids, a lease or a queue comes back through
//! [`Stream::finish`] when its wait ends.

use ferrogate_core::headers;
use ferrogate_core::openai::ApiError;
use ferrogate_core::plugin::PluginConfig;
use ferrogate_core::route::{Api, RouteDecision};
use ferrogate_core::translate::{self, Outbound};
use proxy_wasm::traits::HttpContext;
use proxy_wasm::types::Action;

use super::head::requested_model;
use super::{admission, cut, dialects, Routed, Stream};

impl Stream {
    /// The whole body is buffered: route it and apply the decision, or reply with the error.
    pub(super) fn finish(&mut self, plugin: &PluginConfig) -> Action {
        let (Some(api), Some(config)) = (self.api.take(), self.config.clone()) else {
            return Action::Continue;
        };
        let original = self.get_http_request_body(0, self.body_size).unwrap_or_default();
        if api == Api::CountTokens {
            return self.count_tokens(&config, &original);
        }
        // Keyed on the body as the client sent it, looked up once the guardrails let it pass.
        self.cache_prepare(&config, api, &original);
        let original = match self.guard_body(&config, api, original) {
            Ok(body) => body,
            Err(action) => return action,
        };
        self.api = Some(api); // Kept while a lookup waits, so `finish` runs again.
        if let Some(action) = self.cache_lookup(&config) {
            return action;
        }
        self.api = None;
        if api == Api::Responses {
            if let Err(action) = self.prepare_responses(plugin, &config, &original) {
                return action;
            }
        }
        // A follow-up to a stored response is routed with its whole conversation (`chain`).
        let rebuilt = match self.rebuilt_body().map(|b| self.guard_rebuilt(&config, b)) {
            Some(Err(action)) => return action,
            Some(Ok(b)) => Some(b),
            None => None,
        };
        let body: &[u8] = rebuilt.as_deref().unwrap_or(&original);
        if self.token_ids_span.is_none() && self.start_tokenize(&config, api, body) {
            self.api = Some(api); // Routed when the ids arrive.
            return Action::Pause;
        }
        // Routing is the last use of the client's head.
        let head_map = std::mem::take(&mut self.head_map);
        if let Some(span) = self.token_ids_span.take() {
            let value = head_map.get(span).unwrap_or_default();
            if let Err(e) = ferrogate_core::kv::parse_token_ids(value, &mut self.token_ids) {
                self.model_requested = requested_model(body, api);
                return self.reply_error(&ApiError::bad_request(e.to_string()));
            }
        }
        let path = head_map.get(self.path.clone()).and_then(|p| std::str::from_utf8(p).ok()).unwrap_or_default();
        let ct = self.content_type.clone().and_then(|c| head_map.get(c));
        match self.route_balanced(&config, api, (path, ct), body) {
            Ok(mut decision) => {
                self.model_requested = std::mem::take(&mut decision.requested);
                if plugin.gen_ai_attributes {
                    self.max_tokens = ferrogate_core::limits::estimate::max_tokens(body);
                }
                if let Err(e) = Self::check_signing(&decision) {
                    return self.reply_error(&e);
                }
                let admission = match self.admit(&config, &decision, body) {
                    Ok(admission) => admission,
                    Err(action) => return action,
                };
                self.shapes = cut::stream_shapes(api, decision.translation.as_ref());
                if admission == admission::Admission::Now {
                    self.arm_overrun(&config, (decision.provider, &decision.upstream_model), body);
                }
                let native = rebuilt.is_some() && self.chain_body(&original, &mut decision, body);
                self.chain_rebuilt = rebuilt.is_some() && !native;
                let sent = if native { &original } else { body };
                if let Err(e) = self.add_betas(&config, &head_map, &mut decision, sent) {
                    return self.reply_error(&e);
                }
                let signed = self.sign_upstream(&decision, sent);
                self.apply(plugin, api, sent, decision);
                if let Some(signed) = &signed {
                    self.set_signed(signed);
                }
                if api == Api::Responses {
                    self.echo_continued();
                    // What this turn added is stored, not the rebuilt conversation.
                    self.begin_capture(plugin, &config, &original);
                }
                match admission {
                    admission::Admission::Now => Action::Continue,
                    // Forwarded as routed once a grant lets it in (`lease_wait`).
                    admission::Admission::Wait => Action::Pause,
                }
            }
            Err(e) => {
                self.model_requested = requested_model(body, api);
                if let Some(outcome) = self.flow_pending.take() {
                    // Held at a flow-control gate: keep what routing it again needs.
                    self.api = Some(api);
                    self.head_map = head_map;
                    return self.flow_hold(outcome);
                }
                self.reply_error(&e)
            }
        }
    }

    fn apply(&mut self, plugin: &PluginConfig, api: Api, original: &[u8], mut d: RouteDecision<'_>) {
        self.usage_dialect = dialects::upstream_dialect(api, d.translation.as_ref().map(|(p, _)| p.outbound));
        let new_body = self.with_usage_requested(api, original, &mut d);
        if let Some(new_body) = &new_body {
            self.set_http_request_body(0, self.body_size, new_body);
        }
        let new_length = new_body.as_ref().map(Vec::len).or(self.body_rewritten.then_some(self.body_size));
        if let Some(new_length) = new_length {
            // Envoy never recomputes framing; a stale length (or chunked plus length) corrupts it.
            if self.present.transfer_encoding {
                self.set_http_request_header("transfer-encoding", None);
            }
            let length = ferrogate_core::decimal::Decimal::new(new_length as u64);
            self.set_http_request_header("content-length", Some(length.as_str()));
        }
        self.set_http_request_header(&plugin.cluster_header, Some(d.provider));
        self.set_http_request_header(":authority", Some(d.authority));
        self.set_http_request_header(":path", Some(&d.path));
        self.set_credential(&d);
        if let Some((pair, _)) = &d.translation {
            if pair.outbound == Outbound::Anthropic {
                self.set_http_request_header("anthropic-version", Some(translate::anthropic::VERSION));
            }
        }
        // Always overwrite or remove: a client must not pick the endpoint itself.
        if let Some(list) = d.endpoint.and_then(|e| self.endpoint_list(e)) {
            self.set_http_request_header(headers::DESTINATION_ENDPOINT, Some(&list));
        } else if d.endpoint.is_some() || self.present.destination_endpoint {
            self.set_http_request_header(headers::DESTINATION_ENDPOINT, d.endpoint);
        }
        if self.request_id_generated {
            if let Some(id) = &self.request_id {
                self.set_http_request_header(headers::REQUEST_ID, Some(id));
            }
        }
        // Older Envoys lack the function (NotFound); ABI 0.2.1 mutations clear the cache anyway.
        let _ = proxy_wasm::hostcalls::call_foreign_function("clear_route_cache", None);
        log::debug!("#{} -> {} {} model={} endpoint={:?}", self.id, d.provider, d.path, d.upstream_model, d.endpoint);
        self.translation = d.translation.take();
        self.routed = Some(Routed { provider: d.provider_index, upstream_model: d.upstream_model });
    }
}
