//! The federated `/mcp` endpoint: one MCP server (streamable HTTP, the `initialize`
//! handshake) over every MCP server a key may use, served on the filter-facing listener.
//!
//! The filter authenticates the key at `/mcp` and sends the request here with the servers the
//! key is granted ([`federation::MEMBERS_HEADER`]) and the key itself
//! ([`federation::CLIENT_KEY_HEADER`]). Each member is reached through the gateway's own
//! `/mcp/{server}` as the caller ([`upstream`]), so grants, credential swap, session binding,
//! limits and usage records are the filter's, applied once. Sessions of this endpoint are
//! sealed to the key like the filter's ([`session`]): any sidecar accepts them, and the
//! members' sessions behind them are a cache, opened again where missing.

pub mod events;
mod listing;
mod methods;
#[cfg(test)]
mod tests;
mod upstream;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use ferrogate_core::mcp::federation::{self, Member};
use ferrogate_core::mcp::session;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};

use crate::services::auth::bearer_ok;

/// The protocol revision this endpoint speaks by default, and those it also accepts.
pub const LATEST_VERSION: &str = "2025-11-25";
const VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];
/// Members' sessions kept at most (a full cache starts over: sessions are reopened on use).
const MAX_SESSIONS: usize = 16_384;

type HttpClient = Client<hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>, Full<Bytes>>;

/// A JSON-RPC error answered to the client.
#[derive(Debug, Clone)]
pub struct RpcError {
    /// The JSON-RPC error code.
    pub code: i64,
    /// What went wrong, for the client.
    pub message: String,
    /// A member's own `data`, passed on.
    pub data: Option<Value>,
}

impl RpcError {
    fn internal(message: String) -> Self {
        Self { code: -32603, message, data: None }
    }
}

/// A member's session: its id (absent for a server without sessions) and revision.
#[derive(Debug, Clone)]
pub struct UpSession {
    /// The member's `Mcp-Session-Id`.
    id: Option<String>,
    /// The revision negotiated, sent as `MCP-Protocol-Version`.
    version: String,
}

/// Members' sessions by (federated session or key, server), and the federated sessions ended
/// by a DELETE here.
#[derive(Default)]
struct Sessions(Mutex<HashMap<(String, String), UpSession>>, Mutex<HashSet<String>>);

impl Sessions {
    /// Marks a federated session as ended (a bounded set: the oldest are forgotten first when
    /// it is full, by starting over).
    fn end(&self, scope: &str) {
        let mut ended = self.1.lock().unwrap_or_else(|p| p.into_inner());
        if ended.len() >= MAX_SESSIONS {
            ended.clear();
        }
        ended.insert(scope.to_string());
    }

    fn has_ended(&self, scope: &str) -> bool {
        self.1.lock().unwrap_or_else(|p| p.into_inner()).contains(scope)
    }

    fn get(&self, scope: &str, server: &str) -> Option<UpSession> {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.get(&(scope.to_string(), server.to_string())).cloned()
    }

    fn put(&self, scope: &str, server: &str, s: UpSession) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= MAX_SESSIONS {
            map.clear();
        }
        map.insert((scope.to_string(), server.to_string()), s);
    }

    fn remove(&self, scope: &str, server: &str) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(&(scope.to_string(), server.to_string()));
    }

    /// Every member session of `scope`, taken out.
    fn take_scope(&self, scope: &str) -> Vec<(String, UpSession)> {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let servers: Vec<(String, String)> = map.keys().filter(|(s, _)| s == scope).cloned().collect();
        servers.into_iter().filter_map(|k| map.remove(&k).map(|s| (k.1, s))).collect()
    }
}

/// The federated endpoint's state.
pub struct Federation {
    /// The gateway's base URL (`http://127.0.0.1:8080`); `None`: not served.
    gateway: Option<String>,
    /// The filter-facing listener's token.
    internal_token: Option<String>,
    /// HTTP client of the calls to the gateway.
    client: HttpClient,
    /// Members' sessions, and ended federated ones.
    sessions: Sessions,
    /// JSON-RPC ids of the calls to members.
    ids: AtomicU64,
}

impl Federation {
    /// `gateway`: where the members are reached (`ferrogate serve`: its own listener; a
    /// standalone sidecar: `--gateway-url`, the proxy's listener). `None` when the machine has
    /// no TLS roots for the client either.
    pub fn new(gateway: Option<String>, internal_token: Option<String>) -> Option<Arc<Self>> {
        let connector = crate::services::targets::probe::connector(std::time::Duration::from_secs(10))?;
        let client = Client::builder(TokioExecutor::new()).build(connector);
        let gateway = gateway.map(|g| g.trim_end_matches('/').to_string());
        Some(Arc::new(Self { gateway, internal_token, client, sessions: Sessions::default(), ids: AtomicU64::new(1) }))
    }

    fn next_id(&self) -> u64 {
        self.ids.fetch_add(1, Ordering::Relaxed)
    }

