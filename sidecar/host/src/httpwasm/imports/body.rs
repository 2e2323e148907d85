//! read_body and write_body. The request body reader consumes the client's body (without
//! buffer_request `next` gets the remainder); the first request write replaces the body and
//! later ones append; the response reader sees the buffered body (buffer_response only) and
//! the first buffered response write discards what was held.

use bytes::Bytes;
use wasmtime::{Caller, Linker};

use super::{before_next, before_next_or_feature, request, MODULE, NOT_BUFFERING};
use crate::httpwasm::memory::{check_range, read, write_chunk};
use crate::httpwasm::state::{Ctx, RequestState, BUFFER_REQUEST, BUFFER_RESPONSE};

/// Bit 32 of read_body's result.
const EOF: i64 = 1 << 32;

/// Adds read_body and write_body.
pub(super) fn add_to_linker(linker: &mut Linker<Ctx>) -> wasmtime::Result<()> {
    linker.func_wrap(MODULE, "read_body", |mut caller: Caller<'_, Ctx>, kind: i32, buf: i32, limit: i32| {
        check_kind(kind)?;
        let s = request(&mut caller)?;
        if kind == 0 {
            before_next_or_feature(s, BUFFER_REQUEST, "read", "request body")?;
        } else {
            before_next_or_feature(s, BUFFER_RESPONSE, "read", "response body")?;
            open_response_reader(s)?;
        }
        if limit == 0 {
            return Err(wasmtime::Error::msg("buf_limit==0 reading body"));
        }
        check_range(&mut caller, "body", buf, limit)?;
        let s = request(&mut caller)?;
        let limit = limit as u32 as usize;
        let (chunk, eof) = if kind == 0 { read_request(s, limit) } else { read_response(s, limit) };
        write_chunk(&mut caller, buf, &chunk)?;
        Ok(if eof { EOF } else { 0 } | chunk.len() as i64)
    })?;
    linker.func_wrap(MODULE, "write_body", |mut caller: Caller<'_, Ctx>, kind: i32, ptr: i32, len: i32| {
        check_kind(kind)?;
        let s = request(&mut caller)?;
        if kind == 0 {
            before_next(s, "write", "request body")?;
        } else {
            before_next_or_feature(s, BUFFER_RESPONSE, "write", "response body")?;
        }
        let bytes = read(&mut caller, "body", ptr, len)?;
        let s = request(&mut caller)?;
        if kind == 0 {
            s.body.write(&bytes);
        } else {
            write_response(s, &bytes);
        }
        Ok(())
    })?;
    Ok(())
}

fn check_kind(kind: i32) -> wasmtime::Result<()> {
    if kind == 0 || kind == 1 {
        Ok(())
    } else {
        Err(wasmtime::Error::msg(format!("unsupported body kind: {kind}")))
    }
}

/// After next (buffer_request on), host-go opens a new reader on what `next` was handed and
/// already drained: EOF straight away.
fn read_request(s: &mut RequestState, limit: usize) -> (Bytes, bool) {
    if s.after_next {
        return (Bytes::new(), true);
    }
    s.body.read(limit)
}

/// host-go's ResponseBodyReader type-asserts the buffering writer (a trap without it) and
/// reads a snapshot of the held body.
fn open_response_reader(s: &mut RequestState) -> wasmtime::Result<()> {
    if s.response.reader.is_some() {
        return Ok(());
    }
    let held = s.response.buffered.as_ref().ok_or_else(|| wasmtime::Error::msg(NOT_BUFFERING))?;
    s.response.reader = Some((Bytes::from(held.body.clone()), 0));
    Ok(())
}

/// A `bytes.Reader` read in host-go's loop: EOF only comes from a read that finds nothing
/// left, so a read that exactly drains the body reports no EOF yet.
fn read_response(s: &mut RequestState, limit: usize) -> (Bytes, bool) {
    let Some((snapshot, cursor)) = s.response.reader.as_mut() else {
        return (Bytes::new(), true);
    };
    let remaining = snapshot.len() - *cursor;
    let n = remaining.min(limit);
    let chunk = snapshot.slice(*cursor..*cursor + n);
    *cursor += n;
    (chunk, remaining < limit)
}

/// host-go's ResponseBodyWriter, cached per request: with buffering its first use drops the
/// held body; without, it writes to the client (committing status 200 and the headers).
fn write_response(s: &mut RequestState, bytes: &[u8]) {
    let response = &mut s.response;
    let buffered = *response.writer.get_or_insert_with(|| match response.buffered.as_mut() {
        Some(held) => {
            held.body.clear();
            true
        }
        None => false,
    });
    match (buffered, response.buffered.as_mut()) {
        (true, Some(held)) => held.body.extend_from_slice(bytes),
        _ => response.write(bytes),
    }
}
