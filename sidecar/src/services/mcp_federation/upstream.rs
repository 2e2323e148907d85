//! The federation's MCP client: each member server reached through the gateway's own
//! `/mcp/{server}` with the caller's key, so the filter checks the grant, swaps in the server's
//! credential, seals the session and records the call exactly as for a direct client.
//!
//! Streamable HTTP members keep one upstream session per federated session (or per key, for
//! clients without one), opened on first use and opened again when the server has forgotten
//! it (404). HTTP+SSE members get a short session per call: their answers travel on a GET
//! stream that would otherwise have to be held open between the client's requests.

use std::time::Duration;

use bytes::Bytes;
use ferrogate_core::mcp::federation::Member;
use http::{header, HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use serde_json::{json, Value};

use super::events::EventReader;
use super::{Caller, Federation, RpcError, UpSession, LATEST_VERSION};

/// Largest JSON answer read from a member.
const BODY_LIMIT: usize = 16 << 20;
/// How long a member may take when it has no `timeout` of its own (the filter enforces a
/// configured one on the gateway's side).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
/// How long closing a member's session may take when the member has no `timeout_ms`.
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

/// A POST's outcome short of a JSON-RPC answer.
enum PostError {
    /// The member no longer knows the session (404): open a new one.
    Stale,
    Rpc(RpcError),
}

impl From<RpcError> for PostError {
    fn from(e: RpcError) -> Self {
        PostError::Rpc(e)
    }
}

/// The caller's view of the members, for one federated request.
pub struct Link<'a> {
    /// The endpoint's state (client, sessions).
    pub fed: &'a Federation,
    /// The gateway's base URL.
    pub gateway: &'a str,
    /// Who calls.
    pub caller: &'a Caller,
}

