//! Buffer imports (`proxy_get_buffer_bytes`, `proxy_set_buffer_bytes`,
//! `proxy_get_buffer_status`) with Envoy's view rules: request/response body = current
//! chunk, or the whole buffered body after a Pause; callout body only inside
//! `on_http_call_response`; configuration buffers only inside on_vm_start / on_configure.

use super::memory::{give, read, write_u32};
use super::status;
use crate::state::{HostState, Phase, Status};
use wasmtime::{Caller, Linker};

const REQUEST_BODY: i32 = 0;
const RESPONSE_BODY: i32 = 1;
const CALL_RESPONSE_BODY: i32 = 4;
const VM_CONFIGURATION: i32 = 6;
const PLUGIN_CONFIGURATION: i32 = 7;

pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.func_wrap(
        "env",
        "proxy_get_buffer_bytes",
        |mut c: Caller<'_, HostState>, ty: i32, start: i32, max: i32, rp: i32, rl: i32| -> wasmtime::Result<i32> {
            let bytes = match view(c.data_mut(), ty) {
                Some(all) => clamp(&all, start as u32, max as u32),
                None => return Ok(Status::NotFound as i32),
            };
            Ok(status(give(&mut c, &bytes, rp, rl)?))
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_set_buffer_bytes",
        |mut c: Caller<'_, HostState>, ty: i32, start: i32, size: i32, ptr: i32, len: i32| -> wasmtime::Result<i32> {
            let data = match read(&mut c, ptr, len) {
                Ok(d) => d,
                Err(s) => return Ok(s as i32),
            };
            Ok(status(set(c.data_mut(), ty, start as u32 as usize, size as u32 as usize, &data)))
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_get_buffer_status",
        |mut c: Caller<'_, HostState>, ty: i32, ret_len: i32, ret_flags: i32| -> wasmtime::Result<i32> {
            let Some(all) = view(c.data_mut(), ty) else {
                return Ok(Status::NotFound as i32);
            };
            let len = u32::try_from(all.len()).unwrap_or(u32::MAX);
            Ok(status(write_u32(&mut c, ret_len, len).and_then(|()| write_u32(&mut c, ret_flags, 0))))
        },
    )?;
    Ok(())
}

/// Copy of the bytes buffer `ty` currently shows; `None` = unavailable (NotFound).
fn view(state: &mut HostState, ty: i32) -> Option<Vec<u8>> {
    match ty {
        REQUEST_BODY => state.stream()?.req.body_view().cloned(),
        RESPONSE_BODY => state.stream()?.resp.body_view().cloned(),
        CALL_RESPONSE_BODY => state.call_response.as_ref().map(|r| r.body.clone()),
        VM_CONFIGURATION if state.phase == Phase::VmStart => Some(state.rt.spec.vm_configuration.clone()),
        PLUGIN_CONFIGURATION if state.phase == Phase::Configure => Some(state.rt.spec.configuration.clone()),
        _ => None,
    }
}

/// `start`/`max` clamped to the buffer (the SDK asks for `usize::MAX` bytes).
fn clamp(all: &[u8], start: u32, max: u32) -> Vec<u8> {
    let start = (start as usize).min(all.len());
    let end = start.saturating_add(max as usize).min(all.len());
    all[start..end].to_vec()
}

/// Only the two HTTP bodies are writable; anything else (or no body in flight) is
/// BadArgument, which the SDK turns into a panic.
fn set(state: &mut HostState, ty: i32, start: usize, size: usize, data: &[u8]) -> Result<(), Status> {
    let stream = state.stream().ok_or(Status::BadArgument)?;
    let buffer = match ty {
        REQUEST_BODY => stream.req.body_view(),
        RESPONSE_BODY => stream.resp.body_view(),
        _ => None,
    };
    splice_envoy(buffer.ok_or(Status::BadArgument)?, start, size, data)
}

/// Envoy's `Buffer::copyFrom` edit: `start == 0` drains `size` bytes then prepends `data`;
/// `start >= len` appends; anything in the middle is BadArgument.
pub(crate) fn splice_envoy(buf: &mut Vec<u8>, start: usize, size: usize, data: &[u8]) -> Result<(), Status> {
    if start == 0 {
        let drain = size.min(buf.len());
        buf.splice(..drain, data.iter().copied());
        Ok(())
    } else if start >= buf.len() {
        buf.extend_from_slice(data);
        Ok(())
    } else {
        Err(Status::BadArgument)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_buffer_bytes_three_cases() {
        // start == 0: replace all / the first k bytes / prepend.
        let mut b = b"hello".to_vec();
        splice_envoy(&mut b, 0, 5, b"bye").unwrap();
        assert_eq!(b, b"bye");
        let mut b = b"hello".to_vec();
        splice_envoy(&mut b, 0, 2, b"J").unwrap();
        assert_eq!(b, b"Jllo");
        let mut b = b"hello".to_vec();
        splice_envoy(&mut b, 0, 0, b">").unwrap();
        assert_eq!(b, b">hello");
        // start >= len: append (size ignored).
        let mut b = b"hello".to_vec();
        splice_envoy(&mut b, 5, 99, b"!").unwrap();
        assert_eq!(b, b"hello!");
        // In the middle: BadArgument, unchanged.
        let mut b = b"hello".to_vec();
        assert_eq!(splice_envoy(&mut b, 2, 1, b"x"), Err(Status::BadArgument));
        assert_eq!(b, b"hello");
    }

    #[test]
    fn clamp_reads() {
        assert_eq!(clamp(b"abc", 0, u32::MAX), b"abc");
        assert_eq!(clamp(b"abc", 1, 1), b"b");
        assert_eq!(clamp(b"abc", 9, 1), b"");
    }
}
