//! The `http_handler` imports, with host-go v0.7.0's exact signatures (all i32 except the
//! i64 results of the list and body functions) and behaviour. A host function traps by
//! returning an error, as host-go panics; the messages are host-go's.

mod body;
mod headers;

use wasmtime::{Caller, Linker};

use super::memory::{read, read_string, write_if_under_limit};
use super::state::{Ctx, RequestState, BUFFER_REQUEST, BUFFER_RESPONSE};
use super::uri::RequestUri;

/// The import module's name.
pub(crate) const MODULE: &str = "http_handler";

/// Adds every `http_handler` function to `linker`.
pub(crate) fn add_to_linker(linker: &mut Linker<Ctx>) -> wasmtime::Result<()> {
    add_init_functions(linker)?;
    add_request_line(linker)?;
    add_status(linker)?;
    headers::add_to_linker(linker)?;
    body::add_to_linker(linker)?;
    Ok(())
}

/// Go's message when a request-only function runs outside a request (at init): the type
/// assertion on the missing request state panics.
const NO_REQUEST: &str = "interface conversion: interface {} is nil, not *handler.requestState";

/// The request being served, or the trap host-go's missing request state causes.
pub(crate) fn request<'a>(caller: &'a mut Caller<'_, Ctx>) -> wasmtime::Result<&'a mut RequestState> {
    caller.data_mut().req.as_mut().ok_or_else(|| wasmtime::Error::msg(NO_REQUEST))
}

/// host-go `mustBeforeNext`.
pub(crate) fn before_next(s: &RequestState, op: &str, kind: &str) -> wasmtime::Result<()> {
    if s.after_next {
        return Err(wasmtime::Error::msg(format!("can't {op} {kind} after next handler")));
    }
    Ok(())
}

/// host-go `mustBeforeNextOrFeature`.
pub(crate) fn before_next_or_feature(s: &RequestState, feature: u32, op: &str, kind: &str) -> wasmtime::Result<()> {
    if s.after_next && s.features & feature == 0 {
        let name = if feature == BUFFER_REQUEST { "buffer_request" } else { "buffer_response" };
        return Err(wasmtime::Error::msg(format!("can't {op} {kind} after next handler unless {name} is enabled")));
    }
    Ok(())
}

/// enable_features, get_config, log_enabled, log: the functions that also work at init.
fn add_init_functions(linker: &mut Linker<Ctx>) -> wasmtime::Result<()> {
    linker.func_wrap(MODULE, "enable_features", |mut caller: Caller<'_, Ctx>, features: i32| -> i32 {
        let features = features as u32;
        let ctx = caller.data_mut();
        let enabled = match ctx.req.as_mut() {
            // In a request: that request only (host-go `s.features`).
            Some(s) => {
                let union = s.features | features;
                s.apply_features(union);
                s.features
            }
            // At init: middleware-wide (host-go `m.features`), for every later request.
            None => {
                let previous = ctx.shared.features.fetch_or(features, std::sync::atomic::Ordering::SeqCst);
                previous | features
            }
        };
        enabled as i32
    })?;
    linker.func_wrap(MODULE, "get_config", |mut caller: Caller<'_, Ctx>, buf: i32, limit: i32| {
        let config = caller.data().shared.clone();
        write_if_under_limit(&mut caller, buf, limit, &config.config)
    })?;
    // Traefik's logger reports every level as enabled (its own level filters later).
    linker.func_wrap(MODULE, "log_enabled", |_level: i32| -> i32 { 1 })?;
    linker.func_wrap(MODULE, "log", |mut caller: Caller<'_, Ctx>, level: i32, ptr: i32, len: i32| {
        let message = read_string(&mut caller, "message", ptr, len)?;
        log::log!(target: "http_wasm", log_level(level), "{message}");
        Ok(())
    })?;
    Ok(())
}

