//! Spans for the sidecar's HTTP services (the filter-facing and admin APIs), and the W3C
//! trace-context propagation the data path shares.
//!
//! One server span per request, named `{method} {route}` and carrying the OpenTelemetry HTTP
//! semantic-convention attributes `http.request.method`, `url.path`, `http.route` and
//! `http.response.status_code` (5xx marks the span as an error). An incoming `traceparent`
//! makes it part of the caller's trace. Probes and scrapes (`/healthz`, `/readyz`,
//! `/metrics`) are not traced.

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use axum::Router;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::field::Empty;
use tracing::{Instrument, Span};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::{exporting, TARGET};

/// Paths polled by probes and scrapers: a span each would only be noise.
const UNTRACED: [&str; 3] = ["/healthz", "/readyz", "/metrics"];

/// `router` with a span per request when traces are exported; unchanged otherwise, so a
/// process without an OTLP endpoint pays nothing.
pub fn traced(router: Router) -> Router {
    if exporting() {
        router.layer(axum::middleware::from_fn(trace_request))
    } else {
        router
    }
}

async fn trace_request(req: Request, next: Next) -> Response {
    if UNTRACED.contains(&req.uri().path()) {
        return next.run(req).await;
    }
    let span = server_span(&req);
    let response = next.run(req).instrument(span.clone()).await;
    record_status(&span, response.status());
    response
}

fn server_span(req: &Request) -> Span {
    let method = req.method().as_str();
    let route = req.extensions().get::<MatchedPath>().map(MatchedPath::as_str);
    // Semantic conventions: "{method} {route}", or the method alone when no route matched.
    let name = match route {
        Some(route) => format!("{method} {route}"),
        None => method.to_string(),
    };
    let span = tracing::info_span!(
        target: TARGET,
        "http.server",
        otel.name = name.as_str(),
        otel.kind = "server",
        otel.status_code = Empty,
        http.request.method = method,
        url.path = req.uri().path(),
        http.route = route,
        http.response.status_code = Empty,
    );
    set_parent(&span, req.headers());
    span
}

/// Records the response status on `span`; a 5xx marks it as an error (server spans leave 4xx
/// unset, the client's mistake).
pub fn record_status(span: &Span, status: http::StatusCode) {
    // As i64: the OpenTelemetry layer records unsigned values as strings.
    span.record("http.response.status_code", i64::from(status.as_u16()));
    if status.is_server_error() {
        span.record("otel.status_code", "ERROR");
    }
}

/// Makes `span` a child of the caller's span when `headers` carry a valid `traceparent`
/// (W3C Trace Context); call it before the span is first entered.
pub fn set_parent(span: &Span, headers: &http::HeaderMap) {
    if !headers.contains_key("traceparent") {
        return;
    }
    let parent = TraceContextPropagator::new().extract(&HeaderExtractor(headers));
    // Fails only for a disabled span or one already started: nothing to do then.
    let _ = span.set_parent(parent);
}

/// Writes `span`'s context as `traceparent` (and a non-empty `tracestate`) through `set`, for
/// a request this process makes on the span's behalf.
pub fn inject(span: &Span, set: &mut dyn FnMut(&str, String)) {
    TraceContextPropagator::new().inject_context(&span.context(), &mut FnInjector(set));
}

struct HeaderExtractor<'a>(&'a http::HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

struct FnInjector<'a>(&'a mut dyn FnMut(&str, String));

impl Injector for FnInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if !value.is_empty() {
            (self.0)(key, value);
        }
    }
}
