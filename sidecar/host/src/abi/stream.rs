//! Stream-control imports (§2): `proxy_continue_stream`, `proxy_close_stream`,
//! `proxy_send_local_response`, `proxy_set_effective_context`, `proxy_done`. Envoy defers
//! the actual continue/close/reply until the running VM call returns; only the nulling of
//! header-map pointers and the "stop next iteration" flag take effect immediately.

use super::memory::{read, read_str};
use crate::codec::deserialize_headers;
use crate::state::{Deferred, HostState, LocalReply, Side, Status};
use wasmtime::{Caller, Linker};

fn side(stream_type: i32) -> Option<Side> {
    match stream_type {
        0 => Some(Side::Request),
        1 => Some(Side::Response),
        _ => None,
    }
}

fn continue_stream(state: &mut HostState, stream_type: i32) -> Status {
    let Some(side) = side(stream_type) else {
        return Status::BadArgument;
    };
    if let Some(s) = state.stream() {
        // Envoy nulls the request pointers on either continue (a quirk for the response).
        s.req.null_maps();
        if side == Side::Response {
            s.resp.null_maps();
        }
    }
    state.defer(Deferred::Continue(side));
    Status::Ok
}

fn close_stream(state: &mut HostState, stream_type: i32) -> Status {
    if side(stream_type).is_none() {
        return Status::BadArgument;
    }
    state.defer(Deferred::Close);
    Status::Ok
}

/// Reads the reply's parts; details get whitespace replaced by `_` like Envoy.
#[allow(clippy::too_many_arguments)]
fn local_reply(
    c: &mut Caller<'_, HostState>,
    status: i32,
    dp: i32,
    dl: i32,
    bp: i32,
    bl: i32,
    hp: i32,
    hl: i32,
) -> Result<LocalReply, Status> {
    let details = read_str(c, dp, dl)?.replace(char::is_whitespace, "_");
    let body = read(c, bp, bl)?;
    let headers = deserialize_headers(&read(c, hp, hl)?).ok_or(Status::BadArgument)?;
    Ok(LocalReply { status: status as u32, details, body, headers })
}

pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.func_wrap(
        "env",
        "proxy_continue_stream",
        |mut c: Caller<'_, HostState>, t: i32| -> wasmtime::Result<i32> { Ok(continue_stream(c.data_mut(), t) as i32) },
    )?;
    linker.func_wrap("env", "proxy_close_stream", |mut c: Caller<'_, HostState>, t: i32| -> wasmtime::Result<i32> {
        Ok(close_stream(c.data_mut(), t) as i32)
    })?;
    linker.func_wrap(
        "env",
        "proxy_send_local_response",
        |mut c: Caller<'_, HostState>,
         st: i32,
         dp: i32,
         dl: i32,
         bp: i32,
         bl: i32,
         hp: i32,
         hl: i32,
         _grpc: i32|
         -> wasmtime::Result<i32> {
            let reply = match local_reply(&mut c, st, dp, dl, bp, bl, hp, hl) {
                Ok(r) => r,
                Err(s) => return Ok(s as i32),
            };
            let state = c.data_mut();
            // The current callback's return value is overridden by a forced stop.
            state.stop_next = true;
            state.defer(Deferred::LocalReply(reply));
            Ok(0)
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_set_effective_context",
        |mut c: Caller<'_, HostState>, id: i32| -> wasmtime::Result<i32> {
            let state = c.data_mut();
            let id = id as u32;
            if id == state.root_id || state.streams.contains_key(&id) {
                state.effective = Some(id);
                return Ok(0);
            }
            Ok(Status::BadArgument as i32)
        },
    )?;
    linker.func_wrap("env", "proxy_done", || -> wasmtime::Result<i32> { Ok(0) })?;
    Ok(())
}
