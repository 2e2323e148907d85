//! Per-instance store data and per-request state: what host-go keeps in its `requestState`
//! (core and nethttp halves) plus the `*http.Request` / `http.ResponseWriter` it edits in
//! place, modelled closely enough that the guest observes the same things.

use std::sync::atomic::AtomicU32;
use std::sync::Arc;

use bytes::Bytes;
use wasmtime_wasi::p1::WasiP1Ctx;

use super::header::GoHeader;
use super::uri::RequestUri;

/// Feature bit `buffer_request`.
pub(crate) const BUFFER_REQUEST: u32 = 1;
/// Feature bit `buffer_response`.
pub(crate) const BUFFER_RESPONSE: u32 = 2;

/// The largest piece Go's server hands out per `Read` of a request body once its
/// `bufio.Reader` (4096 bytes) is drained; it decides which piece host-go's buggy
/// `bufferingRequestBody` keeps (see [`RequestBody::read`]).
const SERVER_READ_CHUNK: usize = 4096;

/// Middleware-wide data every instance sees.
pub(crate) struct Shared {
    /// The bytes `get_config` returns.
    pub(crate) config: Vec<u8>,
    /// Features enabled at init (host-go `m.features`): every later request starts with them.
    pub(crate) features: AtomicU32,
}

/// A store's data: WASI, the middleware-wide data and the request being served, if any.
/// `req` is `None` during instantiation, when host-go has no request state in its context.
pub(crate) struct Ctx {
    pub(crate) wasi: WasiP1Ctx,
    pub(crate) shared: Arc<Shared>,
    pub(crate) req: Option<RequestState>,
}

/// One request's state.
pub(crate) struct RequestState {
    /// Features of this request (init-time ones plus those enabled during it).
    pub(crate) features: u32,
    /// Set once `next` returned; host-go's `afterNext` guards.
    pub(crate) after_next: bool,
    pub(crate) method: Vec<u8>,
    pub(crate) uri: RequestUri,
    /// Go's `r.Proto`.
    pub(crate) proto: &'static str,
    /// Go's `r.Host` (not part of `header`, as in Go's server requests).
    pub(crate) host: Vec<u8>,
    /// Go's `r.Header`.
    pub(crate) header: GoHeader,
    /// Go's `r.RemoteAddr`.
    pub(crate) remote: String,
    pub(crate) body: RequestBody,
    pub(crate) response: ResponseWriter,
}

/// The request body: the client's bytes behind a cursor, host-go's buffering wrapper and the
/// guest's replacement.
#[derive(Default)]
pub(crate) struct RequestBody {
    data: Bytes,
    cursor: usize,
    /// How many `bufferingRequestBody` wrappers `r.Body` is (host-go wraps again on every
    /// enable, without a double-wrap guard).
    wraps: u32,
    /// `wraps` when the guest opened its reader (host-go caches the reader of the first read).
    reader_depth: Option<u32>,
    /// The wrappers' buffer: only pieces that came back together with EOF (host-go v0.7.0).
    buffer: Vec<u8>,
    /// What `write_body(0)` wrote: replaces the body at the first write, appends after.
    written: Option<Vec<u8>>,
}

impl RequestBody {
    /// The client's body.
    pub(crate) fn new(data: Bytes) -> RequestBody {
        RequestBody { data, ..RequestBody::default() }
    }

    /// `buffer_request` enabled: one more wrapper around `r.Body`.
    pub(crate) fn wrap(&mut self) {
        self.wraps += 1;
    }

    /// One `read_body(0)` of up to `limit` bytes: the bytes and the EOF flag. Go's server body
    /// returns EOF together with its last bytes, so EOF is set as soon as the cursor reaches
    /// the end. Through a wrapper, host-go v0.7.0 keeps only what a `Read` returned along with
    /// EOF: the final piece, at most [`SERVER_READ_CHUNK`] bytes; a body read in several pieces
    /// reaches `next` truncated (coraza-http-wasm-traefik#15).
    pub(crate) fn read(&mut self, limit: usize) -> (Bytes, bool) {
        let depth = *self.reader_depth.get_or_insert(self.wraps);
        let remaining = self.data.len() - self.cursor;
        let n = remaining.min(limit);
        let out = self.data.slice(self.cursor..self.cursor + n);
        self.cursor += n;
        let eof = n == remaining;
        if depth > 0 && eof && n > 0 {
            let last = n - (n - 1) / SERVER_READ_CHUNK * SERVER_READ_CHUNK;
            self.buffer.extend_from_slice(&out[n - last..]);
        }
        (out, eof)
    }

