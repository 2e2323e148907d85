//! End of stream: one usage record on the shared queue and the request's metrics.
//!
//! Runs in `on_log`, which Envoy calls for every stream (also when the client went away):
//! a response that never completed is recorded with status 499.

use ferrogate_core::usage::{cost_micro_usd, Record, STATUS_CLIENT_CLOSED};
use proxy_wasm::hostcalls;

use super::Stream;
use crate::metrics::Observation;

impl Stream {
    /// Reports the stream; `start_ns` is when `on_log` began, so the record-building time is
    /// counted in the filter's total.
    pub(super) fn report_with_overhead(&mut self, start_ns: u64) {
        // Requests that never named a model (401 at the door, model list) are not usage.
        if self.routed.is_none() && self.model_requested.is_empty() {
            return;
        }
        let record = self.record(start_ns);
        self.overhead_ns += self.now_nanos().saturating_sub(start_ns);
        let ttft_ms = record.ttft_ms;
        self.shared.metrics.borrow_mut().observe(&Observation {
            model: &record.model_requested,
            provider: &record.provider,
            status: record.status,
            tokens: (record.prompt_tokens + record.completion_tokens > 0)
                .then_some((record.prompt_tokens, record.completion_tokens)),
            latency_ms: record.latency_ms,
            ttft_ms,
            filter_us: self.overhead_ns / 1_000,
        });
        let Some(queue) = self.shared.usage_queue.get() else {
            return;
        };
        if let Err(e) = hostcalls::enqueue_shared_queue(queue, Some(record.to_json_line().trim_end().as_bytes())) {
            log::warn!("#{} usage record not queued: {e:?}", self.id);
        }
    }

    fn record(&mut self, now_ns: u64) -> Record {
        let usage = self.tracker.as_mut().and_then(|t| t.finish()).unwrap_or_default();
        let plugin = self.shared.plugin.clone();
        let config = plugin.as_ref().and_then(|p| p.config.as_ref());
        let key = config.and_then(|c| c.key(self.caller));
        let (provider, upstream_model) =
            self.routed.as_ref().map(|r| (r.provider.clone(), r.upstream_model.clone())).unwrap_or_default();
        let mut record = Record {
            request_id: self.request_id.clone().unwrap_or_default(),
            key: key.map(|k| k.name.clone()),
            groups: key
                .map(|k| k.groups.iter().filter_map(|g| config?.groups.get(*g)).map(|g| g.name.clone()).collect())
                .unwrap_or_default(),
            model_requested: self.model_requested.clone(),
            status: if self.response_complete { self.status } else { STATUS_CLIENT_CLOSED },
            latency_ms: now_ns.saturating_sub(self.started_ns) / 1_000_000,
            ttft_ms: self.first_byte_ns.map(|t| t.saturating_sub(self.started_ns) / 1_000_000),
            started_at_unix_ms: self.started_ns / 1_000_000,
            streamed: self.streamed,
            ..Record::default()
        };
        record.set_usage(&usage);
        if let Some(c) = config {
            record.cost_micro_usd = cost_micro_usd(&c.pricing, &provider, &upstream_model, &usage);
        }
        record.provider = provider;
        record.upstream_model = upstream_model;
        record
    }
}
