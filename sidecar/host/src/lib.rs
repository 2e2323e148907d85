//! ferrogate-host: an embedded proxy-wasm (ABI 0.2.1) host on wasmtime that behaves like
//! Envoy's wasm HTTP filter, so tests and `ferrogate serve` can run the ferrogate filter
//! without Envoy. Sans-IO: the caller feeds stream inputs, performs callouts and ticks,
//! and forwards the [`StreamEvent`]s the filter chain lets through.
//!
//! Layout: [`Runtime`] (compiled module, process-wide shared data/queues/metrics, epoch
//! ticker) → [`Vm`] (one instance, like one Envoy worker) → streams (Envoy's filter-manager
//! state machine in `stream`). The ABI imports live in `abi`, one file per spec section.

mod abi;
mod codec;
pub mod dev;
mod error;
mod headers;
pub mod httpwasm;
mod metrics;
mod reply;
mod runtime;
mod shared;
mod state;
mod stream;
mod types;
mod vm;

pub use error::HostError;
pub use headers::Headers;
pub use metrics::{
    escape_label, render_series, Family as MetricFamily, Kind as MetricKind, Series as MetricSeries, SeriesValue,
    TagSpecifier,
};
pub use runtime::Runtime;
pub use shared::Shared;
pub use types::{HttpCallRequest, HttpCallResponse, LogLevel, PluginSpec, StreamEvent, StreamId, StreamInfo};
pub use vm::Vm;

#[cfg(test)]
mod tests {
    /// `serve` moves VMs to worker threads and shares the Runtime between them.
    #[test]
    fn thread_bounds() {
        fn send<T: Send>() {}
        fn send_sync<T: Send + Sync>() {}
        send::<crate::Vm>();
        send_sync::<crate::Runtime>();
        send_sync::<crate::Shared>();
    }
}
