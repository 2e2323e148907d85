//! ferrogate-filter: the proxy-wasm HTTP filter (Envoy, Istio, `ferrogate serve`).
//!
//! Thin glue only: [`root`] parses the plugin configuration into `ferrogate_core` types and
//! [`http`] turns each stream's callbacks into calls to `ferrogate_core::route`, applying the
//! decision with hostcalls. Body-based routing needs the host to deliver body callbacks while
//! request headers are held (Envoy ≥ 1.35 `allow_on_headers_stop_iteration: true`).

mod flow_gate;
mod flow_wake;
mod http;
mod inflight;
mod kv_feed;
mod leases;
mod limits;
mod limits_feed;
mod metrics;
mod prefix_table;
mod raw;
mod root;
mod routing;
mod sidecar_call;
mod snapshot_feed;
mod targets_age;
mod targets_feed;
mod usage_sink;

/// The module entry point: `_initialize` registers the root context factory.
#[allow(missing_docs)] // the macro's generated `_initialize` cannot carry a doc comment
mod entry {
    proxy_wasm::main! {{
        proxy_wasm::set_log_level(proxy_wasm::types::LogLevel::Info);
        proxy_wasm::set_root_context(|id| -> Box<dyn proxy_wasm::traits::RootContext> {
            Box::new(crate::root::Root::new(id))
        });
    }}
}
