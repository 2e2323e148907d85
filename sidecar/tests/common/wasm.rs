//! Where the integration tests find the filter wasm, and one filter VM loaded from it.
#![allow(dead_code)]

use std::path::PathBuf;

use ferrogate_host::{PluginSpec, Runtime, Vm};

/// `FERROGATE_FILTER_WASM`, else the workspace's release build (built first if missing).
pub fn filter_wasm() -> PathBuf {
    ferrogate_host::dev::workspace_wasm("ferrogate_filter.wasm", "FERROGATE_FILTER_WASM")
}

/// The filter in a runtime of its own with plugin configuration `plugin` (JSON), and its first
/// VM, as Envoy configures it (`allow_on_headers_stop_iteration`).
pub fn filter_vm(plugin: String) -> (Runtime, Vm) {
    let spec = PluginSpec {
        name: "ferrogate".into(),
        root_id: "ferrogate".into(),
        vm_id: "ferrogate".into(),
        configuration: plugin.into_bytes(),
        allow_on_headers_stop_iteration: true,
        ..PluginSpec::default()
    };
    let wasm = std::fs::read(filter_wasm()).unwrap();
    let rt = Runtime::new(&wasm, spec).expect("runtime");
    let vm = rt.new_vm(0).expect("vm");
    (rt, vm)
}
