//! The chain walk, on the memory store and on Postgres, and its route's answers.

use serde_json::{json, Value};

use std::sync::Arc;

use super::api::ResponsesApi;
use super::chain::{walk, Walk};
use super::tests::{call, postgres, retention};
use super::{memory, router, Entry, ResponseStore};

/// Response `id` continuing `previous`, made by `origin`, with one input and one output item.
fn link(id: &str, previous: Option<&str>, origin: &str) -> Entry {
    let response = json!({"id": id, "object": "response", "previous_response_id": previous,
        "output": [{"type": "message", "id": format!("msg_{id}"), "role": "assistant"}]});
    Entry {
        id: id.into(),
        created_ms: 100,
        expires_ms: 1_100,
        response: response.to_string(),
        input_items: json!([{"type": "message", "id": format!("in_{id}"), "role": "user"}]).to_string(),
        origin: origin.into(),
        tokens: 10,
        cost_micros: 3,
    }
}

fn ids(items: &[Value]) -> Vec<&str> {
    items.iter().map(|i| i["id"].as_str().unwrap_or_default()).collect()
}

async fn walks_its_owners_chain(store: &ResponseStore) {
    for e in
        [link("resp_1", None, "openai"), link("resp_2", Some("resp_1"), "openai"), link("resp_3", Some("resp_2"), "")]
    {
        assert!(store.put("a", e).await.unwrap());
    }
    let Walk::Found { items, depth, origin, tokens, cost_micros } = walk(store, "a", "resp_2", 500, 4).await.unwrap()
    else {
        panic!()
    };
    assert_eq!(ids(&items), ["in_resp_1", "msg_resp_1", "in_resp_2", "msg_resp_2"], "oldest first");
    assert_eq!((tokens, cost_micros), (20, 6), "what the chain used, summed");
    assert_eq!((depth, origin.as_str()), (2, "openai"), "one native origin");
    let Walk::Found { depth, origin, .. } = walk(store, "a", "resp_3", 500, 4).await.unwrap() else { panic!() };
    assert_eq!((depth, origin.as_str()), (3, ""), "a translated link: no native origin");
    assert_eq!(walk(store, "a", "resp_3", 500, 2).await.unwrap(), Walk::TooDeep);
    assert_eq!(walk(store, "a", "resp_3", 500, 3).await.unwrap().depth(), Some(3), "exactly the bound");
    assert_eq!(walk(store, "b", "resp_2", 500, 4).await.unwrap(), Walk::Missing("resp_2".into()), "another key's");
    assert_eq!(walk(store, "a", "resp_2", 1_100, 4).await.unwrap(), Walk::Missing("resp_2".into()), "expired");
    assert!(store.delete("a", "resp_1", 500).await.unwrap());
    assert_eq!(walk(store, "a", "resp_3", 500, 4).await.unwrap(), Walk::Missing("resp_1".into()), "a hole");
}

impl Walk {
    fn depth(&self) -> Option<u32> {
        match self {
            Walk::Found { depth, .. } => Some(*depth),
            _ => None,
        }
    }
}

#[tokio::test]
async fn memory_walks_its_owners_chain() {
    walks_its_owners_chain(&ResponseStore::Memory(memory::MemoryStore::new(retention(10, 1 << 20)))).await;
}

#[tokio::test]
async fn postgres_walks_its_owners_chain() {
    let (_schema, store) = postgres(retention(10, 1 << 20)).await;
    walks_its_owners_chain(&store).await;
}

#[tokio::test]
async fn a_cycle_is_too_deep_not_endless() {
    let store = ResponseStore::Memory(memory::MemoryStore::new(retention(10, 1 << 20)));
    assert!(store.put("a", link("resp_1", Some("resp_2"), "")).await.unwrap());
    assert!(store.put("a", link("resp_2", Some("resp_1"), "")).await.unwrap());
    assert_eq!(walk(&store, "a", "resp_1", 500, 100).await.unwrap(), Walk::TooDeep);
}

