//! LMCache's worker-message decoder (`ferrogate_core::kv::lmcache`): any frame gives a message
//! or an error, never a panic; and what it reads is all it needs: a decoded message, written
//! back as LMCache writes it (a tagged msgpack map), decodes to the same message.
#![no_main]

use ferrogate_core::kv::lmcache::{decode, Liveness, Worker, WorkerMsg};
use libfuzzer_sys::fuzz_target;
use rmpv::Value;

fn map(tag: &str, worker: &Worker, rest: Vec<(&str, Value)>) -> Value {
    let mut pairs = vec![
        ("type".into(), tag.into()),
        ("instance_id".into(), worker.instance_id.as_str().into()),
        ("worker_id".into(), worker.worker_id.into()),
    ];
    pairs.extend(rest.into_iter().map(|(k, v)| (Value::from(k), v)));
    Value::Map(pairs)
}

fn encode(m: &WorkerMsg) -> Option<Vec<u8>> {
    let value = match m {
        WorkerMsg::Ops { worker, location, ops } => {
            let ops = ops
                .iter()
                .map(|o| {
                    Value::Map(vec![
                        ("op_type".into(), if o.admit { "admit" } else { "evict" }.into()),
                        ("key".into(), o.key.into()),
                        ("seq_num".into(), o.seq.into()),
                    ])
                })
                .collect();
            let rest = vec![("location", location.as_str().into()), ("operations", Value::Array(ops))];
            map("BatchedKVOperationMsg", worker, rest)
        }
        WorkerMsg::Liveness { kind, worker, ip, port } => {
            let tag = match kind {
                Liveness::Register => "RegisterMsg",
                Liveness::Heartbeat => "HeartbeatMsg",
                Liveness::Deregister => "DeRegisterMsg",
            };
            map(tag, worker, vec![("ip", ip.as_str().into()), ("port", (*port).into())])
        }
        WorkerMsg::FullSync { worker, location, keys } => {
            let keys = Value::Array(keys.iter().map(|&k| k.into()).collect());
            map("FullSyncBatchMsg", worker, vec![("location", location.as_str().into()), ("keys", keys)])
        }
        WorkerMsg::Other(_) => return None,
    };
    let mut out = Vec::new();
    rmpv::encode::write_value(&mut out, &value).ok()?;
    Some(out)
}

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = decode(data) {
        if let Some(bytes) = encode(&m) {
            assert_eq!(decode(&bytes), Ok(m));
        }
    }
});
