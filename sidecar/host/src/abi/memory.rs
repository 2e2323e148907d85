//! Guest memory access for the imports: bounds-checked reads and writes (bad pointers give
//! `InvalidMemoryAccess`), and out-parameters allocated through the guest's own allocator
//! (`proxy_on_memory_allocate`, or `malloc` which the Rust SDK exports on
//! wasm32-unknown-unknown) so the SDK can take ownership of the bytes.

use crate::state::{HostState, Status};
use wasmtime::{Caller, Linker};

/// Nothing to register: memory management is done by the guest's exports.
pub(crate) fn add_to_linker(_linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    Ok(())
}

/// Host-side view of a guest `(ptr, len)` pair.
fn range(ptr: i32, len: usize) -> Result<std::ops::Range<usize>, Status> {
    let start = ptr as u32 as usize;
    let end = start.checked_add(len).ok_or(Status::InvalidMemoryAccess)?;
    Ok(start..end)
}

fn memory(c: &mut Caller<'_, HostState>) -> Result<wasmtime::Memory, Status> {
    c.data().exports.memory.ok_or(Status::InvalidMemoryAccess)
}

/// Copies `len` bytes at `ptr` out of guest memory.
pub(crate) fn read(c: &mut Caller<'_, HostState>, ptr: i32, len: i32) -> Result<Vec<u8>, Status> {
    let mem = memory(c)?;
    let range = range(ptr, len as u32 as usize)?;
    mem.data(&*c).get(range).map(<[u8]>::to_vec).ok_or(Status::InvalidMemoryAccess)
}

/// Reads a guest string (names, keys); invalid UTF-8 is replaced, like a lossy C++ view.
pub(crate) fn read_str(c: &mut Caller<'_, HostState>, ptr: i32, len: i32) -> Result<String, Status> {
    read(c, ptr, len)
        .map(|b| String::from_utf8(b).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
}

/// Runs `f` on a guest string borrowed in place (no copy: shared-data keys are read several
/// times per request when limits apply); invalid UTF-8 is replaced, as in [`read_str`].
pub(crate) fn with_str<R>(
    c: &mut Caller<'_, HostState>,
    ptr: i32,
    len: i32,
    f: impl FnOnce(&HostState, &str) -> R,
) -> Result<R, Status> {
    let mem = memory(c)?;
    let range = range(ptr, len as u32 as usize)?;
    let (data, state) = mem.data_and_store_mut(&mut *c);
    let bytes = data.get(range).ok_or(Status::InvalidMemoryAccess)?;
    let key = match std::str::from_utf8(bytes) {
        Ok(s) => std::borrow::Cow::Borrowed(s),
        Err(_) => String::from_utf8_lossy(bytes),
    };
    Ok(f(state, &key))
}

/// Copies bytes into guest memory at `ptr`.
pub(crate) fn write(c: &mut Caller<'_, HostState>, ptr: i32, bytes: &[u8]) -> Result<(), Status> {
    let mem = memory(c)?;
    let range = range(ptr, bytes.len())?;
    let dst = mem.data_mut(&mut *c).get_mut(range).ok_or(Status::InvalidMemoryAccess)?;
    dst.copy_from_slice(bytes);
    Ok(())
}

/// Writes a little-endian u32 out-parameter.
pub(crate) fn write_u32(c: &mut Caller<'_, HostState>, ptr: i32, v: u32) -> Result<(), Status> {
    write(c, ptr, &v.to_le_bytes())
}

/// Writes a little-endian u64 out-parameter.
pub(crate) fn write_u64(c: &mut Caller<'_, HostState>, ptr: i32, v: u64) -> Result<(), Status> {
    write(c, ptr, &v.to_le_bytes())
}

/// Hands `bytes` to the guest: allocates exactly `len` bytes with the guest allocator (the
/// SDK rebuilds a `Vec` from it), copies, and writes pointer and length. Empty data is
/// reported as a null pointer, which the SDK reads as "no value" / empty.
/// The outer error is a guest trap inside the allocator.
pub(crate) fn give(
    c: &mut Caller<'_, HostState>,
    bytes: &[u8],
    ret_ptr: i32,
    ret_len: i32,
) -> wasmtime::Result<Result<(), Status>> {
    if bytes.is_empty() {
        return Ok(write_u32(c, ret_ptr, 0).and_then(|()| write_u32(c, ret_len, 0)));
    }
    let Ok(len) = i32::try_from(bytes.len()) else {
        return Ok(Err(Status::InternalFailure));
    };
    let Some(alloc) = c.data().exports.alloc.clone() else {
        return Ok(Err(Status::InternalFailure));
    };
    let ptr = alloc.call(&mut *c, len)?;
    if ptr == 0 {
        return Ok(Err(Status::InternalFailure));
    }
    Ok(write(c, ptr, bytes)
        .and_then(|()| write_u32(c, ret_ptr, ptr as u32))
        .and_then(|()| write_u32(c, ret_len, len as u32)))
}
