//! `ferrogate http-wasm`: runs an http-wasm middleware (such as ferrogate's Traefik build) in
//! front of HTTP services the way Traefik runs it, for trying and testing the Traefik build
//! where no Traefik is installed. It emulates one Traefik router: the entrypoint listener,
//! the middleware (on `ferrogate_host::httpwasm`, host-go's semantics), then dispatch to the
//! service whose `--route` value equals the routing header the middleware set (the documented
//! topology: internal Traefik routers matching `Header(<route-header>, VALUE)`), forwarded the
//! way Traefik's proxy (Go's `httputil.ReverseProxy` and transport) forwards.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ferrogate_host::httpwasm::{Body, ContentLength, HttpWasmError, Middleware, PluginSettings};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};

/// Options of `ferrogate http-wasm`.
#[derive(clap::Args, Clone, Debug)]
pub struct HttpWasmArgs {
    /// The http-wasm middleware module (Traefik's `wasmPath`).
    #[arg(long)]
    pub wasm: PathBuf,
    /// The entrypoint listener (HTTP/1.1 and h2c); port 0 picks a free one, printed at start.
    #[arg(long, default_value = "127.0.0.1:8090")]
    pub listen: SocketAddr,
    /// The middleware's options as in Traefik's dynamic configuration (the map under
    /// `plugin.<name>`), YAML or JSON; handed to the guest as Go's json.Marshal would (compact,
    /// keys sorted, HTML-escaped); default: none, the guest gets `null`.
    #[arg(long)]
    pub settings: Option<PathBuf>,
    /// A directory to mount in the guest, in Traefik's syntax (`host`, `host:guest`, optional
    /// `:ro`); repeatable; default: none.
    #[arg(long = "mount", value_name = "SPEC")]
    pub mounts: Vec<String>,
    /// An environment variable to pass to the guest with its value from this process's
    /// environment (empty when unset, like Go's os.Getenv); repeatable; default: none, the
    /// guest's environment is empty.
    #[arg(long = "env", value_name = "NAME")]
    pub envs: Vec<String>,
    /// Requests whose routing header equals VALUE go to the service at URL (http or https; a
    /// path in URL prefixes the request's); repeatable; default: none, every request is 404.
    #[arg(long = "route", value_name = "VALUE=URL", value_parser = parse_route)]
    pub routes: Vec<Route>,
    /// The request header the middleware sets to pick the route.
    #[arg(long, default_value = "x-ferrogate-cluster")]
    pub route_header: String,
    /// Emulate Traefik's `buffering` middleware placed after the plugin: the request handed on
    /// gets Content-Length = its real body length (oxy's copyRequest) and the service's
    /// response is buffered whole.
    #[arg(long)]
    pub buffering: bool,
}

/// One `--route`.
#[derive(Clone, Debug)]
pub struct Route {
    /// The routing header's value.
    pub value: String,
    /// The service.
    pub url: http::Uri,
}

fn parse_route(spec: &str) -> Result<Route, String> {
    let (value, url) = spec.split_once('=').ok_or("expected VALUE=URL")?;
    let url: http::Uri = url.parse().map_err(|e| format!("{url}: {e}"))?;
    match (url.scheme_str(), url.authority()) {
        (Some("http" | "https"), Some(_)) => Ok(Route { value: value.to_string(), url }),
        _ => Err(format!("{url}: expected an http:// or https:// URL")),
    }
}

