//! Guest memory access with host-go's conventions: reads trap with "out of memory reading
//! <field>", writes honour `buf_limit` (the full length is always returned; nothing is
//! written when it does not fit, so `buf_limit = 0` probes), and lists are NUL-terminated.

use wasmtime::{Caller, Extern, Memory};

use super::state::Ctx;

/// The guest's exported `memory` (checked at compile time; a trap if it vanished).
fn memory(caller: &mut Caller<'_, Ctx>) -> wasmtime::Result<Memory> {
    match caller.get_export("memory") {
        Some(Extern::Memory(m)) => Ok(m),
        _ => Err(wasmtime::Error::msg("guest doesn't export memory[memory]")),
    }
}

/// host-go `mustRead`: `len` bytes at `ptr` (empty for `len == 0`, whatever `ptr`).
pub(crate) fn read(caller: &mut Caller<'_, Ctx>, field: &str, ptr: i32, len: i32) -> wasmtime::Result<Vec<u8>> {
    let len = len as u32 as usize;
    if len == 0 {
        return Ok(Vec::new());
    }
    let mem = memory(caller)?;
    let start = ptr as u32 as usize;
    let data = mem.data(&*caller);
    let end = start.checked_add(len).filter(|e| *e <= data.len());
    match end {
        Some(end) => Ok(data[start..end].to_vec()),
        None => Err(wasmtime::Error::msg(format!("out of memory reading {field}"))),
    }
}

/// Like [`read`], as a (lossy) string, for names and messages.
pub(crate) fn read_string(caller: &mut Caller<'_, Ctx>, field: &str, ptr: i32, len: i32) -> wasmtime::Result<String> {
    read(caller, field, ptr, len).map(|b| String::from_utf8_lossy(&b).into_owned())
}

/// Writes `bytes` at `ptr` when they fit `limit`; traps when the range is outside memory.
fn write_raw(caller: &mut Caller<'_, Ctx>, ptr: i32, bytes: &[u8]) -> wasmtime::Result<()> {
    let mem = memory(caller)?;
    mem.write(&mut *caller, ptr as u32 as usize, bytes).map_err(|_| wasmtime::Error::msg("out of memory writing"))
}

/// host-go `writeIfUnderLimit`: returns the length; writes only when `0 < len <= limit`.
pub(crate) fn write_if_under_limit(
    caller: &mut Caller<'_, Ctx>,
    ptr: i32,
    limit: i32,
    bytes: &[u8],
) -> wasmtime::Result<i32> {
    let len = bytes.len();
    if len > 0 && len <= limit as u32 as usize {
        write_raw(caller, ptr, bytes)?;
    }
    Ok(len as i32)
}

/// host-go `writeNULTerminated`: `count << 32 | len` of the NUL-terminated list; written only
/// when it fits; 0 for an empty list.
pub(crate) fn write_nul_terminated(
    caller: &mut Caller<'_, Ctx>,
    ptr: i32,
    limit: i32,
    items: &[Vec<u8>],
) -> wasmtime::Result<i64> {
    if items.is_empty() {
        return Ok(0);
    }
    let mut joined = Vec::with_capacity(items.iter().map(|i| i.len() + 1).sum());
    for item in items {
        joined.extend_from_slice(item);
        joined.push(0);
    }
    if joined.len() <= limit as u32 as usize {
        write_raw(caller, ptr, &joined)?;
    }
    Ok(((items.len() as i64) << 32) | joined.len() as i64)
}

/// Writes a body chunk read for the guest (always fits: it was sized by `buf_limit`).
pub(crate) fn write_chunk(caller: &mut Caller<'_, Ctx>, ptr: i32, bytes: &[u8]) -> wasmtime::Result<()> {
    if bytes.is_empty() {
        return Ok(());
    }
    write_raw(caller, ptr, bytes)
}

/// host-go's `readBody` bounds check: the whole `[ptr, ptr+limit)` must be guest memory.
pub(crate) fn check_range(caller: &mut Caller<'_, Ctx>, field: &str, ptr: i32, limit: i32) -> wasmtime::Result<()> {
    let mem = memory(caller)?;
    let end = (ptr as u32 as usize).checked_add(limit as u32 as usize);
    if end.is_some_and(|e| e <= mem.data_size(&*caller)) {
        Ok(())
    } else {
        Err(wasmtime::Error::msg(format!("out of memory reading {field}")))
    }
}
