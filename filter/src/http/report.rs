//! End of stream: one usage record into the VM's outbox (see `usage_sink`) and the request's metrics.
//!
//! Runs in `on_log`, which Envoy calls for every stream (also when the client went away): a
//! response that never completed is recorded with status 499, or 502 when the upstream failed
//! it, and a streamed answer that stopped early is charged for what it delivered
//! ([`super::delivery`]).

use std::borrow::Cow;

use ferrogate_core::config::Config;
use ferrogate_core::metrics::{model_label, NO_PROVIDER, UNKNOWN};
use ferrogate_core::usage::{cost_micro_usd, RecordView, Usage};

use super::Stream;
use crate::metrics::Observation;

impl Stream {
    /// Reports the stream; `start_ns` is when `on_log` began, so the record-building time is
    /// counted in the filter's total. Every stream is counted in the metrics; those that named
    /// a model also leave a usage record.
    pub(super) fn report_with_overhead(&mut self, start_ns: u64) {
        let usage = self.tracker.as_mut().and_then(|t| t.finish()).unwrap_or_default();
        let usage = self.delivered_usage(usage);
        // A cache hit: the tokens the stored answer cost when it was made, charged to no one.
        let hit = self.cache.as_ref().and_then(|c| c.hit_tokens);
        let usage = match hit {
            Some((prompt_tokens, completion_tokens)) => Usage { prompt_tokens, completion_tokens, cached_tokens: 0 },
            None => usage,
        };
        let status = self.local_status.unwrap_or_else(|| self.recorded_status());
        let config = self.config.clone();
        let guardrails = self.guard_record();
        let mut record = self.record(config.as_deref(), &usage, status, start_ns);
        if hit.is_some() {
            record.cached = true;
            record.cost_micro_usd = Some(0);
        }
        if let Some(g) = &guardrails {
            record.guardrails = Some(g);
            self.guard_metrics(g);
        }
        let cost = record.cost_micro_usd;
        // Requests that never named a model (401 at the door, model list) are not usage.
        let is_usage = self.routed.is_some() || !self.model_requested.is_empty();
        if let (true, Some(queue)) = (is_usage, self.shared.usage_queue.get()) {
            let mut outbox = self.shared.outbox.borrow_mut();
            if outbox.push(&record) {
                outbox.post(queue);
            }
        }
        if self.shared.plugin.as_ref().is_some_and(|p| p.gen_ai_attributes) {
            self.hand_gen_ai_attributes(config.as_deref(), &record);
        }
        let overhead_ns = self.overhead_ns + self.now_nanos().saturating_sub(start_ns);
        self.observe(config.as_deref(), &record, start_ns, overhead_ns);
        // The limits learn what the request really used (its reservation is replaced).
        if let (true, None, Some(c)) = (is_usage, hit, config.as_deref()) {
            self.settle(c, &usage, cost, start_ns / 1_000_000);
        }
    }

    /// The request's metrics, with labels bounded by the configuration.
    fn observe(&self, config: Option<&Config>, record: &RecordView<'_>, now_ns: u64, overhead_ns: u64) {
        let model = config.map_or(Cow::Borrowed(UNKNOWN), |c| model_label(c, &self.model_requested));
        let provider = if record.provider.is_empty() { NO_PROVIDER } else { record.provider };
        let key_label = self.shared.plugin.as_ref().is_some_and(|p| p.metrics_key_label);
        let mut metrics = self.shared.metrics.borrow_mut();
        if let Some(outcome) = self.cache_outcome() {
            metrics.cache_lookup(&model, outcome.as_str());
        }
        if !record.provider.is_empty() {
            metrics.attempt(provider, false);
        }
        metrics.observe(&Observation {
            api: self.api_label,
            model: &model,
            provider,
            key: record.key.filter(|_| key_label),
            status: record.status,
            reason: self.reason.or_else(|| self.upstream_reason(record.status)),
            tokens: [record.prompt_tokens, record.completion_tokens, record.cached_tokens],
            cost_micro_usd: record.cost_micro_usd,
            latency_ms: record.latency_ms,
            ttft_ms: record.ttft_ms,
            itl_us: self.inter_token_us(record.completion_tokens, now_ns),
            filter_us: overhead_ns / 1_000,
        });
    }