/// Why the command could not start.
#[derive(Debug, thiserror::Error)]
pub enum HttpWasmCmdError {
    /// The module file cannot be read.
    #[error("{path}: {source}")]
    Wasm {
        /// The `--wasm` path.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The settings file cannot be read or parsed.
    #[error("{path}: {message}")]
    Settings {
        /// The `--settings` path.
        path: String,
        /// Why.
        message: String,
    },
    /// The host refused the module or its settings.
    #[error(transparent)]
    Middleware(#[from] HttpWasmError),
    /// The listener cannot be bound, or the TLS roots cannot be loaded.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// The running command: the entrypoint's address; stops accepting when dropped.
pub struct HttpWasmGateway {
    /// Where the entrypoint listens.
    pub addr: SocketAddr,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for HttpWasmGateway {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// What every connection shares.
struct Entry {
    middleware: Middleware,
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    routes: Vec<Route>,
    route_header: http::HeaderName,
    buffering: bool,
}

impl HttpWasmGateway {
    /// Loads the module and settings, builds the middleware (its first instance runs its
    /// start functions now) and starts listening.
    pub async fn start(args: &HttpWasmArgs) -> Result<HttpWasmGateway, HttpWasmCmdError> {
        let shown = args.wasm.display().to_string();
        let wasm = std::fs::read(&args.wasm).map_err(|source| HttpWasmCmdError::Wasm { path: shown, source })?;
        let settings = PluginSettings {
            guest_config: guest_config(args.settings.as_deref())?,
            mounts: args.mounts.clone(),
            envs: args.envs.iter().map(|n| (n.clone(), std::env::var(n).unwrap_or_default())).collect(),
        };
        let middleware = tokio::task::spawn_blocking(move || Middleware::new(&wasm, settings))
            .await
            .map_err(|e| HttpWasmError::Instantiate(e.to_string()))??;
        let route_header = http::HeaderName::from_bytes(args.route_header.as_bytes())
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("--route-header: {e}")))?;
        let entry = Arc::new(Entry {
            middleware,
            client: client()?,
            routes: args.routes.clone(),
            route_header,
            buffering: args.buffering,
        });
        let listener = tokio::net::TcpListener::bind(args.listen).await?;
        let addr = listener.local_addr()?;
        let accept = tokio::spawn(accept_loop(listener, entry));
        tracing::info!(%addr, wasm = %args.wasm.display(), "ferrogate http-wasm listening");
        Ok(HttpWasmGateway { addr, accept })
    }
}

/// The guest's `get_config` bytes from `--settings`.
fn guest_config(path: Option<&std::path::Path>) -> Result<Vec<u8>, HttpWasmCmdError> {
    let Some(path) = path else { return Ok(b"null".to_vec()) };
    let fail = |message: String| HttpWasmCmdError::Settings { path: path.display().to_string(), message };
    let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
    let value: serde_json::Value = serde_saphyr::from_str(&text).map_err(|e| fail(e.to_string()))?;
    let mut out = String::new();
    go_json(&value, &mut out);
    Ok(out.into_bytes())
}

/// Go's `json.Marshal` of the decoded value: compact, object keys sorted, `<` `>` `&` and
/// U+2028/U+2029 escaped.
pub fn go_json(value: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => go_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                go_json(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                go_string(key, out);
                out.push(':');
                go_json(&map[key.as_str()], out);
            }
            out.push('}');
        }
    }
}

fn go_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// The proxy's client: HTTP/1.1 or HTTP/2 (ALPN) over TLS, plain HTTP/1.1 otherwise.
fn client() -> std::io::Result<Client<HttpsConnector<HttpConnector>, Full<Bytes>>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_native_roots(provider)?
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(http);
    Ok(Client::builder(TokioExecutor::new()).pool_idle_timeout(Duration::from_secs(90)).set_host(false).build(https))
}

/// The hop-by-hop headers Go's `httputil.ReverseProxy` removes from an answer (`Trailer` aside,
/// which it re-announces).
const HOP_BY_HOP: [&str; 7] =
    ["connection", "proxy-connection", "keep-alive", "proxy-authenticate", "te", "transfer-encoding", "upgrade"];

async fn accept_loop(listener: tokio::net::TcpListener, entry: Arc<Entry>) {
    loop {
        let (stream, remote) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!("accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let entry = entry.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let entry = entry.clone();
                async move { Ok::<_, Infallible>(entry.handle(req, remote).await) }
            });
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            if let Err(e) = builder.serve_connection(TokioIo::new(stream), service).await {
                tracing::debug!("connection from {remote}: {e}");
            }
        });
    }
}

