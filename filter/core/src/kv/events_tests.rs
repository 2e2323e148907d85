//! The decoder against byte fixtures written by msgspec from structs shaped like vLLM's, one
//! per shape vLLM has shipped (`testdata/kv-events/`, made by its `make_fixtures.py`).

use super::*;
use serde_json::{json, Value as Json};

fn fixtures() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/kv-events")
}

/// A tier as `expected.json` names media.
fn medium(t: Tier) -> &'static str {
    match t {
        Tier::Gpu => "gpu",
        Tier::Cpu => "cpu",
        Tier::Storage => "storage",
    }
}

/// A decoded batch in the normalized form `expected.json` uses.
fn normalized(b: &Batch) -> Json {
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

/// `expected.json`'s entry, with the LoRA fields folded as the decoder folds them and each
/// medium read as its tier.
fn expected_entry(e: &Json) -> Json {
    let mut e = e.clone();
    for ev in e["events"].as_array_mut().unwrap() {
        let m = ev.as_object_mut().unwrap();
        if let Some(given) = m.get("medium").cloned() {
            m.insert("medium".into(), json!(medium(Tier::of_medium(given.as_str()))));
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

#[test]
fn media_name_their_tier() {
    for (medium, tier) in [
        (None, Tier::Gpu),
        (Some("GPU"), Tier::Gpu),
        (Some("gpu"), Tier::Gpu),
        (Some("cuda"), Tier::Gpu),
        (Some("CPU"), Tier::Cpu),
        (Some("cpu"), Tier::Cpu),
        (Some("LocalCPUBackend"), Tier::Cpu),
        (Some("LocalDiskBackend"), Tier::Storage),
        (Some("disk"), Tier::Storage),
        (Some("RemoteBackend"), Tier::Storage),
        (Some(""), Tier::Storage),
    ] {
        assert_eq!(Tier::of_medium(medium), tier, "{medium:?}");
    }
}

/// What LMCache's connectors publish through vLLM's stream: chunk-sized CPU blocks (`"cpu"`
/// from the in-process connector, with its 257-token first chunk and parent 0; `"CPU"` from
/// the multiprocess one, which also removes).
#[test]
fn lmcache_connector_events_are_cpu_tier_chunks() {
    let read = |name: &str| decode(&std::fs::read(fixtures().join(name)).unwrap()).unwrap();
    let b = read("lmcache-v05-connector-cpu.msgpack");
    let [Event::Stored(first), Event::Stored(second)] = b.events.as_slice() else { panic!("{b:?}") };
    assert_eq!((first.tier, first.block_size, first.tokens.len(), first.parent), (Tier::Cpu, 256, 257, Some(0)));
    assert_eq!((second.tier, second.tokens.len(), second.parent), (Tier::Cpu, 256, first.hashes.first().copied()));
    let b = read("lmcache-mp-cpu-removed.msgpack");
    let [Event::Stored(s), Event::Removed { tier, .. }] = b.events.as_slice() else { panic!("{b:?}") };
    assert_eq!((s.tier, s.block_size, s.tokens.len(), *tier), (Tier::Cpu, 256, 256, Tier::Cpu));
}
