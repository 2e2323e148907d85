//! An http-wasm handler host on wasmtime that runs a middleware the way Traefik v3 does
//! (http-wasm-host-go v0.7.0 on wazero, "host-go" below): the `http_handler` ABI with
//! host-go's signatures, buffer conventions, guards and trap messages; Traefik's start
//! functions and WASI settings; one pooled instance per in-flight request, the same one for
//! `handle_request` and `handle_response`. It is a development and test host: wasm calls run
//! inline in [`Middleware::serve`].
//!
//! What the guest observes follows host-go's `net/http` objects, modelled in `state`: the
//! response writer commits status and headers at the first `set_status_code`/`write_body(1)`
//! without buffer_response (headers set later are lost), the buffering writer holds status
//! and body until release, the request body is consumed by unbuffered reads, and neither
//! body rewrite updates Go's `r.ContentLength` (handed to `next` as [`ContentLength`]).
//!
//! Known deviations from host-go (observable only in corner cases):
//! - `handle_response` runs when `next`'s response head is there, before its body streams
//!   (Go runs it after the proxy copied the body); without buffer_response the guest cannot
//!   see that body, so only the timing differs.
//! - buffer_request keeps, as host-go v0.7.0 does, only the body piece a `Read` returned with
//!   EOF; pieces are modelled as at most 4096 bytes (Go's server `bufio` size), ignoring that
//!   Go's first piece is what follows the request head in the first 4096-byte read.
//! - Reading the request body after `write_body(0)` reads the client's body (Go reads the
//!   written buffer); a trap in `handle_response` is logged and the response sent as it
//!   stands (Traefik's recovery would answer 500 only if nothing was written yet).
//! - WASI: real monotonic clock and random source (Traefik: wazero's fake nanotime and
//!   deterministic random), sleeps really sleep.
//! - An instance whose start function exits with code 0 is pooled but answers every request
//!   with a 500 "module closed with exit_code(0)", as in host-go; a failed lazy
//!   instantiation makes the whole middleware answer 500 (host-go closes its runtime).

mod error;
mod guest;
mod header;
mod imports;
mod memory;
mod response;
mod state;
mod uri;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Mutex, OnceLock};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;

pub use error::HttpWasmError;
use guest::{trap_text, Guest, Template};
pub use header::canonical_key;
use header::GoHeader;
use state::{RequestBody, RequestState, ResponseWriter};
use uri::RequestUri;

/// Response body type of [`Middleware::serve`] and of the `next` handler.
pub type Body = http_body_util::combinators::BoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

/// Go's `r.ContentLength` of the request handed to `next` (`None` = -1: unknown, chunked).
/// host-go never updates it when the guest rewrites or consumes the body, so the caller's
/// proxy must compare it with the body it forwards (Go's transport refuses a mismatch).
/// Inserted into the request's [`http::Extensions`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContentLength(pub Option<u64>);

/// Traefik's per-plugin settings plus the middleware's configuration.
#[derive(Clone, Debug, Default)]
pub struct PluginSettings {
    /// What `get_config` returns (Traefik: the JSON of the middleware's options).
    pub guest_config: Vec<u8>,
    /// Directory mounts in Traefik's syntax: `host`, `host:guest`, optional `:ro` suffix.
    pub mounts: Vec<String>,
    /// The guest's whole environment (name, value).
    pub envs: Vec<(String, String)>,
}

/// One http-wasm middleware: compiled module, linker, guest config, WASI settings and a pool
/// of idle instances (host-go's `middleware`).
pub struct Middleware {
    template: Template,
    pool: Mutex<Vec<Guest>>,
    /// Set when a lazy instantiation failed: host-go then closes the runtime for good.
    dead: OnceLock<String>,
}

impl Middleware {
    /// Compiles `wasm` and instantiates one instance eagerly (host-go does, "to fail fast"):
    /// its start functions run now and its init-time features apply to every request.
    pub fn new(wasm: &[u8], settings: PluginSettings) -> Result<Middleware, HttpWasmError> {
        let template = Template::new(wasm, settings)?;
        // A thread of its own: wasmtime-wasi drives its async WASI calls on a tokio runtime
        // of its own there, whatever runtime (if any) the caller is in.
        let first = std::thread::scope(|scope| {
            let running = scope.spawn(|| wasmtime_wasi::runtime::in_tokio(template.instantiate()));
            running.join().unwrap_or_else(|_| Err(HttpWasmError::Instantiate("instantiation panicked".into())))
        })?;
        Ok(Middleware { template, pool: Mutex::new(vec![first]), dead: OnceLock::new() })
    }

