//! The http-wasm handler ABI (module `http_handler`), as Traefik's host implements it, behind
//! safe functions.
//!
//! Every buffer-returning import answers the length it needs and writes nothing when the
//! buffer is too small, so each read asks once with a guess and again with the exact size.
//! Header lists come back NUL-terminated with their count in the upper 32 bits.

// The imports are foreign functions: calling them is the one unsafe thing this guest does.
#![allow(unsafe_code)]

/// Which header map a call is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Kind {
    /// The request's headers (or body).
    Request = 0,
    /// The response's headers (or body).
    Response = 1,
}

/// `buffer_response`: the host holds the upstream's whole answer for `handle_response`.
pub const FEATURE_BUFFER_RESPONSE: u32 = 2;

/// Log levels of the ABI.
#[derive(Debug, Clone, Copy)]
#[repr(i32)]
pub enum Level {
    /// Debug.
    Debug = -1,
    /// Info.
    Info = 0,
    /// Warn.
    Warn = 1,
    /// Error.
    Error = 2,
}

#[cfg(target_arch = "wasm32")]
#[link(wasm_import_module = "http_handler")]
extern "C" {
    fn log(level: i32, message: *const u8, len: u32);
    fn enable_features(features: u32) -> u32;
    fn get_config(buf: *mut u8, limit: u32) -> u32;
    fn get_method(buf: *mut u8, limit: u32) -> u32;
    fn get_uri(buf: *mut u8, limit: u32) -> u32;
    fn set_uri(uri: *const u8, len: u32);
    fn get_header_values(kind: u32, name: *const u8, name_len: u32, buf: *mut u8, limit: u32) -> u64;
    fn set_header_value(kind: u32, name: *const u8, name_len: u32, value: *const u8, value_len: u32);
    fn remove_header(kind: u32, name: *const u8, name_len: u32);
    fn read_body(kind: u32, buf: *mut u8, limit: u32) -> u64;
    fn write_body(kind: u32, body: *const u8, len: u32);
    fn get_status_code() -> u32;
    fn set_status_code(status: u32);
}

/// Native builds (clippy, docs) have no host: every call is inert.
#[cfg(not(target_arch = "wasm32"))]
mod native {
    pub unsafe fn log(_: i32, _: *const u8, _: u32) {}
    pub unsafe fn enable_features(f: u32) -> u32 {
        f
    }
    pub unsafe fn get_config(_: *mut u8, _: u32) -> u32 {
        0
    }
    pub unsafe fn get_method(_: *mut u8, _: u32) -> u32 {
        0
    }
    pub unsafe fn get_uri(_: *mut u8, _: u32) -> u32 {
        0
    }
    pub unsafe fn set_uri(_: *const u8, _: u32) {}
    pub unsafe fn get_header_values(_: u32, _: *const u8, _: u32, _: *mut u8, _: u32) -> u64 {
        0
    }
    pub unsafe fn set_header_value(_: u32, _: *const u8, _: u32, _: *const u8, _: u32) {}
    pub unsafe fn remove_header(_: u32, _: *const u8, _: u32) {}
    pub unsafe fn read_body(_: u32, _: *mut u8, _: u32) -> u64 {
        1 << 32
    }
    pub unsafe fn write_body(_: u32, _: *const u8, _: u32) {}
    pub unsafe fn get_status_code() -> u32 {
        200
    }
    pub unsafe fn set_status_code(_: u32) {}
}
#[cfg(not(target_arch = "wasm32"))]
use native::*;

/// Reads what `call` writes: first into a small buffer, again with the size it asked for.
fn read_sized(mut call: impl FnMut(*mut u8, u32) -> u32) -> Vec<u8> {
    let mut buf = vec![0u8; 256];
    loop {
        let want = call(buf.as_mut_ptr(), buf.len() as u32) as usize;
        if want <= buf.len() {
            buf.truncate(want);
            return buf;
        }
        buf.resize(want, 0);
    }
}

/// Writes a log line at `level`.
pub fn log_line(level: Level, message: &str) {
    unsafe { log(level as i32, message.as_ptr(), message.len() as u32) }
}

/// Enables `features` for the current request; the host answers the set now enabled.
pub fn enable(features: u32) -> u32 {
    unsafe { enable_features(features) }
}

/// The middleware's settings, as Traefik encoded them.
pub fn config() -> Vec<u8> {
    read_sized(|p, n| unsafe { get_config(p, n) })
}

/// The request method.
pub fn method() -> String {
    String::from_utf8_lossy(&read_sized(|p, n| unsafe { get_method(p, n) })).into_owned()
}

/// The request URI: escaped path and query.
pub fn uri() -> String {
    String::from_utf8_lossy(&read_sized(|p, n| unsafe { get_uri(p, n) })).into_owned()
}

/// Replaces the request's path and query.
pub fn set_request_uri(uri: &str) {
    unsafe { set_uri(uri.as_ptr(), uri.len() as u32) }
}

/// The first value of header `name` of `kind`, if present.
pub fn header(kind: Kind, name: &str) -> Option<Vec<u8>> {
    let mut count = 0u64;
    let list = read_sized(|p, n| {
        let r = unsafe { get_header_values(kind as u32, name.as_ptr(), name.len() as u32, p, n) };
        count = r >> 32;
        r as u32
    });
    if count == 0 {
        return None;
    }
    let end = list.iter().position(|&b| b == 0).unwrap_or(list.len());
    Some(list.get(..end).unwrap_or_default().to_vec())
}

/// Sets header `name` of `kind` to `value`, replacing its values.
pub fn set_header(kind: Kind, name: &str, value: &[u8]) {
    unsafe { set_header_value(kind as u32, name.as_ptr(), name.len() as u32, value.as_ptr(), value.len() as u32) }
}

/// Removes header `name` of `kind`.
pub fn remove(kind: Kind, name: &str) {
    unsafe { remove_header(kind as u32, name.as_ptr(), name.len() as u32) }
}

/// Reads the body of `kind` to its end, or `None` once it passes `limit` bytes.
pub fn body(kind: Kind, limit: usize) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut chunk = vec![0u8; 16 * 1024];
    // A host that answers nothing without saying EOF is not waited on forever.
    let mut empty = 0;
    loop {
        let r = unsafe { read_body(kind as u32, chunk.as_mut_ptr(), chunk.len() as u32) };
        let n = (r as u32 as usize).min(chunk.len());
        out.extend_from_slice(chunk.get(..n).unwrap_or_default());
        if out.len() > limit {
            return None;
        }
        empty = if n == 0 { empty + 1 } else { 0 };
        if r >> 32 != 0 || empty > 3 {
            return Some(out);
        }
    }
}

/// Replaces the body of `kind` (the first write of a request replaces, later ones append).
pub fn set_body(kind: Kind, body: &[u8]) {
    unsafe { write_body(kind as u32, body.as_ptr(), body.len() as u32) }
}

/// The response status (readable in `handle_response` only with `buffer_response`).
pub fn status() -> u16 {
    u16::try_from(unsafe { get_status_code() }).unwrap_or(0)
}

/// Sets the response status.
pub fn set_status(status: u16) {
    unsafe { set_status_code(u32::from(status)) }
}
