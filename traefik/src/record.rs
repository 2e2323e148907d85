//! Usage records of this guest: one per request that named a model, forwarded or refused (a
//! 401 at the door or the model list is not usage), appended to `usageFile` when set, with
//! what guardrails did when a policy applied.

use ferrogate_core::config::Config;
use ferrogate_core::usage::{RecordView, Usage};

use crate::request::Request;

/// The names a record carries; the provider's are empty for a request refused before routing.
#[derive(Default)]
pub(crate) struct Names<'a> {
    pub(crate) requested: &'a str,
    pub(crate) provider: &'a str,
    pub(crate) upstream: &'a str,
}

/// What came of the request.
#[derive(Default)]
pub(crate) struct Outcome {
    /// The status the client got (0: a stream the guest did not see).
    pub(crate) status: u16,
    pub(crate) usage: Usage,
    pub(crate) cost_micro_usd: Option<u64>,
    /// When the answer's first byte was seen, ns.
    pub(crate) first_byte_ns: Option<u64>,
    pub(crate) streamed: bool,
    /// The request held a reservation on its limits.
    pub(crate) admitted: bool,
}

/// Appends the record of `req` to `path`, when there is one and the request named a model.
pub(crate) fn write(path: Option<&str>, config: &Config, req: &Request, names: &Names<'_>, outcome: &Outcome) {
    let Some(path) = path.filter(|_| !names.requested.is_empty() || !names.provider.is_empty()) else { return };
    let key = config.key(req.caller);
    let now_ns = crate::guest::now_ns();
    let mut record = RecordView {
        request_id: &req.id,
        key: key.map(|k| k.name.as_str()),
        groups: key.map(|k| k.group_names.as_slice()).unwrap_or_default(),
        model_requested: names.requested,
        provider: names.provider,
        upstream_model: names.upstream,
        status: outcome.status,
        latency_ms: now_ns.saturating_sub(req.started_ns) / 1_000_000,
        ttft_ms: outcome.first_byte_ns.map(|t| t.saturating_sub(req.started_ns) / 1_000_000),
        started_at_unix_ms: req.started_ns / 1_000_000,
        streamed: outcome.streamed,
        admitted: outcome.admitted,
        user_agent: req.user_agent.as_deref(),
        ..RecordView::default()
    };
    record.set_usage(&outcome.usage);
    record.cost_micro_usd = outcome.cost_micro_usd;
    let guardrails = req.guard.as_ref().map(|g| g.record(&config.guardrails));
    record.guardrails = guardrails.as_ref();
    crate::usage_file::append(path, &record);
}
