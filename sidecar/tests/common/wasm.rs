//! Where the integration tests find the filter wasm.

use std::path::{Path, PathBuf};

/// `FERROGATE_FILTER_WASM`, else the workspace's release build; it must exist.
pub fn filter_wasm() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let path = std::env::var_os("FERROGATE_FILTER_WASM")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target/wasm32-unknown-unknown/release/ferrogate_filter.wasm"));
    assert!(
        path.is_file(),
        "{} missing: build it with `cargo build --release --target wasm32-unknown-unknown -p ferrogate-filter` (or `make wasm`)",
        path.display()
    );
    path
}
