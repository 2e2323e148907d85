//! Test filter for the ferrogate proxy-wasm host: ONE module whose behaviour is chosen by
//! the plugin configuration (`{"scenario":"callout"}` …), so every ABI area of the host is
//! pinned by a real proxy-wasm 0.2.5 guest. Each scenario reports what it observed through
//! response headers, shared data or log lines, which the host's scenario tests assert on.
//!
//! Generic behaviour in every scenario:
//! * request header `x-trap: 1` panics in `on_request_headers`, `x-loop: 1` loops forever,
//!   `x-trap-phase: response-body` panics in `on_response_body` instead;
//! * `on_response_headers` adds `x-filter-saw-response: <:status>` (proves local replies
//!   pass through this filter's own encoder callbacks).

use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType, LogLevel, MetricType, Status};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Trace);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> { Box::new(Root::default()) });
}}

/// Parsed plugin configuration (a flat JSON object of string values).
#[derive(Default, Clone)]
struct Config {
    scenario: String,
    hold: bool,
    tick_ms: u64,
}

/// Returns the string value of `"key":"value"` in a flat JSON object (enough for tests).
fn json_str(text: &str, key: &str) -> Option<String> {
    let pat = format!("\"{key}\"");
    let at = text.find(&pat)? + pat.len();
    let rest = text[at..].trim_start().strip_prefix(':')?.trim_start();
    let rest = rest.strip_prefix('"')?;
    Some(rest[..rest.find('"')?].to_string())
}

#[derive(Default)]
struct Metrics {
    requests: u32,
    inflight: u32,
    latency: u32,
}

#[derive(Default)]
struct Root {
    config: Rc<Config>,
    metrics: Rc<RefCell<Metrics>>,
    queue: Option<u32>,
}

impl Context for Root {}

impl RootContext for Root {
    fn on_vm_start(&mut self, _size: usize) -> bool {
        // Every VM registers the same queue; the last registrant receives notifications.
        self.queue = Some(self.register_shared_queue("events"));
        // The vm configuration "reject" makes the plugin refuse to start.
        self.get_vm_configuration().as_deref() != Some(b"reject")
    }

    fn on_configure(&mut self, _size: usize) -> bool {
        let raw = self.get_plugin_configuration().unwrap_or_default();
        let text = String::from_utf8_lossy(&raw).to_string();
        let config = Config {
            scenario: json_str(&text, "scenario").unwrap_or_default(),
            hold: json_str(&text, "hold").as_deref() == Some("1"),
            tick_ms: json_str(&text, "tick_ms").and_then(|v| v.parse().ok()).unwrap_or(100),
        };
        if config.scenario == "reject" {
            return false;
        }
        if config.scenario == "tick" {
            self.set_tick_period(Duration::from_millis(config.tick_ms));
        }
        if config.scenario == "metrics" {
            let mut m = self.metrics.borrow_mut();
            m.requests = proxy_wasm::hostcalls::define_metric(MetricType::Counter, "ferrogate.requests_total").unwrap();
            m.inflight = proxy_wasm::hostcalls::define_metric(MetricType::Gauge, "ferrogate.inflight").unwrap();
            m.latency = proxy_wasm::hostcalls::define_metric(MetricType::Histogram, "ferrogate.latency_ms").unwrap();
        }
        self.config = Rc::new(config);
        true
    }

    fn on_tick(&mut self) {
        cas_increment("ticks");
    }

    fn on_queue_ready(&mut self, queue_id: u32) {
        while let Ok(Some(item)) = self.dequeue_shared_queue(queue_id) {
            let item = String::from_utf8_lossy(&item).to_string();
            log::info!("dequeued {item}");
            let (old, cas) = self.get_shared_data("dequeued");
            let mut all = old.unwrap_or_default();
            if !all.is_empty() {
                all.push(b',');
            }
            all.extend_from_slice(item.as_bytes());
            self.set_shared_data("dequeued", Some(&all), cas).unwrap();
        }
    }

    fn create_http_context(&self, context_id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Stream {
            id: context_id,
            config: self.config.clone(),
            metrics: self.metrics.clone(),
            ..Stream::default()
        }))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

/// Get-then-set with CAS, retrying on mismatch; returns (new value, mismatches seen).
fn cas_increment(key: &str) -> (u64, u32) {
    let mut mismatches = 0;
    loop {
        let (value, cas) = proxy_wasm::hostcalls::get_shared_data(key).unwrap();
        let next = parse_u64(value) + 1;
        match proxy_wasm::hostcalls::set_shared_data(key, Some(next.to_string().as_bytes()), cas) {
            Ok(()) => return (next, mismatches),
            Err(Status::CasMismatch) => mismatches += 1,
            Err(e) => panic!("set_shared_data: {e:?}"),
        }
    }
}

