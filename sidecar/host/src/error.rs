//! Errors of the host itself. Guest traps during streams are not errors of the caller's
//! call: they become local replies / resets on the affected streams.

/// Errors of the host itself (not guest traps during streams, which become local replies).
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// Compile/link/instantiate failure.
    #[error("wasm module: {0}")]
    Module(String),
    /// `on_vm_start` or `on_configure` returned false.
    #[error("plugin rejected its configuration (on_vm_start/on_configure returned false)")]
    ConfigRejected,
    /// The guest trapped (panic, unreachable, deadline, out of memory).
    #[error("guest trapped: {0}")]
    Trap(String),
    /// The VM trapped earlier; build a new one.
    #[error("vm has failed and serves no more streams")]
    VmFailed,
    /// No such stream in this VM.
    #[error("unknown stream {0}")]
    UnknownStream(u32),
}
