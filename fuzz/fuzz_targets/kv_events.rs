//! vLLM's KV-event payload decoder (`ferrogate_core::kv::events`): any bytes give a batch or
//! an error, never a panic; and what it reads is all it needs: a decoded batch, written back
//! in the current (map) form, decodes to the same batch.
#![no_main]

use ferrogate_core::kv::events::{decode, Batch, Event, Stored};
use ferrogate_core::kv::Tier;
use libfuzzer_sys::fuzz_target;
use rmpv::Value;

fn medium(t: Tier) -> Value {
    match t {
        Tier::Gpu => "GPU".into(),
        Tier::Cpu => "CPU".into(),
        Tier::Storage => "disk".into(),
    }
}

fn hashes(h: &[u64]) -> Value {
    Value::Array(h.iter().map(|&x| Value::from(x)).collect())
}

fn stored(s: &Stored) -> Value {
    let extra = s.extra.iter().map(|e| match e {
        Some(bytes) => rmpv::decode::read_value(&mut &bytes[..]).unwrap_or(Value::Nil),
        None => Value::Nil,
    });
    let mut map = vec![
        ("type".into(), "BlockStored".into()),
        ("block_hashes".into(), hashes(&s.hashes)),
        ("parent_block_hash".into(), s.parent.map_or(Value::Nil, Value::from)),
        ("token_ids".into(), Value::Array(s.tokens.iter().map(|&t| Value::from(t)).collect())),
        ("block_size".into(), s.block_size.into()),
        ("lora_id".into(), Value::Nil),
        ("medium".into(), medium(s.tier)),
        ("lora_name".into(), s.lora.as_deref().map_or(Value::Nil, Value::from)),
        ("extra_keys".into(), Value::Array(extra.collect())),
    ];
    if let Some(g) = s.group {
        map.push(("group_idx".into(), g.into()));
    }
    if let Some(k) = &s.kind {
        map.push(("kv_cache_spec_kind".into(), k.as_str().into()));
    }
    Value::Map(map)
}

fn encode(b: &Batch) -> Vec<u8> {
    let events = b.events.iter().map(|e| match e {
        Event::Stored(s) => stored(s),
        Event::Removed { hashes: h, tier, group } => Value::Map(vec![
            ("type".into(), "BlockRemoved".into()),
            ("block_hashes".into(), hashes(h)),
            ("medium".into(), medium(*tier)),
            ("group_idx".into(), group.map_or(Value::Nil, Value::from)),
        ]),
        Event::Cleared => Value::Map(vec![("type".into(), "AllBlocksCleared".into())]),
    });
    let rank = b.dp_rank.map_or(Value::Nil, Value::from);
    let mut out = Vec::new();
    let _ = rmpv::encode::write_value(&mut out, &Value::Array(vec![b.ts.into(), Value::Array(events.collect()), rank]));
    out
}

fuzz_target!(|data: &[u8]| {
    let Ok(batch) = decode(data) else { return };
    let again = decode(&encode(&batch)).expect("a re-encoded batch decodes");
    assert_eq!(again.events, batch.events);
    assert_eq!((again.ts.to_bits(), again.dp_rank, again.unknown), (batch.ts.to_bits(), batch.dp_rank, 0));
});