impl Entry {
    /// Entrypoint → middleware → dispatch.
    async fn handle(self: Arc<Self>, req: Request<hyper::body::Incoming>, remote: SocketAddr) -> Response<Body> {
        let (parts, body) = req.into_parts();
        let body = match body.collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(e) => return text(StatusCode::BAD_REQUEST, format!("reading the request body: {e}")),
        };
        let req = Request::from_parts(parts, body);
        let this = self.clone();
        self.middleware.serve(req, remote, move |forwarded| async move { this.next(forwarded).await }).await
    }

    /// What follows the plugin: `--buffering`'s middleware if asked, then the router.
    async fn next(&self, mut req: Request<Bytes>) -> Response<Body> {
        if !self.buffering {
            return self.dispatch(req).await;
        }
        // oxy's buffer copyRequest: the body as read, with its real length.
        let real = req.body().len() as u64;
        req.extensions_mut().insert(ContentLength(Some(real)));
        let response = self.dispatch(req).await;
        let (parts, body) = response.into_parts();
        match body.collect().await {
            Ok(collected) => Response::from_parts(parts, full(collected.to_bytes())),
            Err(_) => text(StatusCode::BAD_GATEWAY, "Bad Gateway".into()),
        }
    }

    /// Traefik's routers and proxy: 404 without a route, else forward.
    async fn dispatch(&self, req: Request<Bytes>) -> Response<Body> {
        let value = req.headers().get(&self.route_header).and_then(|v| v.to_str().ok()).unwrap_or_default();
        let Some(route) = self.routes.iter().find(|r| r.value == value) else {
            return not_found();
        };
        let length = req.extensions().get::<ContentLength>().copied().unwrap_or(ContentLength(None));
        let (mut parts, body) = req.into_parts();
        let body = match length.0 {
            // Go's ReverseProxy sends no body at all when r.ContentLength is 0.
            Some(0) => Bytes::new(),
            // Go's transport refuses a body that does not match r.ContentLength, and Traefik's
            // proxy answers its error as a bare 500 (the reason only in its log).
            Some(n) if n != body.len() as u64 => {
                let message = format!("http: ContentLength={n} with Body length {}", body.len());
                tracing::warn!("500 Internal Server Error: {message}");
                return text(StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error".to_string());
            }
            _ => body,
        };
        match upstream_uri(&route.url, &parts.uri) {
            Some(uri) => parts.uri = uri,
            None => return text(StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error".into()),
        }
        parts.version = http::Version::HTTP_11;
        if let Some(authority) = route.url.authority() {
            if let Ok(host) = http::HeaderValue::from_str(authority.as_str()) {
                parts.headers.insert(http::header::HOST, host);
            }
        }
        parts.headers.remove(http::header::CONTENT_LENGTH);
        parts.headers.remove(http::header::TRANSFER_ENCODING);
        if length.0.is_some() || !body.is_empty() {
            parts.headers.insert(http::header::CONTENT_LENGTH, body.len().into());
        }
        self.forward(Request::from_parts(parts, Full::new(body))).await
    }

    async fn forward(&self, req: Request<Full<Bytes>>) -> Response<Body> {
        match self.client.request(req).await {
            Ok(mut resp) => {
                // Go's ReverseProxy drops the hop-by-hop headers of the answer (its Transfer-Encoding
                // is not even a header in Go): the middleware never sees them, and a body it
                // rewrites goes out with its own framing.
                for name in HOP_BY_HOP {
                    resp.headers_mut().remove(name);
                }
                resp.map(|b| b.map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>).boxed())
            }
            Err(e) => {
                tracing::debug!("502 Bad Gateway: {e}");
                text(StatusCode::BAD_GATEWAY, "Bad Gateway".into())
            }
        }
    }
}

/// The service URL's scheme and authority, its path joined with the request's (Go's
/// `singleJoiningSlash`), and the query with `;` turned into `&` as Traefik does.
fn upstream_uri(service: &http::Uri, request: &http::Uri) -> Option<http::Uri> {
    let base = service.path().trim_end_matches('/');
    let path = request.path();
    let joined = if path.starts_with('/') { format!("{base}{path}") } else { format!("{base}/{path}") };
    let path_and_query = match request.query() {
        Some(q) => format!("{joined}?{}", q.replace(';', "&")),
        None => joined,
    };
    http::Uri::builder()
        .scheme(service.scheme_str()?)
        .authority(service.authority()?.as_str())
        .path_and_query(path_and_query)
        .build()
        .ok()
}

fn full(bytes: Bytes) -> Body {
    Full::new(bytes).map_err(|never| match never {}).boxed()
}

fn text(status: StatusCode, body: String) -> Response<Body> {
    let mut response = Response::new(full(Bytes::from(body)));
    *response.status_mut() = status;
    response
}

/// Go's `http.NotFound`, what Traefik answers when no router matches.
fn not_found() -> Response<Body> {
    let mut response = text(StatusCode::NOT_FOUND, "404 page not found\n".into());
    let headers = response.headers_mut();
    headers.insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("text/plain; charset=utf-8"));
    headers.insert(http::header::X_CONTENT_TYPE_OPTIONS, http::HeaderValue::from_static("nosniff"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_marshalled_like_go() {
        let value: serde_json::Value = serde_saphyr::from_str("b: 1\na: \"<x> & y\"\nc: [true, null]\n").unwrap();
        let mut out = String::new();
        go_json(&value, &mut out);
        assert_eq!(out, r#"{"a":"\u003cx\u003e \u0026 y","b":1,"c":[true,null]}"#);
    }

    #[test]
    fn upstream_paths_join_like_traefik() {
        let service: http::Uri = "http://10.0.0.1:8000/base/".parse().unwrap();
        let uri = upstream_uri(&service, &"/v1/x?a=1;b=2".parse().unwrap()).unwrap();
        assert_eq!(uri, "http://10.0.0.1:8000/base/v1/x?a=1&b=2");
    }
}
