//! The response store, memory and Postgres (the machine's real PostgreSQL, a schema of its own
//! per test, see `pg::tests::Schema`), against one set of expectations; and the routes'
//! answers in OpenAI's shapes.

use std::sync::{Arc, OnceLock};

use axum::body::Body;
use axum::http::Request;
use ferrogate_core::config::Responses;
use serde_json::{json, Value};
use tower::ServiceExt;

use super::api::ResponsesApi;
use super::*;
use crate::services::pg::tests::Schema;
use crate::services::pg::PgStore;

fn entry(id: &str, at: u64, size: usize) -> Entry {
    Entry {
        id: id.into(),
        created_ms: at,
        expires_ms: at + 1_000,
        response: format!(r#"{{"id":"{id}","pad":"{}"}}"#, "x".repeat(size)),
        input_items: "[]".into(),
        origin: String::new(),
        tokens: 0,
        cost_micros: 0,
    }
}

pub(super) fn retention(max_entries: u64, max_bytes_per_key: u64) -> Responses {
    Responses { ttl_ms: 1_000, max_entries, max_bytes_per_key, max_chain_depth: 4, ..Responses::default() }
}

/// The schema comes first so that it is dropped last, after the store's connections.
pub(super) async fn postgres(retention: Responses) -> (Schema, ResponseStore) {
    let schema = Schema::new().await;
    let store = Arc::new(PgStore::connect(&schema.url, None).await.unwrap());
    let db = Database { store, changed: Default::default(), redis: None };
    let slot = Arc::new(OnceLock::new());
    slot.set(db).unwrap();
    (schema, ResponseStore::choose(true, &slot, retention))
}

/// Owners see only their own entries; a read or delete after expiry finds nothing.
async fn isolates_and_expires(store: &ResponseStore) {
    assert!(store.put("sha256:a", entry("resp_1", 10_000, 10)).await.unwrap());
    assert_eq!(store.get("sha256:a", "resp_1", 10_500).await.unwrap().map(|e| e.id), Some("resp_1".into()));
    assert_eq!(store.get("sha256:b", "resp_1", 10_500).await.unwrap(), None);
    assert_eq!(store.get("", "resp_1", 10_500).await.unwrap(), None);
    assert!(!store.delete("sha256:b", "resp_1", 10_500).await.unwrap());
    assert_eq!(store.get("sha256:a", "resp_1", 11_000).await.unwrap(), None, "expired at created + ttl");
    assert!(!store.delete("sha256:a", "resp_1", 11_000).await.unwrap());
    assert!(store.put("sha256:a", entry("resp_2", 20_000, 10)).await.unwrap());
    assert!(store.delete("sha256:a", "resp_2", 20_001).await.unwrap());
    assert_eq!(store.get("sha256:a", "resp_2", 20_002).await.unwrap(), None);
    assert!(store.put("sha256:a", entry("resp_3", 20_000, 10)).await.unwrap());
    assert_eq!(store.sweep(20_500).await.unwrap(), 1, "resp_1, expired long ago");
    assert_eq!(store.sweep(30_000).await.unwrap(), 1, "the expired resp_3 is swept");
    assert_eq!(store.get("sha256:a", "resp_3", 0).await.unwrap(), None, "swept, not only hidden");
}

/// A key over its bytes loses its own oldest entries; the store over its entries, the oldest.
async fn keeps_its_bounds(store: &ResponseStore) {
    let size = entry("resp_a1", 0, 100).bytes();
    for (i, id) in ["resp_a1", "resp_a2", "resp_a3"].into_iter().enumerate() {
        assert!(store.put("a", entry(id, 1_000 + i as u64, 100)).await.unwrap());
    }
    assert!(store.put("b", entry("resp_b1", 1_010, 100)).await.unwrap());
    let alive =
        |owner: &'static str, id: &'static str| async move { store.get(owner, id, 1_100).await.unwrap().is_some() };
    // Two of `a`'s fit in 2.5 entries' bytes: the first went.
    assert!(!alive("a", "resp_a1").await);
    assert!(alive("a", "resp_a2").await && alive("a", "resp_a3").await && alive("b", "resp_b1").await);
    assert!(!store.put("a", entry("resp_big", 1_020, 1_000)).await.unwrap(), "larger than a key may keep");
    assert!(store.put("c", entry("resp_c1", 1_030, 10)).await.unwrap());
    // Three entries at most (Postgres trims on its sweep, memory at once): `a`'s oldest left went.
    store.sweep(1_100).await.unwrap();
    assert!(!alive("a", "resp_a2").await);
    assert!(alive("c", "resp_c1").await);
    assert!(size * 5 / 2 < 1_000);
}

fn bounded() -> Responses {
    let size = entry("resp_a1", 0, 100).bytes();
    retention(3, size * 5 / 2)
}

#[tokio::test]
async fn memory_isolates_and_expires() {
    isolates_and_expires(&ResponseStore::Memory(memory::MemoryStore::new(retention(10, 1 << 20)))).await;
}

#[tokio::test]
async fn memory_keeps_its_bounds() {
    let store = ResponseStore::Memory(memory::MemoryStore::new(bounded()));
    keeps_its_bounds(&store).await;
    let ResponseStore::Memory(m) = &store else { unreachable!() };
    store.sweep(u64::MAX).await.unwrap();
    assert!(m.is_empty());
}

#[tokio::test]
async fn postgres_isolates_and_expires() {
    let (_schema, store) = postgres(retention(10, 1 << 20)).await;
    isolates_and_expires(&store).await;
}

#[tokio::test]
async fn postgres_keeps_its_bounds() {
    let (_schema, store) = postgres(bounded()).await;
    keeps_its_bounds(&store).await;
    assert_eq!(store.sweep(u64::MAX).await.unwrap(), 3);
}

#[tokio::test]
async fn postgres_not_connected_is_an_error_not_a_miss() {
    let store = ResponseStore::choose(true, &Arc::new(OnceLock::new()), Responses::default());
    assert!(matches!(store.get("a", "resp_1", 0).await, Err(ResponsesError::NotConnected)));
}

const REQUEST: &str = r#"{"model":"chat","input":[{"role":"user","content":"hi"},
    {"type":"function_call_output","call_id":"c1","output":"42"}],"previous_response_id":"resp_0","instructions":"be brief"}"#;
