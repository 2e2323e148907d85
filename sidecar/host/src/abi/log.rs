//! Logging imports (`proxy_log`, `proxy_get_log_level`). Lines are kept for
//! `Vm::take_logs` and forwarded to the `log` crate with Envoy's prefix
//! `wasm log <plugin name> <root_id> <vm_id>:` (empty parts omitted).

use super::memory::{read_str, write_u32};
use super::status;
use crate::state::HostState;
use crate::LogLevel;
use wasmtime::{Caller, Linker};

pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.func_wrap(
        "env",
        "proxy_log",
        |mut c: Caller<'_, HostState>, level: i32, ptr: i32, len: i32| -> wasmtime::Result<i32> {
            let msg = match read_str(&mut c, ptr, len) {
                Ok(m) => m,
                Err(s) => return Ok(s as i32),
            };
            record(c.data_mut(), LogLevel::from_abi(level), msg);
            Ok(0)
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_get_log_level",
        |mut c: Caller<'_, HostState>, ret: i32| -> wasmtime::Result<i32> {
            Ok(status(write_u32(&mut c, ret, current_level())))
        },
    )?;
    Ok(())
}

/// Keeps a guest log line and forwards it to the `log` crate.
pub(crate) fn record(state: &mut HostState, level: LogLevel, msg: String) {
    let spec = &state.rt.spec;
    let prefix: Vec<&str> = [spec.name.as_str(), spec.root_id.as_str(), spec.vm_id.as_str()]
        .into_iter()
        .filter(|p| !p.is_empty())
        .collect();
    log::log!(target: "wasm", level.to_log(), "wasm log {}: {}", prefix.join(" "), msg);
    state.logs.push((level, msg));
}

/// The host logger's level in ABI numbering (Envoy reports its `wasm` logger level).
fn current_level() -> u32 {
    match log::max_level() {
        log::LevelFilter::Trace => 0,
        log::LevelFilter::Debug => 1,
        log::LevelFilter::Info => 2,
        log::LevelFilter::Warn => 3,
        log::LevelFilter::Error => 4,
        log::LevelFilter::Off => 5,
    }
}
