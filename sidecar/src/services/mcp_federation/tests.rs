//! The federated endpoint's own answers, before any member is called (the calls themselves are
//! exercised end to end with the `mcp` SDK in tests/python/test_mcp_gateway.py).

use axum::body::Body;
use axum::http::{Request, StatusCode};
use ferrogate_core::mcp::federation::{CLIENT_KEY_HEADER, MEMBERS_HEADER, PATH, SESSION_SCOPE};
use ferrogate_core::mcp::session;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;

use super::{router, Federation};

const TOKEN: &str = "internal";

async fn post(
    gateway: Option<&str>,
    token: &str,
    key: &str,
    members: &str,
    body: &str,
) -> (StatusCode, http::HeaderMap, Value) {
    let fed = Federation::new(gateway.map(str::to_string), Some(TOKEN.into())).unwrap();
    let req = Request::post(PATH)
        .header("authorization", format!("Bearer {token}"))
        .header(CLIENT_KEY_HEADER, key)
        .header(MEMBERS_HEADER, members)
        .body(Body::from(body.to_string()))
        .unwrap();
    let res = router(fed).oneshot(req).await.unwrap();
    let (status, headers) = (res.status(), res.headers().clone());
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    (status, headers, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

fn message(method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "id": 5, "method": method, "params": params}).to_string()
}

#[tokio::test]
async fn initialize_negotiates_and_seals_a_session_to_the_key() {
    let gw = Some("http://127.0.0.1:1");
    let (status, headers, body) =
        post(gw, TOKEN, "vk-1", "tools", &message("initialize", json!({"protocolVersion": "2025-03-26"}))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["id"], 5);
    assert_eq!(body["result"]["protocolVersion"], "2025-03-26");
    assert!(body["result"]["capabilities"]["tools"].is_object());
    let sealed = headers.get("mcp-session-id").unwrap().as_bytes();
    let digest = |k: &str| ferrogate_core::auth::key_digest(k.as_bytes());
    assert!(session::open(&digest("vk-1"), SESSION_SCOPE, sealed).is_ok());
    assert!(session::open(&digest("vk-2"), SESSION_SCOPE, sealed).is_err());
    // A revision this endpoint does not speak gets the latest it does.
    let (_, _, body) =
        post(gw, TOKEN, "vk-1", "tools", &message("initialize", json!({"protocolVersion": "2026-07-28"}))).await;
    assert_eq!(body["result"]["protocolVersion"], super::LATEST_VERSION);
}

#[tokio::test]
async fn refusals_before_any_member_is_called() {
    let gw = Some("http://127.0.0.1:1");
    let ping = message("ping", json!({}));
    assert_eq!(post(gw, "wrong", "k", "tools", &ping).await.0, StatusCode::UNAUTHORIZED);
    let (status, _, body) = post(None, TOKEN, "k", "tools", &ping).await;
    assert_eq!((status, body["error"]["code"].as_i64()), (StatusCode::NOT_IMPLEMENTED, Some(-32603)));
    assert!(body["error"]["message"].as_str().unwrap().contains("--gateway-url"));
    let (status, _, body) = post(gw, TOKEN, "k", "Tools;x", &ping).await;
    assert_eq!((status, body["error"]["code"].as_i64()), (StatusCode::BAD_REQUEST, Some(-32600)));
    let (status, _, body) = post(gw, TOKEN, "k", "tools", "[1]").await;
    assert_eq!((status, body["error"]["code"].as_i64()), (StatusCode::BAD_REQUEST, Some(-32600)));
    let (status, _, _) =
        post(gw, TOKEN, "k", "tools", r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (status, _, body) = post(gw, TOKEN, "k", "tools", &message("tools/call", json!({"name": "other__echo"}))).await;
    assert_eq!((status, body["error"]["code"].as_i64()), (StatusCode::OK, Some(-32602)));
    assert_eq!(body["error"]["message"], "Unknown tool: other__echo");
}
