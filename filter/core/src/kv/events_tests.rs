//! The decoder against byte fixtures written by msgspec from structs shaped like vLLM's, one
//! per shape vLLM has shipped (`testdata/kv-events/`, made by its `make_fixtures.py`).

use super::*;
use serde_json::{json, Value as Json};

fn fixtures() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/kv-events")
}

/// A decoded batch in the normalized form `expected.json` uses.
fn normalized(b: &Batch) -> Json {
    let medium = |t: Tier| if t == Tier::Gpu { "gpu" } else { "cpu" };
    let events: Vec<Json> = b
        .events
        .iter()
        .map(|e| match e {
            Event::Stored(s) => json!({
                "type": "BlockStored", "block_hashes": s.hashes, "parent_block_hash": s.parent,
                "token_ids": s.tokens, "block_size": s.block_size, "medium": medium(s.tier),
                "lora": s.lora, "has_extra_keys": !s.extra.is_empty(), "group_idx": s.group,
            }),
            Event::Removed { hashes, tier, group } => {
                json!({"type": "BlockRemoved", "block_hashes": hashes, "medium": medium(*tier), "group_idx": group})
            }
            Event::Cleared => json!({"type": "AllBlocksCleared"}),
        })
        .collect();
    json!({"ts": b.ts, "data_parallel_rank": b.dp_rank, "events": events, "unknown_events": b.unknown})
}

/// `expected.json`'s entry, with the LoRA fields folded as the decoder folds them and any
/// medium other than GPU read as offloaded memory.
fn expected_entry(e: &Json) -> Json {
    let mut e = e.clone();
    for ev in e["events"].as_array_mut().unwrap() {
        let m = ev.as_object_mut().unwrap();
        if let Some(medium) = m.get("medium").cloned() {
            m.insert("medium".into(), json!(if medium == "gpu" { "gpu" } else { "cpu" }));
        }
        if m.get("type") == Some(&json!("BlockStored")) {
            let lora = match (m.remove("lora_name"), m.remove("lora_id")) {
                (Some(Json::String(n)), _) => json!(n),
                (_, Some(Json::Number(id))) => json!(format!("lora-id:{id}")),
                _ => Json::Null,
            };
            m.insert("lora".into(), lora);
        }
    }
    e
}

#[test]
fn every_fixture_decodes_as_msgspec_wrote_it() {
    let expected: Json = serde_json::from_slice(&std::fs::read(fixtures().join("expected.json")).unwrap()).unwrap();
    let entries = expected.as_object().unwrap();
    assert!(entries.len() >= 12, "fixtures missing: {}", entries.len());
    for (name, want) in entries {
        let bytes = std::fs::read(fixtures().join(name)).unwrap();
        let batch = decode(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(normalized(&batch), expected_entry(want), "{name}");
    }
}

#[test]
fn the_documented_example_reads_exactly() {
    let bytes = std::fs::read(fixtures().join("v011-positional.msgpack")).unwrap();
    assert_eq!(bytes.len(), 45);
    let b = decode(&bytes).unwrap();
    let Event::Stored(s) = &b.events[0] else { panic!("{b:?}") };
    assert_eq!(
        (s.hashes.as_slice(), s.parent, s.tokens.as_slice()),
        (&[17_507_053_300_047_258_101][..], None, &[1, 2][..])
    );
    assert_eq!((s.block_size, s.tier, b.dp_rank), (2, Tier::Gpu, Some(0)));
}

#[test]
fn newer_fields_and_kinds_are_kept_for_the_index_to_judge() {
    let b = decode(&std::fs::read(fixtures().join("v033-map-new-fields.msgpack")).unwrap()).unwrap();
    let Some(Event::Stored(s)) = b.events.first() else { panic!("{b:?}") };
    assert_eq!((s.group, s.kind.as_deref(), s.tier), (Some(1), Some("sliding_window"), Tier::Cpu));
    assert!(s.tokens.is_empty());
}

#[test]
fn garbage_is_an_error_never_a_panic() {
    let cases: [&[u8]; 8] = [
        b"",
        b"\xc1",
        b"\x93\xa1x\x90\x00",                        // ts is a string
        b"\x92\xcb\x3f\xf8\0\0\0\0\0\0\x01",         // events is not an array
        b"\x2a",                                     // a bare integer
        b"\x93\xcb\x3f\xf8\0\0\0\0\0\0\x90\x00\x00", // a trailing byte
        b"\xdd\xff\xff\xff\xff",                     // an array claiming 4 billion items
        &[0x91; 200],                                // nested too deep
    ];
    for bytes in cases {
        assert!(decode(bytes).is_err(), "{bytes:x?}");
    }
    // Events of the wrong shape are counted as unknown, the batch survives.
    let b =
        decode(b"\x93\xcb\x3f\xf8\0\0\0\0\0\0\x94\x01\xa1x\x91\xabBlockStored\x91\xb0AllBlocksCleared\x00").unwrap();
    assert_eq!((b.events.as_slice(), b.unknown), (&[Event::Cleared][..], 3));
}

#[test]
fn every_prefix_of_a_fixture_is_refused_cleanly() {
    let bytes = std::fs::read(fixtures().join("v026-map.msgpack")).unwrap();
    for n in 0..bytes.len() {
        assert!(decode(&bytes[..n]).is_err(), "cut at {n}");
    }
}
