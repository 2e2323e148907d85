//! Header-map imports with Envoy's pointer lifetime (§1.5): a map exists only while the
//! filter is stopped on it. With the pointer null, `get_header_map_pairs` is Ok with zero
//! pairs and every other operation is BadArgument. In `on_log` maps are readable again
//! (access-log copies, request trailers excluded) but not writable. Keys are lower-cased.

use super::memory::{give, read, write_u32};
use super::status;
use crate::codec::{deserialize_headers, serialize_headers};
use crate::state::{HostState, Status};
use crate::Headers;
use wasmtime::{Caller, Linker};

/// Resolves map type `ty` for the current context. `Ok(None)` = null pointer.
fn map(state: &mut HostState, ty: i32, write: bool) -> Result<Option<&mut Headers>, Status> {
    if ty == 6 || ty == 7 {
        // Callout maps are read-only and live only during on_http_call_response.
        let Some(resp) = state.call_response.as_mut() else {
            return Ok(None);
        };
        return if write {
            Err(Status::BadArgument)
        } else {
            Ok(Some(if ty == 6 { &mut resp.headers } else { &mut resp.trailers }))
        };
    }
    if !(0..=3).contains(&ty) {
        return Err(Status::BadArgument);
    }
    let Some(stream) = state.stream() else {
        return Ok(None); // root contexts have no HTTP maps
    };
    let in_log = stream.in_log;
    let dir = if ty < 2 { &mut stream.req } else { &mut stream.resp };
    let trailers = ty % 2 == 1;
    let live = match (in_log, trailers) {
        (true, _) if write => false,
        (true, true) => ty == 3,
        (true, false) => true,
        (false, true) => dir.trailers_live,
        (false, false) => dir.headers_live,
    };
    if !live {
        return Ok(None);
    }
    Ok(if trailers { dir.trailers.as_mut() } else { dir.headers.as_mut() })
}

/// Runs `f` on a writable map; a null map is BadArgument.
fn with_map(state: &mut HostState, ty: i32, f: impl FnOnce(&mut Headers)) -> Result<(), Status> {
    let headers = map(state, ty, true)?.ok_or(Status::BadArgument)?;
    f(headers);
    Ok(())
}

/// A header name from guest memory, lower-cased in place: one allocation per hostcall.
fn key(c: &mut Caller<'_, HostState>, ptr: i32, len: i32) -> Result<String, Status> {
    let mut bytes = read(c, ptr, len)?;
    bytes.make_ascii_lowercase();
    Ok(String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
}

pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.func_wrap(
        "env",
        "proxy_get_header_map_pairs",
        |mut c: Caller<'_, HostState>, ty: i32, rp: i32, rl: i32| -> wasmtime::Result<i32> {
            let bytes = match map(c.data_mut(), ty, false) {
                Ok(Some(h)) => serialize_headers(h),
                Ok(None) => Vec::new(),
                Err(s) => return Ok(s as i32),
            };
            Ok(status(give(&mut c, &bytes, rp, rl)?))
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_get_header_map_value",
        |mut c: Caller<'_, HostState>, ty: i32, kp: i32, kl: i32, rp: i32, rl: i32| -> wasmtime::Result<i32> {
            let value = key(&mut c, kp, kl).and_then(|k| {
                let h = map(c.data_mut(), ty, false)?.ok_or(Status::BadArgument)?;
                h.get(&k).map(<[u8]>::to_vec).ok_or(Status::NotFound)
            });
            match value {
                Ok(v) => Ok(status(give(&mut c, &v, rp, rl)?)),
                Err(s) => Ok(s as i32),
            }
        },
    )?;
    add_mutators(linker)?;
    linker.func_wrap(
        "env",
        "proxy_get_header_map_size",
        |mut c: Caller<'_, HostState>, ty: i32, ret: i32| -> wasmtime::Result<i32> {
            let size = match map(c.data_mut(), ty, false) {
                Ok(Some(h)) => u32::try_from(h.byte_size()).unwrap_or(u32::MAX),
                Ok(None) => return Ok(Status::BadArgument as i32),
                Err(s) => return Ok(s as i32),
            };
            Ok(status(write_u32(&mut c, ret, size)))
        },
    )?;
    Ok(())
}

fn add_mutators(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.func_wrap(
        "env",
        "proxy_add_header_map_value",
        |mut c: Caller<'_, HostState>, ty: i32, kp: i32, kl: i32, vp: i32, vl: i32| -> wasmtime::Result<i32> {
            let r = key(&mut c, kp, kl).and_then(|k| {
                let v = read(&mut c, vp, vl)?;
                with_map(c.data_mut(), ty, |h| h.add_lowercase(k, v))
            });
            Ok(status(r))
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_replace_header_map_value",
        |mut c: Caller<'_, HostState>, ty: i32, kp: i32, kl: i32, vp: i32, vl: i32| -> wasmtime::Result<i32> {
            let r = key(&mut c, kp, kl).and_then(|k| {
                let v = read(&mut c, vp, vl)?;
                with_map(c.data_mut(), ty, |h| h.set_lowercase(k, v))
            });
            Ok(status(r))
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_remove_header_map_value",
        |mut c: Caller<'_, HostState>, ty: i32, kp: i32, kl: i32| -> wasmtime::Result<i32> {
            let r = key(&mut c, kp, kl).and_then(|k| with_map(c.data_mut(), ty, |h| h.remove(&k)));
            Ok(status(r))
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_set_header_map_pairs",
        |mut c: Caller<'_, HostState>, ty: i32, ptr: i32, len: i32| -> wasmtime::Result<i32> {
            let r = read(&mut c, ptr, len).and_then(|raw| {
                let new = deserialize_headers(&raw).ok_or(Status::BadArgument)?;
                with_map(c.data_mut(), ty, |h| *h = new)
            });
            Ok(status(r))
        },
    )?;
    Ok(())
}
