//! The proxy-wasm ABI 0.2.1 imports (module `env`), one file per spec section. Each import
//! is a small closure that bounds-checks guest pointers and delegates to typed helpers;
//! every import returns a `proxy_status_t`. Imports the module names but we do not know
//! become traps (`define_unknown_imports_as_traps`).

mod buffers;
mod headers;
mod http_call;
mod log;
pub(crate) mod memory;
mod metrics;
mod properties;
mod queue;
mod shared_data;
mod stream;
mod stubs;
mod timer;

use crate::state::{HostState, Status};
use wasmtime::Linker;

/// Registers every import this host implements.
pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    memory::add_to_linker(linker)?;
    log::add_to_linker(linker)?;
    buffers::add_to_linker(linker)?;
    headers::add_to_linker(linker)?;
    stream::add_to_linker(linker)?;
    http_call::add_to_linker(linker)?;
    shared_data::add_to_linker(linker)?;
    queue::add_to_linker(linker)?;
    timer::add_to_linker(linker)?;
    metrics::add_to_linker(linker)?;
    properties::add_to_linker(linker)?;
    stubs::add_to_linker(linker)?;
    Ok(())
}

/// The raw status an import returns.
pub(crate) fn status(result: Result<(), Status>) -> i32 {
    match result {
        Ok(()) => Status::Ok as i32,
        Err(s) => s as i32,
    }
}