fn parse_u64(value: Option<Vec<u8>>) -> u64 {
    value.and_then(|v| String::from_utf8(v).ok()).and_then(|s| s.parse().ok()).unwrap_or(0)
}

#[derive(Default)]
struct Stream {
    id: u32,
    config: Rc<Config>,
    metrics: Rc<RefCell<Metrics>>,
    /// Response headers to add in on_response_headers (what this stream observed).
    report: Vec<(String, String)>,
    trap_phase: String,
    pending_call: Option<u32>,
    body_calls: u32,
    body_sizes: Vec<usize>,
    stashed_cas: Option<(u64, Option<u32>)>,
    counted: bool,
}

impl Context for Stream {
    fn on_http_call_response(&mut self, token: u32, num_headers: usize, body: usize, _t: usize) {
        if self.pending_call != Some(token) {
            panic!("unexpected token {token}");
        }
        self.pending_call = None;
        // With num_headers == 0 (reset) the callout maps do not exist: reading one is
        // BadArgument in Envoy, which the SDK turns into a panic.
        let status = if num_headers > 0 { self.get_http_call_response_header(":status") } else { None };
        let body = self.get_http_call_response_body(0, body).unwrap_or_default();
        self.report("x-body-calls-before-resume", self.body_calls.to_string());
        if num_headers > 0 && status.as_deref() == Some("200") {
            // Edit the held headers BEFORE resuming: resume nulls the map at once.
            self.add_http_request_header("x-auth", &String::from_utf8_lossy(&body));
            self.resume_http_request();
        } else {
            self.send_http_response(403, vec![("x-denied", "1")], Some(b"denied"));
        }
    }
}

impl Stream {
    fn report(&mut self, name: &str, value: String) {
        self.report.push((name.to_string(), value));
    }

    /// Generic trap / runaway triggers, checked before any scenario logic.
    fn maybe_trap(&mut self) {
        if self.get_http_request_header("x-trap").as_deref() == Some("1") {
            panic!("trap requested by x-trap");
        }
        if self.get_http_request_header("x-loop").as_deref() == Some("1") {
            loop {
                std::hint::black_box(());
            }
        }
        self.trap_phase = self.get_http_request_header("x-trap-phase").unwrap_or_default();
    }

    fn callout(&mut self) -> Action {
        let headers = vec![(":method", "GET"), (":path", "/check"), (":authority", "auth")];
        match self.dispatch_http_call("auth", headers, None, vec![], Duration::from_secs(1)) {
            Ok(token) => {
                self.pending_call = Some(token);
                Action::Pause
            }
            Err(status) => {
                self.report("x-callout-error", format!("{status:?}"));
                Action::Continue
            }
        }
    }

    fn properties(&mut self) {
        let text = |v: Option<Vec<u8>>| String::from_utf8_lossy(&v.unwrap_or_default()).to_string();
        let path = text(self.get_property(vec!["request", "path"]));
        let source = text(self.get_property(vec!["source", "address"]));
        let plugin = text(self.get_property(vec!["plugin_name"]));
        let header = text(self.get_property(vec!["request", "headers", "x-foo"]));
        self.set_property(vec!["my_prop"], Some(b"stored"));
        let readback = text(self.get_property(vec!["my_prop"]));
        self.report("x-prop-path", path);
        self.report("x-prop-source", source);
        self.report("x-prop-plugin", plugin);
        self.report("x-prop-header", header);
        self.report("x-prop-readback", readback);
    }

    fn metrics_request(&mut self) {
        let m = self.metrics.borrow();
        proxy_wasm::hostcalls::increment_metric(m.requests, 1).unwrap();
        proxy_wasm::hostcalls::increment_metric(m.inflight, 1).unwrap();
        let latency = self.get_http_request_header("x-latency").and_then(|v| v.parse().ok());
        proxy_wasm::hostcalls::record_metric(m.latency, latency.unwrap_or(7)).unwrap();
        let bad = proxy_wasm::hostcalls::increment_metric(m.requests, 0);
        drop(m);
        self.counted = true;
        self.report("x-counter-zero-increment", format!("{bad:?}"));
    }

    fn request_body_rewrite(&mut self, size: usize, eos: bool) -> Action {
        if !eos {
            return Action::Pause;
        }
        let body = self.get_http_request_body(0, size).unwrap_or_default();
        let new = format!("rewritten:{}", String::from_utf8_lossy(&body).to_uppercase());
        self.set_http_request_body(0, size, new.as_bytes());
        if self.config.hold {
            self.set_http_request_header("content-length", Some(&new.len().to_string()));
        }
        Action::Continue
    }
}