const ANSWER: &str = r#"{"id":"resp_x1","object":"response","status":"completed","store":false,"instructions":null,
    "output":[{"id":"msg_x1_0","type":"message"}],"usage":{"input_tokens":3,"output_tokens":2,"total_tokens":5}}"#;

#[test]
fn an_entry_is_built_from_json_or_from_the_completed_event() {
    let e = build::entry(REQUEST.as_bytes(), ANSWER.as_bytes(), false, 5, 10).unwrap();
    assert_eq!((e.id.as_str(), e.created_ms, e.expires_ms), ("resp_x1", 5, 15));
    let r: Value = serde_json::from_str(&e.response).unwrap();
    assert_eq!(
        (&r["store"], &r["previous_response_id"], &r["instructions"]),
        (&json!(true), &json!("resp_0"), &json!("be brief"))
    );
    let items: Value = serde_json::from_str(&e.input_items).unwrap();
    assert_eq!(
        items,
        json!([
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}], "status": "completed", "id": "msg_x1_in0"},
            {"type": "function_call_output", "call_id": "c1", "output": "42", "id": "fco_x1_in1"},
        ])
    );
    let completed = json!({"type": "response.completed", "response": serde_json::from_str::<Value>(ANSWER).unwrap()});
    let stream = format!("event: response.created\ndata: {{}}\n\nevent: response.completed\ndata: {completed}\n\n");
    let s = build::entry(REQUEST.as_bytes(), stream.as_bytes(), true, 5, 10).unwrap();
    assert_eq!(s.response, e.response);
    // A stream that stopped at its token bound ends with response.incomplete: kept as well.
    let incomplete = stream.replace("response.completed", "response.incomplete");
    let i = build::entry(REQUEST.as_bytes(), incomplete.as_bytes(), true, 5, 10).unwrap();
    assert_eq!(i.response, e.response);
    let cut = "event: response.created\ndata: {}\n\n";
    assert_eq!(build::entry(REQUEST.as_bytes(), cut.as_bytes(), true, 5, 10), Err(build::BuildError::NotCompleted));
    assert_eq!(build::entry(b"[]", ANSWER.as_bytes(), false, 5, 10), Err(build::BuildError::Request));
    let no_id = br#"{"object":"response","id":"chatcmpl-1"}"#;
    assert_eq!(build::entry(REQUEST.as_bytes(), no_id, false, 5, 10), Err(build::BuildError::Answer));
    let text = build::entry(br#"{"input":"hello"}"#, ANSWER.as_bytes(), false, 5, 10).unwrap();
    assert!(text.input_items.contains(r#""text":"hello""#), "{}", text.input_items);
}

pub(super) async fn call(app: &axum::Router, method: &str, path: &str, owner: &str, body: Vec<u8>) -> (u16, Value) {
    let mut req = Request::builder().method(method).uri(path).header("authorization", "Bearer t");
    if !owner.is_empty() {
        req = req.header("x-ferrogate-owner", owner);
    }
    if method == "POST" {
        req = req.header("x-ferrogate-request-bytes", REQUEST.len().to_string());
    }
    let res = app.clone().oneshot(req.body(Body::from(body)).unwrap()).await.unwrap();
    let status = res.status().as_u16();
    let bytes = axum::body::to_bytes(res.into_body(), 1 << 20).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

#[tokio::test]
async fn the_routes_answer_in_openai_shapes() {
    let store = Arc::new(ResponseStore::Memory(memory::MemoryStore::new(Responses::default())));
    let app = router(ResponsesApi { store, internal_token: Some("t".into()) });
    let body = [REQUEST.as_bytes(), ANSWER.as_bytes()].concat();
    assert_eq!(call(&app, "POST", "/v1/responses", "sha256:a", body).await, (200, json!({"stored": true})));
    let (status, got) = call(&app, "GET", "/v1/responses/resp_x1", "sha256:a", vec![]).await;
    assert_eq!((status, &got["id"], &got["store"]), (200, &json!("resp_x1"), &json!(true)));
    let (status, list) =
        call(&app, "GET", "/v1/responses/resp_x1/input_items?order=asc&limit=1", "sha256:a", vec![]).await;
    assert_eq!(
        (status, &list["object"], &list["first_id"], &list["has_more"]),
        (200, &json!("list"), &json!("msg_x1_in0"), &json!(true))
    );
    let not_found = json!({"error": {"message": "Response with id 'resp_x1' not found.", "type": "invalid_request_error", "param": null, "code": null}});
    for (method, path) in [
        ("GET", "/v1/responses/resp_x1"),
        ("GET", "/v1/responses/resp_x1/input_items"),
        ("DELETE", "/v1/responses/resp_x1"),
    ] {
        assert_eq!(call(&app, method, path, "sha256:b", vec![]).await, (404, not_found.clone()), "{method} {path}");
    }
    let (status, bad) = call(&app, "GET", "/v1/responses/nope", "sha256:a", vec![]).await;
    assert_eq!((status, &bad["error"]["param"]), (400, &json!("response_id")));
    let deleted = json!({"id": "resp_x1", "object": "response", "deleted": true});
    assert_eq!(call(&app, "DELETE", "/v1/responses/resp_x1", "sha256:a", vec![]).await, (200, deleted));
    assert_eq!(call(&app, "GET", "/v1/responses/resp_x1", "sha256:a", vec![]).await.0, 404);
    let cut = [REQUEST.as_bytes(), b"event: response.created\ndata: {}\n\n"].concat();
    let mut req = Request::builder().method("POST").uri("/v1/responses").header("authorization", "Bearer t");
    req = req.header("x-ferrogate-request-bytes", REQUEST.len().to_string()).header("x-ferrogate-streamed", "1");
    let res = app.clone().oneshot(req.body(Body::from(cut)).unwrap()).await.unwrap();
    let bytes = axum::body::to_bytes(res.into_body(), 1 << 20).await.unwrap();
    assert_eq!(serde_json::from_slice::<Value>(&bytes).unwrap()["stored"], json!(false));
    let (status, _) = call(&app, "GET", "/v1/responses/resp_x1", "", vec![]).await;
    assert_eq!(status, 404);
}
