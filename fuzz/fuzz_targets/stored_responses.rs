//! The stored-responses parsers (`ferrogate_core::stored`): lifecycle paths, the `store` flag,
//! the `response.completed` event of a captured stream, and input-item paging queries never
//! panic; what they accept is consistent (an accepted id is a valid one, a found event is the
//! data of a `response.completed` event, a page holds at most its limit).
#![no_main]

use ferrogate_core::stored::{self, page::Paging};
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
    if let Some(event) = stored::completed_event(data) {
        let v: serde_json::Value = serde_json::from_slice(&event).expect("a completed event is JSON");
        assert_eq!(v["type"], "response.completed");
    }
    if let Ok(paging) = Paging::parse(&text) {
        let items: Vec<serde_json::Value> = (0..5).map(|i| serde_json::json!({"id": format!("msg_{i}")})).collect();
        if let Ok(page) = paging.page(items) {
            assert!(page["data"].as_array().is_some_and(|d| d.len() <= 100));
        }
    }
});
