//! Logs and traces of the `ferrogate` process: the one place the global `tracing` subscriber
//! is installed.
//!
//! Logs go to stderr as before (`FERROGATE_LOG`, an `EnvFilter` expression, default `info`).
//! When `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, spans
//! are also exported over OTLP/HTTP (protobuf) with the standard `OTEL_*` variables: a batch
//! span processor on the tokio runtime, `service.name` `ferrogate` unless `OTEL_SERVICE_NAME`
//! or `OTEL_RESOURCE_ATTRIBUTES` name it, `OTEL_BSP_*`, `OTEL_TRACES_SAMPLER`,
//! `OTEL_EXPORTER_OTLP_HEADERS` and `..._TIMEOUT` as the SDK reads them.
//!
//! Only spans with the [`TARGET`] target are exported (the HTTP services' spans in [`http`],
//! the data path's `ferrogate.request` in `serve`), plus warnings and errors logged inside
//! them as span events; they never reach the log. Without an endpoint no such span is made at
//! all ([`exporting`] is one relaxed load), so the data path pays nothing. A collector that is
//! down or wrong never stops the gateway: spans are dropped and one warning is logged.

mod export;
pub mod http;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::level_filters::LevelFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// Target of every span meant for export (kept out of the stderr log).
pub const TARGET: &str = "ferrogate::otel";

/// How long exit waits for the last spans to leave.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(3);

static EXPORTING: AtomicBool = AtomicBool::new(false);

/// Whether spans are exported: when false, make no span (the data path checks this first).
#[inline]
pub fn exporting() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

/// The installed trace pipeline, to be flushed when the process ends.
#[must_use = "call shutdown() at exit so the last spans are exported"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
    failing: Arc<AtomicBool>,
}

/// Installs the global subscriber: the stderr log and, when `traces` is true and an OTLP
/// endpoint is configured, trace export. Export needs a tokio runtime: call this inside one
/// (`Runtime::enter`); without one, traces are off and a warning says so.
pub fn init(traces: bool) -> Telemetry {
    let failing = Arc::new(AtomicBool::new(false));
    let pipeline = if traces { export::from_env(&failing) } else { Ok(None) };
    let provider = pipeline.as_ref().ok().and_then(|p| p.as_ref().map(|p| p.provider.clone()));
    let otel = provider.as_ref().map(|p| {
        tracing_opentelemetry::layer()
            .with_tracer(p.tracer("ferrogate"))
            .with_tracked_inactivity(false)
            .with_location(false)
            .with_target(false)
            // Our spans are INFO and their events WARN or above: the hint keeps every more
            // verbose callsite (and `log` record) as cheap as the log filter alone makes it.
            .with_filter(tracing_subscriber::filter::filter_fn(exported).with_max_level_hint(LevelFilter::INFO))
    });
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let log = tracing_subscriber::fmt::layer().with_ansi(ansi).with_writer(std::io::stderr).with_filter(log_filter());
    if let Err(e) = tracing_subscriber::registry().with(log).with(otel).try_init() {
        eprintln!("ferrogate: cannot install the log subscriber: {e}");
    }
    match pipeline {
        Ok(Some(p)) => {
            EXPORTING.store(true, Ordering::Relaxed);
            tracing::info!(endpoint = %p.endpoint, "exporting traces over OTLP/HTTP");
        }
        Ok(None) => {}
        Err(e) => tracing::warn!("trace export disabled: {e}"),
    }
    Telemetry { provider, failing }
}

/// Targets that stay at `warn` unless `FERROGATE_LOG` names them: the module compiler's (at
/// `debug` they are most of the log, and only someone debugging wasmtime wants them) and the
/// PostgreSQL driver's (at `debug` it logs every statement's parameters: password hashes,
/// session CSRF tokens, sealed keys).
const QUIET_TARGETS: [&str; 4] = ["cranelift", "wasmtime", "regalloc2", "tokio_postgres"];

/// `FERROGATE_LOG` (default `info`), never showing the exported spans.
fn log_filter() -> EnvFilter {
    filter_from(std::env::var("FERROGATE_LOG").ok().as_deref())
}

fn filter_from(spec: Option<&str>) -> EnvFilter {
    let spec = spec.filter(|s| !s.trim().is_empty()).unwrap_or("info");
    let mut filter = EnvFilter::try_new(spec).unwrap_or_else(|e| {
        eprintln!("ferrogate: FERROGATE_LOG={spec:?} is not a log filter ({e}); using info");
        EnvFilter::new("info")
    });
    let quiet = QUIET_TARGETS.iter().filter(|t| !spec.contains(*t)).map(|t| format!("{t}=warn"));
    for directive in quiet.chain([format!("{TARGET}=off")]) {
        if let Ok(d) = directive.parse() {
            filter = filter.add_directive(d);
        }
    }
    filter
}

/// What the OTLP layer sees: our spans, and warnings or errors (as events of those spans).
fn exported(meta: &tracing::Metadata<'_>) -> bool {
    meta.target() == TARGET || (meta.is_event() && *meta.level() <= tracing::Level::WARN)
}

impl Telemetry {
    /// Exports the spans still queued, waiting at most a few seconds (a collector that does not
    /// answer must not hold the exit up). Call it while the tokio runtime is still alive: the
    /// batch processor runs on it.
    pub fn shutdown(self) {
        let Some(provider) = self.provider else { return };
        EXPORTING.store(false, Ordering::Relaxed);
        let (tx, rx) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new().name("otel-shutdown".into()).spawn(move || {
            let _ = tx.send(provider.shutdown());
        });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot flush the trace export at exit");
            return;
        }
        let already_warned = self.failing.load(Ordering::Relaxed);
        match rx.recv_timeout(SHUTDOWN_WAIT) {
            Ok(Ok(())) => tracing::debug!("trace export flushed"),
            // A failed export has already been logged once by the exporter.
            Ok(Err(e)) => tracing::debug!(error = %e, "trace export at exit failed"),
            Err(_) if already_warned => {}
            Err(_) => tracing::warn!("trace export did not finish within {SHUTDOWN_WAIT:?} at exit; spans dropped"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compiler_stays_quiet_unless_named() {
        let shown = filter_from(Some("debug")).to_string();
        assert!(shown.contains("cranelift=warn") && shown.contains("wasmtime=warn"), "{shown}");
        let named = filter_from(Some("debug,wasmtime=trace")).to_string();
        assert!(named.contains("wasmtime=trace") && !named.contains("wasmtime=warn"), "{named}");
        assert!(filter_from(None).to_string().contains("info"));
    }
}