impl Link<'_> {
    /// Calls `method` on `member` and returns its result, within the member's timeout.
    pub async fn call(&self, member: &Member, method: &str, params: Value) -> Result<Value, RpcError> {
        let limit = member.timeout_ms.map_or(DEFAULT_TIMEOUT, Duration::from_millis);
        let call = async {
            if member.sse {
                self.call_sse(member, method, params).await
            } else {
                self.call_streamable(member, method, params).await
            }
        };
        tokio::time::timeout(limit, call)
            .await
            .unwrap_or_else(|_| Err(unavailable(&member.name, &format!("no answer within {} ms", limit.as_millis()))))
    }

    async fn call_streamable(&self, m: &Member, method: &str, params: Value) -> Result<Value, RpcError> {
        let cached = self.fed.sessions.get(&self.caller.scope, &m.name);
        let session = match &cached {
            Some(s) => s.clone(),
            None => self.open(m).await?,
        };
        match self.post(m, Some(&session), method, params.clone()).await {
            Ok((answer, _)) => Ok(answer),
            Err(PostError::Stale) if cached.is_some() => {
                self.fed.sessions.remove(&self.caller.scope, &m.name);
                let session = self.open(m).await?;
                self.post(m, Some(&session), method, params).await.map(|(a, _)| a).map_err(|e| stale_again(m, e))
            }
            Err(e) => Err(stale_again(m, e)),
        }
    }

    /// The `initialize` handshake with a member; the session is kept for the next calls.
    async fn open(&self, m: &Member) -> Result<UpSession, RpcError> {
        let (result, head) =
            self.post(m, None, "initialize", initialize_params()).await.map_err(|e| stale_again(m, e))?;
        let session = UpSession {
            id: head.get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_string),
            version: result.get("protocolVersion").and_then(Value::as_str).unwrap_or(LATEST_VERSION).to_string(),
        };
        self.notify(&self.member_url(m), Some(&session), "notifications/initialized").await?;
        self.fed.sessions.put(&self.caller.scope, &m.name, session.clone());
        Ok(session)
    }

    /// Sends one request to a streamable HTTP member and reads its answer (JSON or events).
    async fn post(
        &self,
        m: &Member,
        session: Option<&UpSession>,
        method: &str,
        params: Value,
    ) -> Result<(Value, HeaderMap), PostError> {
        let id = self.fed.next_id();
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let response = self.send(Method::POST, &self.member_url(m), session, Some(&message)).await?;
        let status = response.status();
        if status == StatusCode::NOT_FOUND && session.is_some_and(|s| s.id.is_some()) {
            return Err(PostError::Stale);
        }
        if !status.is_success() {
            return Err(PostError::Rpc(failure(response, &m.name).await));
        }
        let head = response.headers().clone();
        let answer = if is_event_stream(&head) {
            answer_in_events(&mut EventReader::new(response.into_body()), id, &m.name).await?
        } else {
            json_answer(response.into_body(), status, &m.name).await?
        };
        Ok((outcome(answer, &m.name)?, head))
    }

    /// Sends a notification; a member answers 202 (or 200/204).
    async fn notify(&self, url: &str, session: Option<&UpSession>, method: &str) -> Result<(), RpcError> {
        let message = json!({"jsonrpc": "2.0", "method": method});
        let response = self.send(Method::POST, url, session, Some(&message)).await?;
        match response.status() {
            s if s.is_success() => Ok(()),
            s => Err(RpcError::internal(format!("{method} answered HTTP {s}"))),
        }
    }

    /// One HTTP request to the gateway as the caller.
    pub(super) async fn send(
        &self,
        method: Method,
        url: &str,
        session: Option<&UpSession>,
        body: Option<&Value>,
    ) -> Result<http::Response<hyper::body::Incoming>, RpcError> {
        let mut request =
            Request::builder().method(method).uri(url).header(header::ACCEPT, "application/json, text/event-stream");
        if let Some(key) = &self.caller.key {
            request = request.header(header::AUTHORIZATION, format!("Bearer {key}"));
        }
        if let Some(id) = &self.caller.request_id {
            request = request.header(ferrogate_core::headers::REQUEST_ID, id);
        }
        if let Some(s) = session {
            if let Some(id) = &s.id {
                request = request.header("mcp-session-id", id);
            }
            request = request.header("mcp-protocol-version", &s.version);
        }
        let bytes = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
        if body.is_some() {
            request = request.header(header::CONTENT_TYPE, "application/json");
        }
        let request = request.body(Full::new(bytes)).map_err(|e| RpcError::internal(e.to_string()))?;
        self.fed.client.request(request).await.map_err(|e| {
            // The client is told the gateway failed; the address and the cause go to the log.
            tracing::warn!(gateway = %self.gateway, error = %crate::serve::upstream::error_chain(&e), "mcp federation: the gateway did not answer");
            RpcError::internal("the gateway did not answer the federation's call to the MCP server".into())
        })
    }

    fn member_url(&self, m: &Member) -> String {
        format!("{}/mcp/{}", self.gateway, m.name)
    }

    /// A call on an HTTP+SSE member: the GET stream opened, the handshake and the request
    /// sent to the endpoint it names, their answers read off the stream, the stream closed.
    async fn call_sse(&self, m: &Member, method: &str, params: Value) -> Result<Value, RpcError> {
        let response = self.send(Method::GET, &self.member_url(m), None, None).await?;
        if !response.status().is_success() {
            return Err(failure(response, &m.name).await);
        }
        let mut events = EventReader::new(response.into_body());
        let endpoint = loop {
            match events.next().await.map_err(|e| unavailable(&m.name, &e))? {
                Some(e) if e.name.as_deref() == Some("endpoint") => break e.data,
                Some(_) => continue,
                None => return Err(unavailable(&m.name, "the event stream ended before naming its endpoint")),
            }
        };
        let url = format!("{}{}", self.gateway, endpoint.trim());
        let init = self.sse_request(&url, &mut events, &m.name, "initialize", initialize_params()).await?;
        let version = init.get("protocolVersion").and_then(Value::as_str).unwrap_or(LATEST_VERSION).to_string();
        let session = UpSession { id: None, version };
        self.notify(&url, Some(&session), "notifications/initialized").await?;
        self.sse_request(&url, &mut events, &m.name, method, params).await
    }

    async fn sse_request<B>(
        &self,
        url: &str,
        events: &mut EventReader<B>,
        server: &str,
        method: &str,
        params: Value,
    ) -> Result<Value, RpcError>
    where
        B: http_body::Body<Data = Bytes> + Unpin,
        B::Error: std::fmt::Display,
    {
        let id = self.fed.next_id();
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let response = self.send(Method::POST, url, None, Some(&message)).await?;
        if !response.status().is_success() {
            return Err(failure(response, server).await);
        }
        outcome(answer_in_events(events, id, server).await?, server)
    }
}

