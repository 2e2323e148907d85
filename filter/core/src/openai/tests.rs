//! `/v1/models` listing tests: filtered by the caller's grants.

use super::*;
use crate::testing::{fixture, keys_config};

fn ids(body: &[u8]) -> Vec<String> {
    let v: serde_json::Value = serde_json::from_slice(body).unwrap();
    assert_eq!(v["object"], "list");
    let data = v["data"].as_array().unwrap();
    data.iter()
        .map(|m| {
            assert_eq!(m["object"], "model");
            m["id"].as_str().unwrap().to_string()
        })
        .collect()
}

#[test]
fn models_list_is_filtered_per_caller() {
    let c = keys_config();
    let all = ["chat", "gpt", "big", "embed", "loop-a", "loop-b", "solo", "default", "fast", "vectors"];
    let cases: [(Caller, &[&str]); 7] = [
        (Caller::Key(0), &["chat", "gpt", "big", "default", "fast"]),
        (Caller::Key(1), &all),
        (Caller::Key(2), &["embed", "vectors"]),
        (Caller::Key(3), &[]),
        (Caller::Key(4), &["loop-a", "loop-b"]),
        (Caller::Key(99), &[]),
        // A keyed config ignores Open.
        (Caller::Open, &[]),
    ];
    for (caller, want) in cases {
        assert_eq!(ids(&models_list_for(&c, caller)), want, "{caller:?}");
    }
}

#[test]
fn open_mode_lists_every_public_name() {
    let c = fixture("quickstart.yaml");
    assert_eq!(ids(&models_list_for(&c, Caller::Open)), ["chat", "default"]);
}

#[test]
fn model_entry_is_404_when_not_visible() {
    let c = keys_config();
    let alice = Caller::Key(0);
    let v: serde_json::Value = serde_json::from_slice(&model_entry_for(&c, alice, "default").unwrap()).unwrap();
    assert_eq!(v["id"], "default");
    assert_eq!(v["object"], "model");
    for (caller, id) in [
        (alice, "embed"),
        (alice, "missing"),
        // Pinned ids are not listed, so not served here either.
        (alice, "local/x"),
        (Caller::Key(3), "chat"),
    ] {
        let e = model_entry_for(&c, caller, id).unwrap_err();
        assert_eq!((e.status, e.code), (404, Some("model_not_found")), "{id}");
    }
}
