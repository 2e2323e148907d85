//! Callout imports (§3): `proxy_http_call` and `proxy_get_status`. Calls are owned by the
//! VM (the root context, in Envoy), tokens run 4, 8, 12, … per VM; an unknown cluster,
//! a missing `:method`/`:path`/`:authority` or a negative timeout is BadArgument. The
//! caller performs the request (see `Vm::take_http_calls`).

use super::memory::{give, read, read_str, write_u32};
use super::status;
use crate::codec::deserialize_headers;
use crate::state::{HostState, Status};
use crate::HttpCallRequest;
use wasmtime::{Caller, Linker};

/// Validates and records one callout; returns its token.
fn dispatch(state: &mut HostState, mut req: HttpCallRequest) -> Result<u32, Status> {
    if let Some(clusters) = &state.rt.spec.clusters {
        if !clusters.contains(&req.cluster) {
            return Err(Status::BadArgument);
        }
    }
    let has = |name: &str| req.headers.get(name).is_some();
    if !(has(":method") && has(":path") && has(":authority")) {
        return Err(Status::BadArgument);
    }
    if req.timeout_ms > i32::MAX as u32 {
        return Err(Status::BadArgument);
    }
    if !req.body.is_empty() {
        req.headers.set("content-length", req.body.len().to_string());
    }
    state.calls.last_token += 4;
    req.token = state.calls.last_token;
    let issuer = state.context();
    state.calls.pending.insert(req.token, issuer);
    state.calls.outbox.push(req.clone());
    Ok(req.token)
}

#[allow(clippy::too_many_arguments)]
fn read_request(
    c: &mut Caller<'_, HostState>,
    up: i32,
    ul: i32,
    hp: i32,
    hl: i32,
    bp: i32,
    bl: i32,
    tp: i32,
    tl: i32,
) -> Result<HttpCallRequest, Status> {
    let cluster = read_str(c, up, ul)?;
    // Oversized or malformed pairs deserialize to nothing in Envoy → missing pseudo-headers.
    let headers = deserialize_headers(&read(c, hp, hl)?).unwrap_or_default();
    let body = read(c, bp, bl)?;
    let trailers = deserialize_headers(&read(c, tp, tl)?).unwrap_or_default();
    Ok(HttpCallRequest { token: 0, cluster, headers, body, trailers, timeout_ms: 0 })
}

pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.func_wrap(
        "env",
        "proxy_http_call",
        |mut c: Caller<'_, HostState>,
         up: i32,
         ul: i32,
         hp: i32,
         hl: i32,
         bp: i32,
         bl: i32,
         tp: i32,
         tl: i32,
         timeout: i32,
         ret: i32|
         -> wasmtime::Result<i32> {
            let r = read_request(&mut c, up, ul, hp, hl, bp, bl, tp, tl).and_then(|mut req| {
                req.timeout_ms = timeout as u32;
                dispatch(c.data_mut(), req)
            });
            Ok(status(r.and_then(|token| write_u32(&mut c, ret, token))))
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_get_status",
        |mut c: Caller<'_, HostState>, code_ptr: i32, rp: i32, rl: i32| -> wasmtime::Result<i32> {
            let (code, message) = c.data().status.clone();
            if let Err(s) = write_u32(&mut c, code_ptr, code) {
                return Ok(s as i32);
            }
            Ok(status(give(&mut c, &message, rp, rl)?))
        },
    )?;
    Ok(())
}
