//! Property imports (§6): the CEL attributes a filter reads (`request.*`, `source.*`,
//! `destination.*`, `connection.id`, `response.code`, `plugin_*`), then filter state written
//! by `proxy_set_property`. Paths are NUL-separated segments; strings are raw bytes,
//! integers 8-byte little-endian, maps proxy-wasm pairs. Missing → NotFound.

use super::memory::{give, read};
use super::status;
use crate::codec::serialize_headers;
use crate::state::{HostState, Status, StreamState};
use std::time::UNIX_EPOCH;
use wasmtime::{Caller, Linker};

fn int(v: i64) -> Option<Vec<u8>> {
    Some(v.to_le_bytes().to_vec())
}

/// Plugin attributes, available in every context.
fn plugin_attr(state: &HostState, path: &[&str]) -> Option<Vec<u8>> {
    let spec = &state.rt.spec;
    match path {
        ["plugin_name"] => Some(spec.name.clone().into_bytes()),
        ["plugin_root_id"] => Some(spec.root_id.clone().into_bytes()),
        ["plugin_vm_id"] => Some(spec.vm_id.clone().into_bytes()),
        _ => None,
    }
}

/// `request.*` from the request headers (whatever their pointer state: the HCM keeps them).
fn request_attr(s: &StreamState, path: &[&str]) -> Option<Vec<u8>> {
    let h = s.req.headers.as_ref()?;
    let raw_path = h.get(":path").unwrap_or_default();
    let split = raw_path.iter().position(|b| *b == b'?');
    match path {
        ["request", "path"] => Some(raw_path.to_vec()),
        ["request", "url_path"] => Some(raw_path[..split.unwrap_or(raw_path.len())].to_vec()),
        ["request", "query"] => Some(split.map(|i| raw_path[i + 1..].to_vec()).unwrap_or_default()),
        ["request", "host"] => h.get(":authority").map(<[u8]>::to_vec),
        ["request", "scheme"] => h.get(":scheme").map(<[u8]>::to_vec),
        ["request", "method"] => h.get(":method").map(<[u8]>::to_vec),
        ["request", "id"] => h.get("x-request-id").map(<[u8]>::to_vec),
        ["request", "headers"] => Some(serialize_headers(h)),
        ["request", "headers", name] => h.joined(&name.to_ascii_lowercase()),
        _ => None,
    }
}

/// Connection, time and response attributes of a stream.
fn stream_attr(s: &StreamState, path: &[&str]) -> Option<Vec<u8>> {
    let addr = |a: Option<std::net::SocketAddr>| a.map(|a| a.to_string().into_bytes());
    let port = |a: Option<std::net::SocketAddr>| a.and_then(|a| int(i64::from(a.port())));
    match path {
        ["request", "time"] => {
            let ns = s.started.duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos();
            int(i64::try_from(ns).unwrap_or(i64::MAX))
        }
        ["request", "protocol"] => Some(s.info.protocol.clone().into_bytes()),
        ["request", ..] => request_attr(s, path),
        ["source", "address"] => addr(s.info.source_address),
        ["source", "port"] => port(s.info.source_address),
        ["destination", "address"] => addr(s.info.destination_address),
        ["destination", "port"] => port(s.info.destination_address),
        ["connection", "id"] | ["connection_id"] => Some(s.info.connection_id.to_le_bytes().to_vec()),
        ["response", "code"] => {
            let status = s.resp.headers.as_ref()?.get_str(":status")?.parse::<i64>().ok()?;
            int(status)
        }
        ["response", "code_details"] => s.code_details.clone().map(String::into_bytes),
        _ => None,
    }
}

fn get_property(state: &mut HostState, raw: &[u8]) -> Option<Vec<u8>> {
    let text = String::from_utf8_lossy(raw).into_owned();
    // The SDK joins segments with NUL and drops the trailing one; tolerate it anyway.
    let path: Vec<&str> = text.trim_end_matches('\0').split('\0').collect();
    if let Some(v) = plugin_attr(state, &path) {
        return Some(v);
    }
    let s = state.stream()?;
    stream_attr(s, &path).or_else(|| s.filter_state.get(raw).cloned())
}

pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.func_wrap(
        "env",
        "proxy_get_property",
        |mut c: Caller<'_, HostState>, pp: i32, pl: i32, rp: i32, rl: i32| -> wasmtime::Result<i32> {
            let value = read(&mut c, pp, pl).and_then(|raw| get_property(c.data_mut(), &raw).ok_or(Status::NotFound));
            match value {
                Ok(v) => Ok(status(give(&mut c, &v, rp, rl)?)),
                Err(s) => Ok(s as i32),
            }
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_set_property",
        |mut c: Caller<'_, HostState>, pp: i32, pl: i32, vp: i32, vl: i32| -> wasmtime::Result<i32> {
            let r = read(&mut c, pp, pl).and_then(|path| {
                let value = read(&mut c, vp, vl)?;
                // Filter state needs a stream; on a root context Envoy answers NotFound.
                let s = c.data_mut().stream().ok_or(Status::NotFound)?;
                s.filter_state.insert(path, value);
                Ok(())
            });
            Ok(status(r))
        },
    )?;
    Ok(())
}
