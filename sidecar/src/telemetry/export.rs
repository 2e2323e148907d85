//! The OTLP/HTTP trace pipeline built from the standard `OTEL_*` environment variables, and
//! an exporter wrapper that turns export failures into a single warning per outage.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::{Key, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use opentelemetry_sdk::{runtime, Resource};

/// `service.name` when neither `OTEL_SERVICE_NAME` nor `OTEL_RESOURCE_ATTRIBUTES` sets one.
const SERVICE_NAME: &str = "ferrogate";

/// A started pipeline.
pub(super) struct Pipeline {
    pub provider: SdkTracerProvider,
    /// Where spans go, as configured (for the start-up log line).
    pub endpoint: String,
}

/// The pipeline the environment asks for: `Ok(None)` when no endpoint is set (or the SDK is
/// disabled), `Err` with the reason when the settings cannot work.
pub(super) fn from_env(failing: &Arc<AtomicBool>) -> Result<Option<Pipeline>, String> {
    if env("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
        || env("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none"))
    {
        return Ok(None);
    }
    let Some((var, endpoint)) = endpoint_setting() else { return Ok(None) };
    check_endpoint(var, &endpoint)?;
    check_protocol()?;
    if tokio::runtime::Handle::try_current().is_err() {
        return Err("no async runtime to run the exporter on".into());
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .build()
        .map_err(|e| format!("cannot build the OTLP exporter: {e}"))?;
    let exporter = WarnOnce { inner: exporter, endpoint: endpoint.clone(), failing: failing.clone() };
    // Reads OTEL_BSP_SCHEDULE_DELAY, OTEL_BSP_MAX_QUEUE_SIZE, ...; a full queue drops spans.
    let processor = BatchSpanProcessor::builder(exporter, runtime::Tokio).build();
    let provider = SdkTracerProvider::builder().with_span_processor(processor).with_resource(resource()).build();
    Ok(Some(Pipeline { provider, endpoint }))
}

/// The signal-specific endpoint wins over the general one, as the OTLP exporter spec says.
fn endpoint_setting() -> Option<(&'static str, String)> {
    ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"]
        .into_iter()
        .find_map(|var| env(var).map(|v| (var, v)))
}

/// The exporter quietly falls back to `localhost:4318` on an endpoint it cannot parse; say so
/// instead.
fn check_endpoint(var: &str, endpoint: &str) -> Result<(), String> {
    let uri: http::Uri = endpoint.parse().map_err(|e| format!("{var}={endpoint:?} is not a URL: {e}"))?;
    match (uri.scheme_str(), uri.authority()) {
        (Some("http" | "https"), Some(_)) => Ok(()),
        _ => Err(format!("{var}={endpoint:?} is not an http:// or https:// URL")),
    }
}

/// OTLP over HTTP with protobuf bodies is the only protocol built in (the spec's default).
fn check_protocol() -> Result<(), String> {
    let var = ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"]
        .into_iter()
        .find_map(|var| env(var).map(|v| (var, v)));
    match var {
        None => Ok(()),
        Some((_, v)) if v == "http/protobuf" => Ok(()),
        Some((var, v)) => Err(format!(
            "{var}={v:?} is not supported: ferrogate exports OTLP as http/protobuf (a collector's port 4318)"
        )),
    }
}

/// The SDK's resource (`OTEL_RESOURCE_ATTRIBUTES`, `OTEL_SERVICE_NAME`, SDK attributes), named
/// `ferrogate` when nothing names it, with the binary's version.
fn resource() -> Resource {
    let detected = Resource::builder().build();
    let service = Key::from_static_str("service.name");
    let unnamed = detected.get(&service).is_none_or(|v| v.as_str() == "unknown_service");
    let mut builder = Resource::builder();
    if unnamed {
        builder = builder.with_service_name(SERVICE_NAME);
    }
    if detected.get(&Key::from_static_str("service.version")).is_none() {
        builder = builder.with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
    }
    builder.build()
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Logs the first failed export of an outage as one warning (and its end as one info line);
/// the batch processor drops the batch either way.
#[derive(Debug)]
struct WarnOnce<E> {
    inner: E,
    endpoint: String,
    failing: Arc<AtomicBool>,
}

impl<E: SpanExporter> SpanExporter for WarnOnce<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len();
        let result = self.inner.export(batch).await;
        match &result {
            Err(e) if !self.failing.swap(true, Ordering::Relaxed) => tracing::warn!(
                endpoint = %self.endpoint,
                error = %e,
                spans,
                "trace export failed; spans are dropped until the collector answers (logged once)"
            ),
            Ok(()) if self.failing.swap(false, Ordering::Relaxed) => {
                tracing::info!(endpoint = %self.endpoint, "trace export recovered");
            }
            _ => {}
        }
        result
    }

    fn shutdown_with_timeout(&mut self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn shutdown(&mut self) -> OTelSdkResult {
        self.inner.shutdown()
    }

    fn force_flush(&mut self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_must_be_http_urls() {
        assert!(check_endpoint("E", "http://127.0.0.1:4318").is_ok());
        assert!(check_endpoint("E", "https://collector.example:443/otlp").is_ok());
        assert!(check_endpoint("E", "127.0.0.1:4318").is_err());
        assert!(check_endpoint("E", "grpc://x:4317").is_err());
        assert!(check_endpoint("E", "not a url").is_err());
    }
}