    /// Idle instances in the pool.
    pub fn instances(&self) -> usize {
        self.pool.lock().map(|p| p.len()).unwrap_or(0)
    }

    /// Serves one request like host-go's `ServeHTTP`: `handle_request`, then `next` (the rest
    /// of the chain: Traefik's proxy) when the guest asks for it, then `handle_response`.
    /// `remote` is the client's address (`get_source_addr`).
    pub async fn serve<N, F>(&self, req: Request<Bytes>, remote: SocketAddr, next: N) -> Response<Body>
    where
        N: FnOnce(Request<Bytes>) -> F,
        F: std::future::Future<Output = Response<Body>>,
    {
        if let Some(why) = self.dead.get() {
            return response::plain(StatusCode::INTERNAL_SERVER_ERROR, why.clone());
        }
        let mut guest = match self.checkout().await {
            Ok(g) => g,
            Err(e) => {
                let text = e.to_string();
                let _ = self.dead.set(text.clone());
                return response::plain(StatusCode::INTERNAL_SERVER_ERROR, text);
            }
        };
        let (parts, body) = req.into_parts();
        let features = self.template.shared.features.load(Ordering::SeqCst);
        let content_length = ContentLength(go_content_length(&parts, &body));
        let mut state = request_state(&parts, body, remote);
        state.apply_features(features);
        guest.store.data_mut().req = Some(state);
        let ctx_next = match call_handle_request(&mut guest).await {
            Ok(v) => v,
            Err(text) => return self.respond_error(guest, text),
        };
        if ctx_next as u32 == 0 {
            let state = guest.store.data_mut().req.take();
            // host-go returns the instance when the whole i64 is 0 only: a non-zero high half
            // with next = 0 leaks it (neither handle_response nor the pool).
            if ctx_next == 0 {
                self.checkin(guest);
            }
            return finish_without_next(state);
        }
        let Some(state) = guest.store.data_mut().req.as_mut() else {
            return response::plain(StatusCode::INTERNAL_SERVER_ERROR, "request state lost".into());
        };
        let forwarded = next_request(state, parts, content_length);
        let upstream = next(forwarded).await;
        self.after_next(guest, (ctx_next >> 32) as i32, upstream).await
    }

    /// `next` returned: the proxy writes its response into `w` (buffered or not), then
    /// `handle_response`, then release.
    async fn after_next(&self, mut guest: Guest, req_ctx: i32, upstream: Response<Body>) -> Response<Body> {
        let (parts, body) = upstream.into_parts();
        let Some(state) = guest.store.data_mut().req.as_mut() else {
            return response::plain(StatusCode::INTERNAL_SERVER_ERROR, "request state lost".into());
        };
        state.after_next = true;
        // Go's reverse proxy copies the upstream headers with Add, then writes the status.
        state.response.header.extend_from(&GoHeader::from_map(&parts.headers));
        let buffering = state.response.is_buffering();
        let (is_error, stream) = if buffering {
            let (held, is_error) = collect(body).await;
            if let Some(b) = state.response.buffered.as_mut() {
                b.status = u32::from(parts.status.as_u16());
                b.body.extend_from_slice(&held);
            }
            (is_error, None)
        } else {
            state.response.write_header(parts.status.as_u16());
            (0, Some(body))
        };
        if let Err(e) = guest.handle_response.call_async(&mut guest.store, (req_ctx, is_error)).await {
            log::error!(target: "http_wasm", "handle_response: {}", trap_text(&e));
        }
        let state = guest.store.data_mut().req.take();
        self.checkin(guest);
        let mut writer = state.map(|s| s.response).unwrap_or_default();
        if buffering {
            writer.release();
        }
        response::finish(writer, stream)
    }

    /// A trap in `handle_request`: host-go writes 500 and the error text to the client's
    /// writer, then releases whatever the buffering writer held; the instance goes back.
    fn respond_error(&self, mut guest: Guest, text: String) -> Response<Body> {
        let state = guest.store.data_mut().req.take();
        self.checkin(guest);
        let mut writer = state.map(|s| s.response).unwrap_or_default();
        writer.write_header(500);
        writer.write(text.as_bytes());
        writer.release();
        response::finish(writer, None)
    }

    /// An idle instance, or a new one (host-go `getOrCreateGuest`).
    async fn checkout(&self) -> Result<Guest, HttpWasmError> {
        let idle = self.pool.lock().ok().and_then(|mut p| p.pop());
        match idle {
            Some(g) => Ok(g),
            None => self.template.instantiate().await,
        }
    }

    fn checkin(&self, guest: Guest) {
        if let Ok(mut pool) = self.pool.lock() {
            pool.push(guest);
        }
    }
}