/// Traefik's `zerolog.Level(level + 1)`: -1 debug, 0 info, 1 warn, 2 error, 3 "fatal"
/// (logged, no exit) — error here.
fn log_level(level: i32) -> log::Level {
    match level {
        i32::MIN..=-2 => log::Level::Trace,
        -1 => log::Level::Debug,
        0 => log::Level::Info,
        1 => log::Level::Warn,
        _ => log::Level::Error,
    }
}

/// get/set_method, get/set_uri, get_protocol_version, get_source_addr.
fn add_request_line(linker: &mut Linker<Ctx>) -> wasmtime::Result<()> {
    linker.func_wrap(MODULE, "get_method", |mut caller: Caller<'_, Ctx>, buf: i32, limit: i32| {
        let method = request(&mut caller)?.method.clone();
        write_if_under_limit(&mut caller, buf, limit, &method)
    })?;
    linker.func_wrap(MODULE, "set_method", |mut caller: Caller<'_, Ctx>, ptr: i32, len: i32| {
        before_next(request(&mut caller)?, "set", "method")?;
        if len == 0 {
            return Err(wasmtime::Error::msg("HTTP method cannot be empty"));
        }
        let method = read(&mut caller, "method", ptr, len)?;
        request(&mut caller)?.method = method;
        Ok(())
    })?;
    linker.func_wrap(MODULE, "get_uri", |mut caller: Caller<'_, Ctx>, buf: i32, limit: i32| {
        let uri = request(&mut caller)?.uri.to_go_string();
        write_if_under_limit(&mut caller, buf, limit, uri.as_bytes())
    })?;
    linker.func_wrap(MODULE, "set_uri", |mut caller: Caller<'_, Ctx>, ptr: i32, len: i32| {
        before_next(request(&mut caller)?, "set", "uri")?;
        let uri = read_string(&mut caller, "uri", ptr, len)?;
        let parsed = RequestUri::parse_go(&uri).map_err(wasmtime::Error::msg)?;
        request(&mut caller)?.uri = parsed;
        Ok(())
    })?;
    linker.func_wrap(MODULE, "get_protocol_version", |mut caller: Caller<'_, Ctx>, buf: i32, limit: i32| {
        let proto = request(&mut caller)?.proto;
        write_if_under_limit(&mut caller, buf, limit, proto.as_bytes())
    })?;
    linker.func_wrap(MODULE, "get_source_addr", |mut caller: Caller<'_, Ctx>, buf: i32, limit: i32| {
        let remote = request(&mut caller)?.remote.clone();
        write_if_under_limit(&mut caller, buf, limit, remote.as_bytes())
    })?;
    Ok(())
}

/// get_status_code, set_status_code.
fn add_status(linker: &mut Linker<Ctx>) -> wasmtime::Result<()> {
    linker.func_wrap(MODULE, "get_status_code", |mut caller: Caller<'_, Ctx>| -> wasmtime::Result<i32> {
        // host-go type-asserts the buffering writer: without buffer_response this panics,
        // before next as well as after.
        match &request(&mut caller)?.response.buffered {
            Some(held) if held.status == 0 => Ok(200),
            Some(held) => Ok(held.status as i32),
            None => Err(wasmtime::Error::msg(NOT_BUFFERING)),
        }
    })?;
    linker.func_wrap(MODULE, "set_status_code", |mut caller: Caller<'_, Ctx>, code: i32| {
        let s = request(&mut caller)?;
        before_next_or_feature(s, BUFFER_RESPONSE, "set", "status code")?;
        match s.response.buffered.as_mut() {
            Some(held) => held.status = code as u32,
            None => {
                let valid = u16::try_from(code).ok().filter(|c| (100..=999).contains(c));
                let code = valid.ok_or_else(|| wasmtime::Error::msg(format!("invalid WriteHeader code {code}")))?;
                s.response.write_header(code);
            }
        }
        Ok(())
    })?;
    Ok(())
}

/// Go's panic text when host-go type-asserts a writer that is not buffering.
pub(crate) const NOT_BUFFERING: &str =
    "interface conversion: http.ResponseWriter is *http.response, not *wasm.bufferingResponseWriter";