    /// The scope of the presented `Mcp-Session-Id` (bound to the key: the seal is checked with
    /// its digest, which is also part of the scope); `None` without one.
    fn session_scope(&self, caller: &Caller, headers: &HeaderMap) -> Result<Option<String>, RpcError> {
        let Some(presented) = headers.get("mcp-session-id") else { return Ok(None) };
        let not_found = |why: String| RpcError { code: -32600, message: why, data: None };
        let id = session::open(&caller.digest, federation::SESSION_SCOPE, presented.as_bytes())
            .map_err(|e| not_found(e.to_string()))?;
        let scope = format!("session:{}:{}", caller.digest, String::from_utf8_lossy(id));
        if self.sessions.has_ended(&scope) {
            return Err(not_found("session not found: it was ended (DELETE)".into()));
        }
        Ok(Some(scope))
    }
}

/// Who is asking, as the filter said.
pub struct Caller {
    /// The virtual key, for the calls to `/mcp/{server}`.
    key: Option<String>,
    /// Its `sha256:` digest, as the config writes keys: what sessions are sealed to.
    digest: String,
    /// The servers it may use.
    members: Vec<Member>,
    /// The client request's id, carried on to the members' calls and records.
    request_id: Option<String>,
    /// What members' sessions are cached under: the federated session, else the key.
    scope: String,
    /// `?tools=search`: the list holds only the meta-tools.
    search: bool,
}

impl Caller {
    fn from_request(headers: &HeaderMap, query: Option<&str>) -> Result<Self, RpcError> {
        let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
        let members = federation::parse_members(&text(federation::MEMBERS_HEADER).unwrap_or_default())
            .map_err(|e| RpcError { code: -32600, message: e.to_string(), data: None })?;
        let key = text(federation::CLIENT_KEY_HEADER).filter(|k| !k.is_empty());
        let digest = key.as_deref().map(|k| ferrogate_core::auth::key_digest(k.as_bytes())).unwrap_or_default();
        let search = query.is_some_and(|q| q.split('&').any(|p| p == "tools=search"));
        let request_id = text(ferrogate_core::headers::REQUEST_ID);
        Ok(Self { key, scope: format!("key:{digest}"), digest, members, request_id, search })
    }

    /// The member server named `server`.
    fn member(&self, server: &str) -> Option<&Member> {
        self.members.iter().find(|m| m.name == server)
    }
}

/// `router` (the filter-facing routes) with the federated endpoint's, when its client could be
/// built.
pub fn mount(router: Router, federation: Option<Arc<Federation>>) -> Router {
    match federation {
        Some(f) => router.merge(self::router(f)),
        None => {
            tracing::warn!("no TLS roots for the MCP federation's client: the federated /mcp is not served");
            router
        }
    }
}

/// The federated endpoint's routes, on the filter-facing listener.
pub fn router(fed: Arc<Federation>) -> Router {
    Router::new().route(federation::PATH, post(handle_post).get(handle_get).delete(handle_delete)).with_state(fed)
}

async fn handle_post(
    State(fed): State<Arc<Federation>>,
    headers: HeaderMap,
    RawQuery(q): RawQuery,
    body: Bytes,
) -> Response {
    let (mut caller, gateway) = match admit(&fed, &headers, q.as_deref()) {
        Ok(admitted) => admitted,
        Err(refused) => return *refused,
    };
    let message = match read_message(&body) {
        Ok(m) => m,
        Err((status, e)) => return rpc_error(status, None, &e),
    };
    match fed.session_scope(&caller, &headers) {
        Ok(Some(scope)) => caller.scope = scope,
        Ok(None) => {}
        Err(e) => return rpc_error(StatusCode::NOT_FOUND, message.get("id"), &e),
    }
    let method = message.get("method").and_then(Value::as_str).unwrap_or_default();
    let Some(id) = message.get("id").cloned() else {
        return StatusCode::ACCEPTED.into_response(); // a notification
    };
    if method == "initialize" {
        return initialize(&caller, id, message.get("params"));
    }
    let link = upstream::Link { fed: &fed, gateway: &gateway, caller: &caller };
    let params = message.get("params").cloned().unwrap_or_else(|| json!({}));
    match methods::dispatch(&link, method, params).await {
        Ok(result) => json_response(StatusCode::OK, &json!({"jsonrpc": "2.0", "id": id, "result": result})),
        Err(e) => rpc_error(StatusCode::OK, Some(&id), &e),
    }
}

/// The filter's token checked, the caller read and the gateway known, or the answer refusing.
fn admit(fed: &Federation, headers: &HeaderMap, query: Option<&str>) -> Result<(Caller, String), Box<Response>> {
    if !bearer_ok(headers, fed.internal_token.as_deref()) {
        return Err(Box::new(StatusCode::UNAUTHORIZED.into_response()));
    }
    let caller =
        Caller::from_request(headers, query).map_err(|e| Box::new(rpc_error(StatusCode::BAD_REQUEST, None, &e)))?;
    let Some(gateway) = fed.gateway.clone() else {
        let e = RpcError::internal("the federated /mcp needs the sidecar's --gateway-url".into());
        return Err(Box::new(rpc_error(StatusCode::NOT_IMPLEMENTED, None, &e)));
    };
    Ok((caller, gateway))
}