    /// One `write_body(0)`.
    pub(crate) fn write(&mut self, bytes: &[u8]) {
        // host-go's RequestBodyWriter sets `r.Body` to a fresh buffer: no wrapper any more.
        self.wraps = 0;
        self.written.get_or_insert_with(Vec::new).extend_from_slice(bytes);
    }

    /// What `next` reads (host-go `handleNext`): the guest's body; else, when the outermost
    /// wrapper buffered something through the guest's reader, that buffer; else the unread
    /// remainder of the client's body.
    pub(crate) fn for_next(&self) -> Bytes {
        if let Some(written) = &self.written {
            return Bytes::from(written.clone());
        }
        let outer_buffered = self.wraps > 0 && self.reader_depth == Some(self.wraps) && !self.buffer.is_empty();
        if outer_buffered {
            return Bytes::from(self.buffer.clone());
        }
        self.data.slice(self.cursor..)
    }
}

/// Go's `bufferingResponseWriter`: status (0 = unset) and body held until release.
#[derive(Default)]
pub(crate) struct Buffered {
    pub(crate) status: u32,
    pub(crate) body: Vec<u8>,
}

/// Go's `http.ResponseWriter` with host-go's optional buffering wrapper in front.
#[derive(Default)]
pub(crate) struct ResponseWriter {
    /// `w.Header()`: live until the response is committed; trailers live here as
    /// `Trailer:<name>` keys, as in Go.
    pub(crate) header: GoHeader,
    /// Status and headers once written (`WriteHeader`, or the first `Write`).
    pub(crate) committed: Option<(u16, GoHeader)>,
    /// Body bytes written to the client before `next`'s body (or the whole body without next).
    pub(crate) sent: Vec<u8>,
    /// The buffering wrapper, once `buffer_response` is enabled.
    pub(crate) buffered: Option<Buffered>,
    /// The guest's cached response body writer: `Some(true)` writes into the buffer.
    pub(crate) writer: Option<bool>,
    /// The guest's cached response body reader: a snapshot of the buffered body and a cursor.
    pub(crate) reader: Option<(Bytes, usize)>,
}

impl ResponseWriter {
    /// `WriteHeader(code)` on the client's writer: commits status and the current headers;
    /// later calls are superfluous (Go logs them and changes nothing).
    pub(crate) fn write_header(&mut self, code: u16) {
        if self.committed.is_none() {
            self.committed = Some((code, self.header.clone()));
        }
    }

    /// `Write(bytes)` on the client's writer (an implicit 200 when nothing was committed).
    pub(crate) fn write(&mut self, bytes: &[u8]) {
        self.write_header(200);
        self.sent.extend_from_slice(bytes);
    }

    /// host-go's `bufferingResponseWriter.release`: the held status, then the held body.
    pub(crate) fn release(&mut self) {
        if let Some(held) = self.buffered.take() {
            if held.status != 0 {
                // Go's WriteHeader panics on a code outside 100..=999; the recovery
                // middleware then answers 500.
                let code = u16::try_from(held.status).ok().filter(|c| (100..=999).contains(c));
                self.write_header(code.unwrap_or(500));
            }
            if !held.body.is_empty() {
                self.write(&held.body);
            }
        }
    }

    /// Whether the buffering wrapper is in front.
    pub(crate) fn is_buffering(&self) -> bool {
        self.buffered.is_some()
    }
}

impl RequestState {
    /// host-go nethttp `requestState.enableFeatures`, called with the union of features.
    pub(crate) fn apply_features(&mut self, features: u32) {
        self.features |= features;
        if features & BUFFER_REQUEST != 0 {
            self.body.wrap();
        }
        if self.features & BUFFER_RESPONSE != 0 && self.response.buffered.is_none() {
            self.response.buffered = Some(Buffered::default());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffered_request_keeps_only_the_final_piece() {
        let mut body = RequestBody::new(Bytes::from(vec![7u8; 5000]));
        body.wrap();
        let (first, eof) = body.read(8192);
        assert_eq!((first.len(), eof), (5000, true));
        assert_eq!(body.for_next().len(), 5000 - 4096);

        let mut small = RequestBody::new(Bytes::from_static(b"hello"));
        small.wrap();
        let _ = small.read(2);
        let _ = small.read(16);
        assert_eq!(&small.for_next()[..], b"llo");

        let mut whole = RequestBody::new(Bytes::from_static(b"hello"));
        whole.wrap();
        let _ = whole.read(16);
        assert_eq!(&whole.for_next()[..], b"hello");
    }

    #[test]
    fn unbuffered_read_consumes() {
        let mut body = RequestBody::new(Bytes::from_static(b"hello"));
        let (got, eof) = body.read(2);
        assert_eq!((&got[..], eof), (&b"he"[..], false));
        assert_eq!(&body.for_next()[..], b"llo");
    }
}
