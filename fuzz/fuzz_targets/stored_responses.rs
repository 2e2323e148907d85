//! The stored-responses parsers (`ferrogate_core::stored`): lifecycle paths, the `store` flag,
//! the `response.completed` event of a captured stream, input-item paging queries, and a
//! follow-up's `previous_response_id`, chain answer and rebuilt conversation never panic; what
//! they accept is consistent (an accepted id is a valid one, a found event is the data of a
//! `response.completed` event, a page holds at most its limit, a rebuilt request is a JSON
//! object without `previous_response_id` whose input ends with the request's own).
#![no_main]

use ferrogate_core::stored::{self, chain, page::Paging};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    for method in ["GET", "DELETE", "POST"] {
        let path = format!("/v1/responses/{text}");
        if let Ok(call) = stored::lifecycle(method, &path) {
            assert!(stored::valid_id(call.id), "{path}");
        }
    }
    let _ = stored::wants_store(data);
    if let Some(event) = stored::final_event(data) {
        let v: serde_json::Value = serde_json::from_slice(&event).expect("a completed event is JSON");
        assert_eq!(v["type"], "response.completed");
    }
    if let Ok(paging) = Paging::parse(&text) {
        let items: Vec<serde_json::Value> = (0..5).map(|i| serde_json::json!({"id": format!("msg_{i}")})).collect();
        if let Ok(page) = paging.page(items) {
            assert!(page["data"].as_array().is_some_and(|d| d.len() <= 100));
        }
    }
    match chain::continues(data) {
        Ok(Some(chain::Continues::Response(id))) => assert!(stored::valid_id(&id)),
        Ok(Some(chain::Continues::Conversation(id))) => assert!(stored::conversations::valid_id(&id)),
        _ => {}
    }
    for method in ["GET", "POST", "DELETE"] {
        let path = format!("/v1/conversations{text}");
        use stored::conversations::{valid_id, Call};
        match stored::conversations::classify(method, &path) {
            Ok(Call::Retrieve(id) | Call::Update(id) | Call::Delete(id) | Call::AddItems(id) | Call::ListItems(id)) => {
                assert!(valid_id(id), "{path}")
            }
            Ok(Call::GetItem(id, item) | Call::DeleteItem(id, item)) => {
                assert!(valid_id(id) && stored::conversations::valid_item_id(item), "{path}")
            }
            _ => {}
        }
    }
    let _ = chain::Chain::decode(data);
    let items = vec![serde_json::json!({"type": "message", "id": "msg_1", "role": "user", "content": "a"})];
    if let Ok(rebuilt) = chain::rebuild(data, items) {
        let v: serde_json::Value = serde_json::from_slice(&rebuilt.body).expect("a rebuilt request is JSON");
        assert!(v.get("previous_response_id").is_none());
        assert_eq!(v["input"][0]["role"], "user", "the chain comes first");
        for family in [chain::Family::OpenAi, chain::Family::Anthropic, chain::Family::Gemini] {
            if let Some(fitted) = rebuilt.for_family(family) {
                let f: serde_json::Value = serde_json::from_slice(&fitted).expect("a fitted request is JSON");
                assert_eq!(f["input"][0]["role"], "user", "fitting keeps the chain's messages");
            }
        }
    }
});