#[tokio::test]
async fn the_chain_route_answers_the_items_or_the_clients_error() {
    let store = Arc::new(ResponseStore::Memory(memory::MemoryStore::new(retention(10, 1 << 20))));
    let now = crate::services::now_ms();
    for (id, previous) in [("resp_1", None), ("resp_2", Some("resp_1"))] {
        let mut e = link(id, previous, "");
        (e.created_ms, e.expires_ms) = (now, now + 60_000);
        assert!(store.put("sha256:a", e).await.unwrap());
    }
    let app = router(ResponsesApi { store, internal_token: Some("t".into()) });
    let (status, chain) = call(&app, "GET", "/v1/response-chains/resp_2", "sha256:a", vec![]).await;
    assert_eq!((status, &chain["depth"], &chain["origin"]), (200, &json!(2), &json!("")));
    assert_eq!((&chain["tokens"], &chain["cost_micros"]), (&json!(20), &json!(6)));
    assert_eq!(chain["items"].as_array().map(Vec::len), Some(4));
    let not_found = json!({"error": {"message": "Previous response with id 'resp_2' not found.",
        "type": "invalid_request_error", "param": "previous_response_id", "code": "previous_response_not_found"}});
    assert_eq!(call(&app, "GET", "/v1/response-chains/resp_2", "sha256:b", vec![]).await, (400, not_found));
    let (status, bad) = call(&app, "GET", "/v1/response-chains/nope", "sha256:a", vec![]).await;
    assert_eq!((status, &bad["error"]["code"]), (400, &json!("previous_response_not_found")));
    assert_eq!(call(&app, "GET", "/v1/response-chains/resp_2", "sha256:a", vec![]).await.0, 200);
}

/// A conversation is its owner's; updates are atomic (two appends at once both land).
async fn keeps_conversations(store: &ResponseStore) {
    use super::conversations::Conversation;
    let c = Conversation {
        id: "conv_1".into(),
        created_at: 1,
        metadata: json!({"a": "b"}),
        items: vec![json!({"id": "m1"})],
        tokens: 0,
        cost_micros: 0,
    };
    store.create_conversation("a", &c).await.unwrap();
    assert_eq!(store.conversation("a", "conv_1").await.unwrap(), Some(c.clone()));
    assert_eq!(store.conversation("b", "conv_1").await.unwrap(), None, "another owner's");
    assert_eq!((store.count_conversations("a").await.unwrap(), store.count_conversations("b").await.unwrap()), (1, 0));
    let after = store.update_conversation("a", "conv_1", |c| c.tokens += 5).await.unwrap().unwrap();
    assert_eq!(after.tokens, 5);
    assert_eq!(store.update_conversation("b", "conv_1", |c| c.tokens += 1).await.unwrap(), None);
    let push = |id: &'static str| store.update_conversation("a", "conv_1", move |c| c.items.push(json!({"id": id})));
    let (x, y) = tokio::join!(push("x"), push("y"));
    assert!(x.unwrap().is_some() && y.unwrap().is_some());
    let items = store.conversation("a", "conv_1").await.unwrap().unwrap().items;
    assert_eq!(items.len(), 3, "both appends: {items:?}");
    assert!(!store.delete_conversation("b", "conv_1").await.unwrap());
    assert!(store.delete_conversation("a", "conv_1").await.unwrap());
    assert_eq!(store.conversation("a", "conv_1").await.unwrap(), None);
}

#[tokio::test]
async fn memory_keeps_conversations() {
    keeps_conversations(&ResponseStore::Memory(memory::MemoryStore::new(retention(10, 1 << 20)))).await;
}

#[tokio::test]
async fn postgres_keeps_conversations() {
    let (_schema, store) = postgres(retention(10, 1 << 20)).await;
    keeps_conversations(&store).await;
}

#[test]
fn an_origin_says_who_answered_and_whose_signatures_it_bears() {
    use super::chain::{provenance, stored_origin};
    use ferrogate_core::stored::chain::Family;
    assert_eq!(stored_origin(Some("oai"), Some(Family::OpenAi)), "oai");
    assert_eq!(stored_origin(None, Some(Family::Anthropic)), "translated:anthropic");
    assert_eq!(stored_origin(Some(""), Some(Family::Gemini)), "translated:gemini");
    assert_eq!(stored_origin(None, None), "");
    assert_eq!(provenance("oai"), ("oai", Some(Family::OpenAi)), "only OpenAI answers Responses natively");
    assert_eq!(provenance("translated:gemini"), ("", Some(Family::Gemini)));
    assert_eq!(provenance(""), ("", None), "stored before families were recorded");
    assert_eq!(provenance("translated:other"), ("", None));
}

