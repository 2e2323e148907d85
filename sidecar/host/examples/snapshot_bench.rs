//! Cost of a large configuration snapshot: 10,000 keys and 1,000 models (`KEYS`, `MODELS`
//! override). Measures what the sidecar pays per change (build = validate and prune, then
//! serialize), the snapshot's size, and what the real filter pays to take it in the host: the
//! polling VM (parse, validate, share) and every other VM (read from shared data, parse,
//! validate). Requests are not involved: they keep using the configuration they started with.
//!
//! `cargo run --release -p ferrogate-host --example snapshot_bench` (after `make wasm`).

use std::time::Instant;

use ferrogate_core::config::{RawConfig, RawGroup, RawKey, RawModel, RawPrice, RawProvider, RawTarget};
use ferrogate_host::{Headers, HttpCallResponse, PluginSpec, Runtime};

fn config(keys: usize, models: usize) -> RawConfig {
    let mut raw = RawConfig::default();
    raw.providers.push(RawProvider {
        name: "local".into(),
        kind: "openai_compatible".into(),
        base_url: "http://127.0.0.1:8000".into(),
        ..RawProvider::default()
    });
    for m in 0..models {
        let targets = vec![RawTarget { provider: "local".into(), model: format!("upstream-{m}"), weight: None }];
        raw.models.push(RawModel { name: format!("model-{m}"), targets, ..RawModel::default() });
        let price = RawPrice { input_per_mtok: 0.5, output_per_mtok: 1.5, cached_input_per_mtok: None };
        raw.pricing.insert(format!("upstream-{m}"), price);
    }
    for g in 0..100 {
        let models = (0..10).map(|i| format!("model-{}", (g * 10 + i) % models.max(1))).collect();
        raw.groups.push(RawGroup { name: format!("team-{g}"), models, ..RawGroup::default() });
    }
    for k in 0..keys {
        raw.keys.push(RawKey {
            name: format!("key-{k}"),
            digest: format!("sha256:{:064x}", k + 1),
            groups: vec![format!("team-{}", k % 100)],
            ..RawKey::default()
        });
    }
    raw
}

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (keys, models) = (env_or("KEYS", 10_000), env_or("MODELS", 1_000));
    let raw = config(keys, models);
    let start = Instant::now();
    let built = ferrogate_core::snapshot::build(raw)?;
    let config_json = serde_json::to_vec(&built.raw)?;
    let doc = ferrogate_core::snapshot::Snapshot {
        version: ferrogate_core::snapshot::content_version(&config_json),
        config: built.raw,
        problems: Vec::new(),
        cache_purges: Vec::new(),
    };
    let body = serde_json::to_vec(&doc)?;
    let build_ms = start.elapsed().as_secs_f64() * 1e3;

    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let wasm = std::fs::read(root.join("target/wasm32-unknown-unknown/release/ferrogate_filter.wasm"))?;
    let spec = PluginSpec {
        name: "ferrogate".into(),
        root_id: "ferrogate".into(),
        vm_id: "ferrogate".into(),
        configuration: br#"{"sidecar_cluster":"ferrogate_sidecar","poll_interval_ms":100}"#.to_vec(),
        allow_on_headers_stop_iteration: true,
        ..PluginSpec::default()
    };
    let rt = Runtime::new(&wasm, spec)?;
    let (mut poller, mut other) = (rt.new_vm(0)?, rt.new_vm(1)?);
    poller.on_tick()?;
    let call = poller.take_http_calls().pop().ok_or("the filter did not poll")?;
    let answer = HttpCallResponse {
        headers: Headers::from_pairs([(":status", "200")]),
        body: body.clone(),
        trailers: Headers::new(),
    };
    let start = Instant::now();
    poller.http_call_response(call.token, Some(answer))?;
    let poll_ms = start.elapsed().as_secs_f64() * 1e3;
    let start = Instant::now();
    other.on_tick()?;
    let adopt_ms = start.elapsed().as_secs_f64() * 1e3;
    println!(
        "snapshot_bench: {keys} keys, {models} models: sidecar build {build_ms:.1} ms, {:.2} MiB; \
         filter: polling VM {poll_ms:.1} ms, each other VM {adopt_ms:.1} ms (once per version, off the request path)",
        body.len() as f64 / (1024.0 * 1024.0)
    );
    Ok(())
}
