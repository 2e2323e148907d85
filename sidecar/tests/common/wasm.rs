//! Where the integration tests find the filter wasm.

use std::path::PathBuf;

/// `FERROGATE_FILTER_WASM`, else the workspace's release build (built first if missing).
pub fn filter_wasm() -> PathBuf {
    ferrogate_host::dev::workspace_wasm("ferrogate_filter.wasm", "FERROGATE_FILTER_WASM")
}