fn initialize_params() -> Value {
    json!({
        "protocolVersion": LATEST_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "ferrogate-federation", "version": env!("CARGO_PKG_VERSION")},
    })
}

fn is_event_stream(head: &HeaderMap) -> bool {
    head.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|v| v.starts_with("text/event-stream"))
}

/// The JSON-RPC answer with `id` among the stream's events (notifications and requests the
/// server sends meanwhile are passed over).
async fn answer_in_events<B>(events: &mut EventReader<B>, id: u64, server: &str) -> Result<Value, RpcError>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    loop {
        let Some(event) = events.next().await.map_err(|e| unavailable(server, &e))? else {
            return Err(unavailable(server, "the answer's event stream ended without a result"));
        };
        let Ok(message) = serde_json::from_str::<Value>(&event.data) else { continue };
        let is_answer = message.get("result").is_some() || message.get("error").is_some();
        if is_answer && message.get("id").and_then(Value::as_u64) == Some(id) {
            return Ok(message);
        }
    }
}

/// A 2xx answer's JSON message.
async fn json_answer(body: Incoming, status: StatusCode, server: &str) -> Result<Value, RpcError> {
    let bytes = Limited::new(body, BODY_LIMIT).collect().await.map_err(|e| unavailable(server, &e.to_string()))?;
    let bytes = bytes.to_bytes();
    serde_json::from_slice(&bytes).map_err(|_| unavailable(server, &format!("HTTP {status} {}", opening(&bytes))))
}

/// An HTTP error answer as the error it says: a JSON-RPC error body (the filter writes every
/// refusal and proxy error so) becomes that error, naming the server; anything else names
/// the status and the body's opening.
async fn failure(response: http::Response<Incoming>, server: &str) -> RpcError {
    let status = response.status();
    let bytes =
        Limited::new(response.into_body(), BODY_LIMIT).collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(m) if m.get("error").is_some() => member_error(&m, server, Some(status)),
        _ => unavailable(server, &format!("HTTP {status} {}", opening(&bytes))),
    }
}

/// The first 200 bytes of a body, for an error message.
fn opening(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes.get(..bytes.len().min(200)).unwrap_or_default()).into_owned()
}

/// A member's answer: its result, or its error passed on.
fn outcome(message: Value, server: &str) -> Result<Value, RpcError> {
    if message.get("error").is_some() {
        return Err(member_error(&message, server, None));
    }
    Ok(message.get("result").cloned().unwrap_or(Value::Null))
}

/// A member's JSON-RPC error, kept as it is when it answered (HTTP 200: e.g. an unknown
/// tool), named after the server when the gateway answered for it (HTTP error status).
fn member_error(message: &Value, server: &str, status: Option<StatusCode>) -> RpcError {
    let error = message.get("error");
    let code = error.and_then(|e| e.get("code")).and_then(Value::as_i64).unwrap_or(-32603);
    let text = error.and_then(|e| e.get("message")).and_then(Value::as_str).unwrap_or("error");
    match status {
        None => RpcError { code, message: text.to_string(), data: error.and_then(|e| e.get("data")).cloned() },
        Some(s) => {
            RpcError { code, message: format!("MCP server `{server}` (HTTP {}): {text}", s.as_u16()), data: None }
        }
    }
}

fn unavailable(server: &str, why: &str) -> RpcError {
    RpcError::internal(format!("MCP server `{server}` is unavailable: {why}"))
}

fn stale_again(m: &Member, e: PostError) -> RpcError {
    match e {
        PostError::Rpc(e) => e,
        PostError::Stale => unavailable(&m.name, "it answered 404 to a session it had just opened"),
    }
}
