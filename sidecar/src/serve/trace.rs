//! The data path's span: one `ferrogate.request` server span per proxied request, from the
//! request head to the end of the response, when traces are exported.
//!
//! Attributes: `http.request.method`, `url.path`, `network.protocol.version`,
//! `http.response.status_code`, and the filter's answer headers `x-ferrogate-model`,
//! `x-ferrogate-provider` and `x-request-id` as `http.response.header.<name>`. A client's
//! `traceparent` makes the span part of its trace, and the upstream request carries this
//! span's `traceparent`, as Envoy's router does with tracing on.
//!
//! With no OTLP endpoint, [`request_span`] returns a disabled span after one relaxed load and
//! every other function returns at once: no allocation, no header lookup.

use ferrogate_core::headers::{MODEL, PROVIDER, REQUEST_ID};
use ferrogate_host::Headers;
use tracing::field::Empty;
use tracing::Span;

use crate::telemetry::{self, http::record_status, TARGET};

/// The span for a request with head `parts` (disabled unless traces are exported).
pub fn request_span(parts: &http::request::Parts) -> Span {
    if !telemetry::exporting() {
        return Span::none();
    }
    let version = match parts.version {
        http::Version::HTTP_2 => "2",
        http::Version::HTTP_10 => "1.0",
        _ => "1.1",
    };
    let span = tracing::info_span!(
        target: TARGET,
        "ferrogate.request",
        otel.kind = "server",
        otel.status_code = Empty,
        otel.status_description = Empty,
        http.request.method = parts.method.as_str(),
        url.path = parts.uri.path(),
        network.protocol.version = version,
        http.response.status_code = Empty,
        "http.response.header.x-ferrogate-model" = Empty,
        "http.response.header.x-ferrogate-provider" = Empty,
        "http.response.header.x-request-id" = Empty,
        "gen_ai.operation.name" = Empty,
        "gen_ai.provider.name" = Empty,
        "gen_ai.request.model" = Empty,
        "gen_ai.response.model" = Empty,
        "gen_ai.request.max_tokens" = Empty,
        "gen_ai.usage.input_tokens" = Empty,
        "gen_ai.usage.output_tokens" = Empty,
        "gen_ai.usage.cache_read.input_tokens" = Empty,
        "ferrogate.provider" = Empty,
        "ferrogate.time_to_first_token" = Empty,
    );
    telemetry::http::set_parent(&span, &parts.headers);
    span
}

/// Records the response head the filter chain released (status and the filter's headers).
pub fn record_head(span: &Span, headers: &Headers) {
    if span.is_disabled() {
        return;
    }
    record_status(span, super::headers::status_of(headers));
    let fields = [
        (MODEL, "http.response.header.x-ferrogate-model"),
        (PROVIDER, "http.response.header.x-ferrogate-provider"),
        (REQUEST_ID, "http.response.header.x-request-id"),
    ];
    for (header, field) in fields {
        if let Some(value) = headers.get_str(header) {
            span.record(field, value);
        }
    }
}

/// The GenAI attribute names the filter may hand over (`ferrogate_core::gen_ai`), declared on
/// the span up front (a `tracing` span records only fields it was created with).
const GEN_AI_FIELDS: [&str; 10] = [
    "gen_ai.operation.name",
    "gen_ai.provider.name",
    "gen_ai.request.model",
    "gen_ai.response.model",
    "gen_ai.request.max_tokens",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "gen_ai.usage.cache_read.input_tokens",
    "ferrogate.provider",
    "ferrogate.time_to_first_token",
];

/// Records the GenAI attributes the filter left in filter state at the end of the stream.
pub fn record_gen_ai(span: &Span, filter_state: &std::collections::HashMap<Vec<u8>, Vec<u8>>) {
    if span.is_disabled() {
        return;
    }
    let Some(json) = filter_state.get(ferrogate_core::gen_ai::FILTER_STATE_KEY.as_bytes()) else { return };
    let Ok(serde_json::Value::Object(map)) = serde_json::from_slice(json) else { return };
    for field in GEN_AI_FIELDS {
        match map.get(field) {
            Some(serde_json::Value::String(v)) => span.record(field, v.as_str()),
            Some(serde_json::Value::Number(n)) if n.is_u64() => span.record(field, n.as_u64().unwrap_or(0) as i64),
            Some(serde_json::Value::Number(n)) => span.record(field, n.as_f64().unwrap_or(0.0)),
            _ => span,
        };
    }
    // A list: OpenTelemetry's string array, which `tracing` fields cannot carry.
    if let Some(serde_json::Value::Array(reasons)) = map.get("gen_ai.response.finish_reasons") {
        use tracing_opentelemetry::OpenTelemetrySpanExt;
        let values = reasons.iter().filter_map(|r| r.as_str().map(|s| s.to_string().into())).collect();
        let array = opentelemetry::Value::Array(opentelemetry::Array::String(values));
        span.set_attribute("gen_ai.response.finish_reasons", array);
    }
}

/// Marks the span failed: the stream was reset before the response completed.
pub fn record_reset(span: &Span) {
    if span.is_disabled() {
        return;
    }
    span.record("otel.status_code", "ERROR");
    span.record("otel.status_description", "stream reset");
}

/// Sets the upstream request's `traceparent` (and `tracestate`) to this span's context.
pub fn inject(span: &Span, headers: &mut Headers) {
    if span.is_disabled() {
        return;
    }
    telemetry::http::inject(span, &mut |name, value| headers.set(name, value));
}