    /// Writes a routed request's GenAI attributes to filter state, for the host's span.
    fn hand_gen_ai_attributes(&self, config: Option<&Config>, record: &RecordView<'_>) {
        let Some(routed) = self.routed.as_ref() else { return };
        let kind = config.and_then(|c| c.providers.get(routed.provider)).map(|p| p.kind);
        let attributes = ferrogate_core::gen_ai::Attributes {
            api: self.api_kind,
            provider_kind: kind,
            provider: record.provider,
            request_model: record.model_requested,
            response_model: record.upstream_model,
            max_tokens: self.max_tokens,
            tokens: [record.prompt_tokens, record.completion_tokens, record.cached_tokens],
            ttft_ms: record.ttft_ms,
            finish_reasons: self.tracker.as_ref().and_then(|t| t.finish_reasons()).unwrap_or_default(),
        };
        let key = vec![ferrogate_core::gen_ai::FILTER_STATE_KEY];
        if let Err(e) = proxy_wasm::hostcalls::set_property(key, Some(attributes.to_json().as_bytes())) {
            log::debug!("#{} gen_ai attributes not handed over: {e:?}", self.id);
        }
    }

    /// Why an answer the filter did not give itself is an error, if it is one.
    fn upstream_reason(&self, status: u16) -> Option<&'static str> {
        if self.upstream_failed {
            Some("upstream_failed")
        } else if status == ferrogate_core::usage::STATUS_CLIENT_CLOSED {
            Some("client_closed")
        } else {
            (status >= 400).then_some("upstream_error")
        }
    }

    /// Mean time between a stream's output tokens after the first, in µs.
    fn inter_token_us(&self, completion_tokens: u64, now_ns: u64) -> Option<u64> {
        let first = self.first_byte_ns.filter(|_| self.streamed && completion_tokens >= 2)?;
        Some(now_ns.saturating_sub(first) / (completion_tokens - 1) / 1_000)
    }

    /// The stream's usage record, borrowing its strings from the stream and the config.
    fn record<'a>(&'a self, config: Option<&'a Config>, usage: &Usage, status: u16, now_ns: u64) -> RecordView<'a> {
        let key = config.and_then(|c| c.key(self.caller));
        let (provider, upstream_model) = match self.mcp_target(config).or_else(|| self.a2a_target(config)) {
            Some(mcp) => mcp,
            None => (self.provider_name(), self.routed.as_ref().map_or("", |r| r.upstream_model.as_str())),
        };
        let mut record = RecordView {
            request_id: self.request_id.as_deref().unwrap_or_default(),
            key: key.map(|k| k.name.as_str()),
            groups: key.map(|k| k.group_names.as_slice()).unwrap_or_default(),
            model_requested: &self.model_requested,
            provider,
            upstream_model,
            status,
            latency_ms: now_ns.saturating_sub(self.started_ns) / 1_000_000,
            ttft_ms: self.first_byte_ns.map(|t| t.saturating_sub(self.started_ns) / 1_000_000),
            started_at_unix_ms: self.started_ns / 1_000_000,
            streamed: self.streamed,
            admitted: self.reservation.is_some(),
            cut: self.was_cut(),
            partial: self.partial(),
            queued_ms: self.queued_ns / 1_000_000,
            retries: u64::from(self.attempt.earlier),
            continues: self.continues(),
            rebuilt: self.chain_rebuilt,
            user_agent: self.user_agent.as_deref(),
            endpoint: self.served_endpoint(config),
            ..RecordView::default()
        };
        record.set_usage(usage);
        if let Some(c) = config {
            record.cost_micro_usd = cost_micro_usd(&c.pricing, provider, upstream_model, usage);
        }
        record
    }
}