/// One JSON-RPC message: a batch, or anything that is not a 2.0 request or notification,
/// is refused as the filter refuses it on `/mcp/{server}`.
fn read_message(body: &[u8]) -> Result<Value, (StatusCode, RpcError)> {
    let invalid =
        |code: i64, message: &str| (StatusCode::BAD_REQUEST, RpcError { code, message: message.into(), data: None });
    let message: Value = serde_json::from_slice(body).map_err(|e| invalid(-32700, &format!("parse error: {e}")))?;
    if message.is_array() {
        return Err(invalid(-32600, "invalid request: JSON-RPC batches are not part of MCP (since 2025-06-18)"));
    }
    let is_request = message.get("jsonrpc").and_then(Value::as_str) == Some("2.0")
        && message.get("method").is_some_and(Value::is_string);
    if !is_request {
        return Err(invalid(-32600, "invalid request: not a JSON-RPC 2.0 request or notification"));
    }
    Ok(message)
}

/// `initialize`: the client's revision when this endpoint speaks it, else the latest; a new
/// session sealed to the key.
fn initialize(caller: &Caller, id: Value, params: Option<&Value>) -> Response {
    let asked = params.and_then(|p| p.get("protocolVersion")).and_then(Value::as_str).unwrap_or_default();
    let version = VERSIONS.iter().copied().find(|v| *v == asked).unwrap_or(LATEST_VERSION);
    let result = json!({
        "protocolVersion": version,
        "capabilities": {
            "tools": {"listChanged": false},
            "prompts": {"listChanged": false},
            "resources": {"listChanged": false},
        },
        "serverInfo": {"name": "ferrogate", "version": env!("CARGO_PKG_VERSION")},
        "instructions": "Tools and prompts of several MCP servers, each named <server>__<name>.",
    });
    let mut response = json_response(StatusCode::OK, &json!({"jsonrpc": "2.0", "id": id, "result": result}));
    let fresh = hex::encode(rand::random::<[u8; 16]>());
    let sealed = session::seal(&caller.digest, federation::SESSION_SCOPE, fresh.as_bytes());
    if let Some(value) = sealed.and_then(|s| HeaderValue::from_bytes(&s).ok()) {
        response.headers_mut().insert("mcp-session-id", value);
    }
    response
}

/// No server-initiated stream: the members' notifications are not relayed.
async fn handle_get() -> Response {
    let mut response = StatusCode::METHOD_NOT_ALLOWED.into_response();
    response.headers_mut().insert("allow", HeaderValue::from_static("POST, DELETE"));
    response
}

/// Ends a session: the members' sessions behind it are closed too (each within its timeout),
/// and the session is refused from then on by this sidecar.
async fn handle_delete(State(fed): State<Arc<Federation>>, headers: HeaderMap, RawQuery(q): RawQuery) -> Response {
    let (caller, gateway) = match admit(&fed, &headers, q.as_deref()) {
        Ok(admitted) => admitted,
        Err(refused) => return *refused,
    };
    let scope = match fed.session_scope(&caller, &headers) {
        Ok(Some(scope)) => scope,
        Ok(None) => return StatusCode::BAD_REQUEST.into_response(),
        Err(e) => return rpc_error(StatusCode::NOT_FOUND, None, &e),
    };
    fed.sessions.end(&scope);
    let link = upstream::Link { fed: &fed, gateway: &gateway, caller: &caller };
    let closes = fed.sessions.take_scope(&scope).into_iter().map(|(server, s)| {
        let url = format!("{gateway}/mcp/{server}");
        let limit = caller.member(&server).and_then(|m| m.timeout_ms);
        let limit = limit.map_or(upstream::CLOSE_TIMEOUT, std::time::Duration::from_millis);
        let link = &link;
        async move {
            let why = match tokio::time::timeout(limit, link.send(http::Method::DELETE, &url, Some(&s), None)).await {
                Ok(Ok(_)) => return,
                Ok(Err(e)) => e.message,
                Err(_) => format!("no answer within {} ms", limit.as_millis()),
            };
            tracing::debug!(%server, error = %why, "mcp federation: closing a member's session failed");
        }
    });
    futures_util::future::join_all(closes).await;
    StatusCode::OK.into_response()
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    (status, [(axum::http::header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

fn rpc_error(status: StatusCode, id: Option<&Value>, e: &RpcError) -> Response {
    let mut error = json!({"code": e.code, "message": e.message});
    if let Some(data) = &e.data {
        error["data"] = data.clone();
    }
    json_response(status, &json!({"jsonrpc": "2.0", "id": id.cloned().unwrap_or(Value::Null), "error": error}))
}