impl HttpContext for Stream {
    fn on_http_request_headers(&mut self, num_headers: usize, eos: bool) -> Action {
        self.maybe_trap();
        match self.config.scenario.as_str() {
            "callout" => return self.callout(),
            "local_reply" => {
                self.send_http_response(401, vec![("x-local", "1")], Some(b"nope"));
                // The host must ignore this Continue: a local reply forces a stop.
                return Action::Continue;
            }
            "body" if self.config.hold && !eos => return Action::Pause,
            "body" => self.set_http_request_header("content-length", None),
            "shared" => {
                let (value, cas) = proxy_wasm::hostcalls::get_shared_data("counter").unwrap();
                self.stashed_cas = Some((parse_u64(value), cas));
            }
            "queue" => {
                let queue = self.resolve_shared_queue("", "events").unwrap();
                let path = self.get_http_request_header(":path").unwrap_or_default();
                self.enqueue_shared_queue(queue, Some(path.as_bytes())).unwrap();
            }
            "metrics" => self.metrics_request(),
            "properties" => self.properties(),
            "lifetime" => self.report("x-pairs-in-headers", num_headers.to_string()),
            _ => {}
        }
        Action::Continue
    }

    fn on_http_request_body(&mut self, size: usize, eos: bool) -> Action {
        self.body_calls += 1;
        self.body_sizes.push(size);
        match self.config.scenario.as_str() {
            "callout" if self.pending_call.is_some() => Action::Pause,
            "body" => self.request_body_rewrite(size, eos),
            "shared" if eos => {
                self.shared_body();
                Action::Continue
            }
            "lifetime" => {
                let pairs = self.get_http_request_headers().len();
                self.report("x-pairs-after-continue", pairs.to_string());
                Action::Continue
            }
            _ => Action::Continue,
        }
    }

    fn on_http_response_headers(&mut self, _n: usize, eos: bool) -> Action {
        let status = self.get_http_response_header(":status").unwrap_or_default();
        self.add_http_response_header("x-filter-saw-response", &status);
        self.add_http_response_header("x-body-calls", &self.body_calls.to_string());
        let sizes: Vec<String> = self.body_sizes.iter().map(|s| s.to_string()).collect();
        self.add_http_response_header("x-body-sizes", &sizes.join(","));
        for (k, v) in std::mem::take(&mut self.report) {
            self.add_http_response_header(&k, &v);
        }
        if self.config.scenario == "properties" {
            let code = self.get_property(vec!["response", "code"]).unwrap_or_default();
            let code = <[u8; 8]>::try_from(code.as_slice()).map(i64::from_le_bytes).unwrap_or(-1);
            self.add_http_response_header("x-prop-response-code", &code.to_string());
        }
        if self.config.scenario == "lifetime" {
            let pairs = self.get_http_request_headers().len();
            self.add_http_response_header("x-request-pairs-in-response", &pairs.to_string());
        }
        if self.config.scenario == "body" && !eos {
            if self.config.hold {
                return Action::Pause;
            }
            // Headers leave now; the rewritten body will have another length.
            self.set_http_response_header("content-length", None);
        }
        Action::Continue
    }

    fn on_http_response_body(&mut self, size: usize, eos: bool) -> Action {
        if self.trap_phase == "response-body" {
            panic!("trap requested in on_response_body");
        }
        if self.config.scenario != "body" {
            return Action::Continue;
        }
        if !eos {
            return Action::Pause;
        }
        let body = self.get_http_response_body(0, size).unwrap_or_default();
        let new = format!("[{}]", String::from_utf8_lossy(&body));
        self.set_http_response_body(0, size, new.as_bytes());
        if self.config.hold {
            self.set_http_response_header("content-length", Some(&new.len().to_string()));
        }
        Action::Continue
    }

    fn on_log(&mut self) {
        if self.counted {
            let m = self.metrics.borrow();
            proxy_wasm::hostcalls::increment_metric(m.inflight, -1).unwrap();
        }
        log::info!("on_log {}", self.id);
    }
}

impl Stream {
    /// Second half of the "shared" scenario: set with the CAS read in on_request_headers,
    /// so two interleaved streams on different VMs produce a deterministic CAS mismatch.
    fn shared_body(&mut self) {
        let Some((value, cas)) = self.stashed_cas.take() else {
            return;
        };
        let first = proxy_wasm::hostcalls::set_shared_data("counter", Some((value + 1).to_string().as_bytes()), cas);
        let (final_value, mut mismatches) = match first {
            Ok(()) => (value + 1, 0),
            Err(Status::CasMismatch) => cas_increment("counter"),
            Err(e) => panic!("set_shared_data: {e:?}"),
        };
        if first.is_err() {
            mismatches += 1;
        }
        self.report("x-cas-mismatch", mismatches.to_string());
        self.report("x-counter", final_value.to_string());
    }
}
