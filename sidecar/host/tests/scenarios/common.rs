//! Helpers shared by the scenario tests: locating the test filter, building specs,
//! requests and picking things out of event lists.

use ferrogate_host::{Headers, PluginSpec, Runtime, StreamEvent, StreamInfo, Vm};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// The test filter: `FERROGATE_TESTFILTER_WASM`, else the workspace's release wasm target
/// (built first if missing).
pub fn wasm() -> &'static [u8] {
    static WASM: OnceLock<Vec<u8>> = OnceLock::new();
    WASM.get_or_init(|| {
        let path = ferrogate_host::dev::workspace_wasm("ferrogate_testfilter.wasm", "FERROGATE_TESTFILTER_WASM");
        std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read test filter {}: {e}", path.display()))
    })
}

/// A spec for `scenario` with extra flat JSON fields (e.g. `,"hold":"1"`).
pub fn spec(scenario: &str, extra: &str) -> PluginSpec {
    PluginSpec {
        name: "testfilter".into(),
        root_id: "root".into(),
        vm_id: "vm".into(),
        configuration: format!(r#"{{"scenario":"{scenario}"{extra}}}"#).into_bytes(),
        ..PluginSpec::default()
    }
}

pub fn runtime(spec: PluginSpec) -> Runtime {
    Runtime::new(wasm(), spec).expect("runtime")
}

pub fn vm(spec: PluginSpec) -> (Runtime, Vm) {
    let rt = runtime(spec);
    let vm = rt.new_vm(0).expect("vm");
    (rt, vm)
}

/// Request headers with Envoy's pseudo-headers plus `extra`.
pub fn req(method: &str, path: &str, extra: &[(&str, &str)]) -> Headers {
    let mut h =
        Headers::from_pairs([(":method", method), (":path", path), (":authority", "example.com"), (":scheme", "http")]);
    for (k, v) in extra {
        h.add(k, v.as_bytes());
    }
    h
}

pub fn resp(status: &str, extra: &[(&str, &str)]) -> Headers {
    let mut h = Headers::from_pairs([(":status", status)]);
    for (k, v) in extra {
        h.add(k, v.as_bytes());
    }
    h
}

/// The per-stream wake callback `create_stream` takes.
pub type Wake = Option<Box<dyn Fn() + Send>>;

/// A wake callback and the counter it bumps.
pub fn waker() -> (Arc<AtomicUsize>, Wake) {
    let count = Arc::new(AtomicUsize::new(0));
    let c = count.clone();
    (
        count,
        Some(Box::new(move || {
            c.fetch_add(1, Ordering::SeqCst);
        })),
    )
}

pub fn count(c: &AtomicUsize) -> usize {
    c.load(Ordering::SeqCst)
}

pub fn new_stream(vm: &mut Vm) -> u32 {
    vm.create_stream(StreamInfo::default(), None)
}

/// The first ResponseHeaders in `events`.
pub fn response_headers(events: &[StreamEvent]) -> &Headers {
    events
        .iter()
        .find_map(|e| match e {
            StreamEvent::ResponseHeaders { headers, .. } => Some(headers),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no response headers in {events:?}"))
}

/// Value of response header `name` as a string ("" if absent).
pub fn header(h: &Headers, name: &str) -> String {
    h.get_str(name).unwrap_or_default().to_string()
}

/// Runs a complete GET with a 200 response and returns all events.
pub fn roundtrip(vm: &mut Vm, s: u32, request: Headers) -> Vec<StreamEvent> {
    vm.request_headers(s, request, true).unwrap();
    let mut events = vm.take_events(s);
    vm.response_headers(s, resp("200", &[]), true).unwrap();
    events.extend(vm.take_events(s));
    events
}

/// All request body bytes released upstream in `events`, concatenated.
pub fn request_body(events: &[StreamEvent]) -> Vec<u8> {
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::RequestData { data, .. } => Some(data.as_slice()),
            _ => None,
        })
        .flatten()
        .copied()
        .collect()
}

/// All response body bytes sent to the client in `events`, concatenated.
pub fn response_body(events: &[StreamEvent]) -> Vec<u8> {
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ResponseData { data, .. } => Some(data.as_slice()),
            _ => None,
        })
        .flatten()
        .copied()
        .collect()
}
