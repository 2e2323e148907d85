//! Logging imports (`proxy_log`, `proxy_get_log_level`). Lines are kept for
//! `Vm::take_logs` and forwarded to the `log` crate with Envoy's prefix
//! `wasm log <plugin name> <root_id> <vm_id>:`, empty parts and repeats omitted (a plugin
//! whose three names are all `ferrogate` logs `wasm log ferrogate: ...`).

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
    let prefix = prefix(&[spec.name.as_str(), spec.root_id.as_str(), spec.vm_id.as_str()]);
    log::log!(target: "wasm", level.to_log(), "wasm log {prefix}: {msg}");
    state.logs.push((level, msg));
}

/// The names that tell this plugin apart, each once, in Envoy's order.
fn prefix(parts: &[&str]) -> String {
    let mut kept: Vec<&str> = Vec::with_capacity(parts.len());
    for part in parts {
        if !part.is_empty() && !kept.contains(part) {
            kept.push(part);
        }
    }
    kept.join(" ")
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

#[cfg(test)]
mod tests {
    use super::prefix;

    #[test]
    fn the_prefix_names_each_part_once() {
        assert_eq!(prefix(&["ferrogate", "ferrogate", "ferrogate"]), "ferrogate");
        assert_eq!(prefix(&["plugin", "", "vm"]), "plugin vm");
        assert_eq!(prefix(&["a", "b", "a"]), "a b");
    }
}