/// Calls `handle_request`; the error text is what host-go would write to the client.
async fn call_handle_request(guest: &mut Guest) -> Result<i64, String> {
    if let Some(closed) = &guest.closed {
        return Err(closed.clone());
    }
    guest.handle_request.call_async(&mut guest.store, ()).await.map_err(|e| trap_text(&e))
}

/// next = 0: the guest's response is final (release, then the implicit 200 if nothing was
/// written).
fn finish_without_next(state: Option<RequestState>) -> Response<Body> {
    let mut writer = state.map(|s| s.response).unwrap_or_default();
    writer.release();
    response::finish(writer, None)
}

/// Go's server-side request as host-go sees it.
fn request_state(parts: &http::request::Parts, body: Bytes, remote: SocketAddr) -> RequestState {
    let host_header = parts.headers.get(http::header::HOST).map(|h| h.as_bytes().to_vec());
    let host = match parts.uri.authority() {
        Some(a) => a.as_str().as_bytes().to_vec(),
        None => host_header.unwrap_or_default(),
    };
    let mut header = GoHeader::from_map(&parts.headers);
    header.remove("host");
    RequestState {
        features: 0,
        after_next: false,
        method: parts.method.as_str().as_bytes().to_vec(),
        uri: RequestUri::from_http(&parts.uri),
        proto: proto(parts.version),
        host,
        header,
        remote: remote.to_string(),
        body: RequestBody::new(body),
        response: ResponseWriter::default(),
    }
}

/// Go's `r.Proto`.
fn proto(version: http::Version) -> &'static str {
    match version {
        http::Version::HTTP_09 => "HTTP/0.9",
        http::Version::HTTP_10 => "HTTP/1.0",
        http::Version::HTTP_2 => "HTTP/2.0",
        http::Version::HTTP_3 => "HTTP/3.0",
        _ => "HTTP/1.1",
    }
}

/// Go's server `r.ContentLength`: the Content-Length header; -1 (`None`) for a chunked body;
/// 0 for an HTTP/1 request with neither header; on HTTP/2, 0 for an empty body, else -1.
fn go_content_length(parts: &http::request::Parts, body: &Bytes) -> Option<u64> {
    if let Some(v) = parts.headers.get(http::header::CONTENT_LENGTH) {
        return v.to_str().ok().and_then(|s| s.trim().parse().ok());
    }
    if parts.headers.contains_key(http::header::TRANSFER_ENCODING) {
        return None;
    }
    match parts.version {
        http::Version::HTTP_2 | http::Version::HTTP_3 if !body.is_empty() => None,
        _ => Some(0),
    }
}

/// The request `next` gets: the guest's edits, Go's `r.Host` as `host` (a `Host` the guest set
/// in `r.Header` is ignored by Go's transport), the body as host-go's `handleNext` leaves it.
fn next_request(s: &RequestState, parts: http::request::Parts, length: ContentLength) -> Request<Bytes> {
    let mut headers = s.header.to_map(|k| k != "Host");
    if let Ok(host) = http::HeaderValue::from_bytes(&s.host) {
        if !s.host.is_empty() {
            headers.insert(http::header::HOST, host);
        }
    }
    let mut path = uri::escaped_path(&s.uri.path);
    if path.is_empty() {
        path.push('/');
    }
    if let Some(q) = &s.uri.query {
        path = format!("{path}?{q}");
    }
    let mut uri = http::uri::Builder::new();
    if let (Some(scheme), Some(authority)) = (parts.uri.scheme(), parts.uri.authority()) {
        uri = uri.scheme(scheme.clone()).authority(authority.clone());
    }
    let mut req = Request::new(s.body.for_next());
    *req.method_mut() = http::Method::from_bytes(&s.method).unwrap_or(parts.method);
    *req.uri_mut() = uri.path_and_query(path).build().unwrap_or(parts.uri);
    *req.version_mut() = parts.version;
    *req.headers_mut() = headers;
    *req.extensions_mut() = parts.extensions;
    req.extensions_mut().insert(length);
    req
}

/// The whole upstream body for the buffering writer; on a read error, what came so far and
/// `is_error = 1` (Go's proxy panics with ErrAbortHandler, which host-go's `handleNext`
/// recovers and reports to `handle_response`).
async fn collect(body: Body) -> (Bytes, i32) {
    let mut body = body;
    let mut held = Vec::new();
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => {
                if let Ok(data) = frame.into_data() {
                    held.extend_from_slice(&data);
                }
            }
            Err(_) => return (Bytes::from(held), 1),
        }
    }
    (Bytes::from(held), 0)
}