/// Stores `answer` to `request` through the route, as the filter does, with `extra` headers.
async fn store_through(app: &axum::Router, request: Value, answer: Value, extra: &[(&str, &str)]) {
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;
    let request = request.to_string();
    let mut req = Request::builder().method("POST").uri("/v1/responses").header("authorization", "Bearer t");
    req = req.header("x-ferrogate-owner", "sha256:a").header("x-ferrogate-request-bytes", request.len().to_string());
    for (name, value) in extra {
        req = req.header(*name, *value);
    }
    let body = [request.as_bytes(), answer.to_string().as_bytes()].concat();
    let res = app.clone().oneshot(req.body(Body::from(body)).unwrap()).await.unwrap();
    assert_eq!(res.status().as_u16(), 200);
}

/// An answer `id` whose output is signed reasoning and a message.
fn reasoned(id: &str) -> Value {
    json!({"id": id, "object": "response", "output": [
        {"type": "reasoning", "id": format!("rs_{id}"), "summary": [], "encrypted_content": "sig"},
        {"type": "message", "id": format!("msg_{id}"), "role": "assistant", "content": []}]})
}

fn families(items: &Value) -> Vec<Value> {
    let items = items.as_array().cloned().unwrap_or_default();
    items.iter().filter(|i| i["type"] == "reasoning").map(|i| i["ferrogate_family"].clone()).collect()
}

#[tokio::test]
async fn reasoning_is_tagged_with_the_family_that_answered() {
    let store = Arc::new(ResponseStore::Memory(memory::MemoryStore::new(retention(10, 1 << 20))));
    let app = router(ResponsesApi { store: store.clone(), internal_token: Some("t".into()) });
    let anthropic = [("x-ferrogate-family", "anthropic")];
    store_through(&app, json!({"input": "hi"}), reasoned("resp_1"), &anthropic).await;
    let native = [("x-ferrogate-origin", "oai"), ("x-ferrogate-family", "openai")];
    store_through(&app, json!({"input": "more", "previous_response_id": "resp_1"}), reasoned("resp_2"), &native).await;
    let (status, chain) = call(&app, "GET", "/v1/response-chains/resp_2", "sha256:a", vec![]).await;
    assert_eq!((status, &chain["origin"]), (200, &json!("")), "not all native");
    assert_eq!(families(&chain["items"]), [json!("anthropic"), json!("openai")]);
    assert_eq!(store.get("sha256:a", "resp_2", crate::services::now_ms()).await.unwrap().unwrap().origin, "oai");
    // An entry from before families were recorded: its reasoning's signer is not known.
    let mut old = store.get("sha256:a", "resp_1", crate::services::now_ms()).await.unwrap().unwrap();
    old.origin = String::new();
    assert!(store.put("sha256:a", old).await.unwrap());
    let (_, chain) = call(&app, "GET", "/v1/response-chains/resp_2", "sha256:a", vec![]).await;
    assert_eq!(families(&chain["items"]), [Value::Null, json!("openai")]);
}

#[tokio::test]
async fn a_conversations_reasoning_is_tagged_for_the_chain_only() {
    let store = Arc::new(ResponseStore::Memory(memory::MemoryStore::new(retention(10, 1 << 20))));
    let app = router(ResponsesApi { store, internal_token: Some("t".into()) });
    // The client's claim of a signer is dropped.
    let claimed = json!({"items": [{"type": "reasoning", "summary": [], "encrypted_content": "x", "ferrogate_family": "gemini"}]});
    let (status, conv) = call(&app, "POST", "/v1/conversations", "sha256:a", claimed.to_string().into_bytes()).await;
    assert_eq!(status, 200, "{conv}");
    let id = conv["id"].as_str().unwrap_or_default().to_string();
    let gemini = [("x-ferrogate-family", "gemini"), ("x-ferrogate-conversation", id.as_str())];
    store_through(&app, json!({"input": "hi", "conversation": id}), reasoned("resp_c1"), &gemini).await;
    let (_, chain) = call(&app, "GET", &format!("/v1/response-chains/{id}"), "sha256:a", vec![]).await;
    assert_eq!(families(&chain["items"]), [Value::Null, json!("gemini")]);
    let (status, list) = call(&app, "GET", &format!("/v1/conversations/{id}/items"), "sha256:a", vec![]).await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(families(&list["data"]), [Value::Null, Value::Null], "clients never see the tag");
    let item = list["data"][0]["id"].as_str().unwrap_or_default().to_string();
    let (_, one) = call(&app, "GET", &format!("/v1/conversations/{id}/items/{item}"), "sha256:a", vec![]).await;
    assert!(one.get("ferrogate_family").is_none(), "{one}");
}
