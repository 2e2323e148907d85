//! The worker-message decoder against frames written by msgspec from LMCache's own message
//! classes (`testdata/lmcache/`, made by its `make_fixtures.py`), and against damaged frames.

use super::*;

fn fixtures() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/lmcache")
}

fn read(name: &str) -> Vec<u8> {
    std::fs::read(fixtures().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn worker(id: i64) -> Worker {
    Worker { instance_id: "vllm-0".into(), worker_id: id }
}

#[test]
fn a_batch_of_admits_and_evicts_reads_exactly() {
    let want = WorkerMsg::Ops {
        worker: worker(0),
        location: "LocalCPUBackend".into(),
        ops: vec![
            ChunkOp { admit: true, key: 12_345_678_901_234_567_890, seq: 0 },
            ChunkOp { admit: false, key: (-42i64) as u64, seq: 1 },
            ChunkOp { admit: true, key: 7, seq: 2 },
        ],
    };
    assert_eq!(decode(&read("batched-admit-evict.msgpack")), Ok(want.clone()));
    assert_eq!(decode(&read("batched-admit-evict.json")), Ok(want), "the JSON form of external senders");
}

#[test]
fn locations_name_their_tier() {
    assert_eq!(WorkerMsg::tier_of("LocalCPUBackend"), Tier::Cpu);
    assert_eq!(WorkerMsg::tier_of("LocalDiskBackend"), Tier::Storage);
    assert_eq!(WorkerMsg::tier_of("RemoteBackend"), Tier::Storage);
    assert_eq!(WorkerMsg::tier_of("GPU"), Tier::Storage, "a controller hears of no GPU chunks");
}

#[test]
fn damaged_frames_are_errors_never_panics() {
    let good = read("batched-admit-evict.msgpack");
    for n in 0..good.len() {
        assert!(decode(&good[..n]).is_err(), "cut at {n}");
    }
    let mut longer = good.clone();
    longer.push(0);
    assert_eq!(decode(&longer), Err(LmcacheError::Trailing(1)));
    let cases: [&[u8]; 6] = [b"", b"\xc1", b"\x90", b"\x81\xa4type\x01", b"{\"type\": 3}", b"{not json"];
    for case in cases {
        assert!(decode(case).is_err(), "{case:?}");
    }
    let missing = br#"{"type": "BatchedKVOperationMsg", "instance_id": "i", "worker_id": 0, "location": "x"}"#;
    assert_eq!(decode(missing), Err(LmcacheError::Field { tag: "BatchedKVOperationMsg".into(), field: "operations" }));
    let bad_op = br#"{"type": "BatchedKVOperationMsg", "instance_id": "i", "worker_id": 0, "location": "x",
        "operations": [{"op_type": "pin", "key": 1, "seq_num": 0}]}"#;
    assert!(matches!(decode(bad_op), Err(LmcacheError::Field { field: "operations.op_type", .. })));
    let deep = format!("{}{}", "[".repeat(100), "]".repeat(100));
    assert!(decode(deep.as_bytes()).is_err());
}

#[test]
fn unknown_types_are_named_not_refused() {
    let frame = br#"{"type": "PinMsg", "whatever": [1, 2]}"#;
    assert_eq!(decode(frame), Ok(WorkerMsg::Other("PinMsg".into())));
}

/// `expected.json`'s form of a decoded message (see `testdata/lmcache/README.md`).
fn normalized(m: &WorkerMsg) -> serde_json::Value {
    use serde_json::json;
    let mut out = json!({"known": true, "instance_id": null, "worker_id": null, "location": null,
        "operations": [], "ip": null, "port": null, "keys_u64": []});
    let who = |w: &Worker| (json!(w.instance_id), json!(w.worker_id));
    match m {
        WorkerMsg::Ops { worker, location, ops } => {
            (out["instance_id"], out["worker_id"]) = who(worker);
            out["location"] = json!(location);
            let ops: Vec<_> = ops
                .iter()
                .map(|o| json!({"op": if o.admit { "admit" } else { "evict" }, "key_u64": o.key, "seq_num": o.seq}))
                .collect();
            out["operations"] = json!(ops);
        }
        WorkerMsg::Liveness { worker, ip, port, .. } => {
            (out["instance_id"], out["worker_id"]) = who(worker);
            (out["ip"], out["port"]) = (json!(ip), json!(port));
        }
        WorkerMsg::FullSync { worker, location, keys } => {
            (out["instance_id"], out["worker_id"]) = who(worker);
            (out["location"], out["keys_u64"]) = (json!(location), json!(keys));
        }
        WorkerMsg::Other(_) => out["known"] = json!(false),
    }
    out
}

#[test]
fn every_fixture_decodes_as_lmcache_wrote_it() {
    let expected: serde_json::Value = serde_json::from_slice(&read("expected.json")).unwrap();
    let entries = expected.as_object().unwrap();
    assert!(entries.len() >= 10, "fixtures missing: {}", entries.len());
    for (name, want) in entries {
        let got = decode(&read(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut want = want.clone();
        let tag = want.as_object_mut().unwrap().remove("type").unwrap();
        match &got {
            WorkerMsg::Other(t) => assert_eq!(json_str(t), tag, "{name}"),
            WorkerMsg::Liveness { kind, .. } => {
                let kind = match kind {
                    Liveness::Register => "RegisterMsg",
                    Liveness::Heartbeat => "HeartbeatMsg",
                    Liveness::Deregister => "DeRegisterMsg",
                };
                assert_eq!(json_str(kind), tag, "{name}");
            }
            _ => {}
        }
        assert_eq!(normalized(&got), want, "{name}");
    }
}

fn json_str(s: &str) -> serde_json::Value {
    serde_json::Value::String(s.to_string())
}

/// The controller's answers are byte for byte what LMCache 0.5.6's msgspec structs encode
/// (`reply-*.msgpack`, written by `make_fixtures.py`).
#[test]
fn replies_encode_as_lmcache_does() {
    use super::{encode_reply, Reply};
    let cases = [
        (Reply::Registered { heartbeat_url: None }, "reply-register.msgpack"),
        (Reply::Registered { heartbeat_url: Some("127.0.0.1:8500") }, "reply-register-heartbeat.msgpack"),
        (Reply::Heartbeat, "reply-heartbeat.msgpack"),
        (Reply::Error("unknown request"), "reply-error.msgpack"),
    ];
    for (reply, name) in cases {
        assert_eq!(encode_reply(&reply), read(name), "{name}");
    }
}
