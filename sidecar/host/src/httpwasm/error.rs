//! Errors of the http-wasm host: why a middleware could not be built.

/// Why [`Middleware::new`](super::Middleware::new) failed. The messages follow host-go's
/// (`wasm: error compiling guest: …`, `wasm: guest doesn't export func[handle_request]`, …).
#[derive(Debug, thiserror::Error)]
pub enum HttpWasmError {
    /// The module does not compile, or the engine cannot be configured.
    #[error("wasm: error compiling guest: {0}")]
    Compile(String),
    /// A required export is missing or has the wrong signature.
    #[error("wasm: {0}")]
    Exports(String),
    /// The module's imports cannot be satisfied (an unknown host function, say).
    #[error("wasm: error instantiating host: {0}")]
    Link(String),
    /// A `mounts` entry is malformed or names a directory that cannot be opened.
    #[error("invalid directory {mount:?}: {reason}")]
    Mount {
        /// The entry as given.
        mount: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Instantiation failed: a start function trapped or exited with a non-zero code.
    #[error("wasm: error instantiating guest: {0}")]
    Instantiate(String),
}
