//! The simulated engine's LMCache tier and its prefill-time model.
//!
//! With `--lmcache-blocks N` each model's prefix cache gets a CPU tier of `N` blocks behind
//! its GPU cache ([`super::prefix::PrefixCache`]): blocks the GPU cache evicts go there, and a
//! prompt whose leading blocks are found there is a CPU hit. The engine then also
//! - publishes what the CPU tier stores and drops as KV events with `medium: "CPU"` (as
//!   LMCache's connector does through vLLM's stream; see `super::kv_events`),
//! - shows LMCache's series on `/metrics` ([`render`]): `lmcache:local_cache_usage` (bytes, at
//!   [`BLOCK_BYTES`] a block), `lmcache:num_lookup_tokens_total` /
//!   `lmcache:num_lookup_hits_total` (prompt tokens past the GPU hit asked of the tier, and
//!   those it had), `lmcache:lookup_hit_rate`, and vLLM's
//!   `vllm:external_prefix_cache_{queries,hits}_total` with the same counts,
//! - answers its occupancy on `GET /lmcache/occupancy` ([`occupancy`]) in the form a
//!   provider's `lmcache.occupancy` reads: `{"occupancy": 0.42, "cache_available": true}`.
//!
//! The prefill model ([`Prefill`], off by default): a request's time to first token grows by
//! `--prefill-us-per-token` for every prompt token not served from a cache, and by
//! `--lmcache-load-ratio` of that for every token loaded back from the CPU tier; GPU hits cost
//! nothing. With a model 8B in size a token's KV is about 128 KiB, so loading it over PCIe
//! costs a few percent of recomputing it: the default ratio, 0.1, is conservative. The time is
//! waited (it adds to `--ttft-ms`) and reported in `x-sim-prefill-ms`.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::metrics::{ModelMetrics, BLOCK_TOKENS};
use super::prefix::PrefixHit;
use super::SimState;

/// Bytes one cached block stands for in `lmcache:local_cache_usage` (16 tokens of an 8B
/// model's KV, 128 KiB a token).
pub const BLOCK_BYTES: u64 = 16 * 128 * 1024;

/// LMCache options of `ferrogate sim`.
#[derive(clap::Args, Clone, Debug)]
pub struct LmcacheArgs {
    /// Blocks LMCache keeps in CPU memory behind each model's GPU prefix cache (what the GPU
    /// cache evicts); 0 = no LMCache tier.
    #[arg(long, default_value_t = 0)]
    pub lmcache_blocks: u32,
    /// Prefill time per prompt token not found in a cache, in microseconds, added to the time
    /// to first token; 0 = no prefill model.
    #[arg(long, default_value_t = 0.0)]
    pub prefill_us_per_token: f64,
    /// What loading a token's KV back from the CPU tier costs, as a fraction of prefilling it.
    #[arg(long, default_value_t = 0.1)]
    pub lmcache_load_ratio: f64,
    /// Report the CPU tier's admits and evicts to an LMCache cache controller's PULL socket at
    /// ADDR (`host:port`), as an LMCache worker does; default: no controller.
    #[arg(long, value_name = "ADDR")]
    pub lmcache_controller: Option<String>,
    /// Register with the controller's reply socket at ADDR first (LMCache 0.3.12 and later);
    /// default: none, the registration is pushed (0.3.11 and older).
    #[arg(long, value_name = "ADDR")]
    pub lmcache_controller_reply: Option<String>,
    /// The worker's `lmcache_instance_id`.
    #[arg(long, value_name = "ID", default_value = "sim")]
    pub lmcache_instance_id: String,
    /// Beat every SECS seconds to the `heartbeat_url` the registration's answer names (LMCache's
    /// `lmcache_worker_heartbeat_time`); 0 = never, LMCache's default.
    #[arg(long, default_value_t = 0, value_name = "SECS")]
    pub lmcache_heartbeat_secs: u64,
    /// Publish the CPU tier's changes as KV events too (LMCache's `enable_kv_events`).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub lmcache_events: bool,
}

impl Default for LmcacheArgs {
    /// The same values as the command-line defaults.
    fn default() -> Self {
        Self {
            lmcache_blocks: 0,
            prefill_us_per_token: 0.0,
            lmcache_load_ratio: 0.1,
            lmcache_controller: None,
            lmcache_controller_reply: None,
            lmcache_instance_id: "sim".into(),
            lmcache_heartbeat_secs: 0,
            lmcache_events: true,
        }
    }
}

/// The prefill-time model.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Prefill {
    us_per_token: f64,
    load_ratio: f64,
}

impl Prefill {
    /// The model `args` describe.
    pub fn new(args: &LmcacheArgs) -> Self {
        let finite = |v: f64| if v.is_finite() { v.max(0.0) } else { 0.0 };
        Self { us_per_token: finite(args.prefill_us_per_token), load_ratio: finite(args.lmcache_load_ratio) }
    }

    /// Prefill time of a request with `prompt_tokens` whose cache lookup found `hit`, in µs.
    pub fn micros(&self, hit: &PrefixHit, prompt_tokens: u32) -> u64 {
        let missed = u64::from(prompt_tokens).saturating_sub(hit.hit_tokens());
        let loaded = u64::from(hit.cpu) * BLOCK_TOKENS;
        let us = (missed as f64 + loaded as f64 * self.load_ratio) * self.us_per_token;
        // Saturating and finite: `as` clamps.
        us.round() as u64
    }
}

/// One model's LMCache counters: tokens asked of the tier and those it had.
#[derive(Debug, Default)]
pub struct Counters {
    lookups: AtomicU64,
    hits: AtomicU64,
}

impl Counters {
    /// Counts a lookup of `prompt_tokens` that found `hit`: the tokens past the GPU hit are
    /// asked of LMCache, the CPU hit's tokens found.
    pub fn count(&self, hit: &PrefixHit, prompt_tokens: u32) {
        let gpu = u64::from(hit.hit.saturating_sub(hit.cpu)) * BLOCK_TOKENS;
        let asked = u64::from(prompt_tokens).saturating_sub(gpu);
        let found = (u64::from(hit.cpu) * BLOCK_TOKENS).min(asked);
        self.lookups.fetch_add(asked, Ordering::Relaxed);
        self.hits.fetch_add(found, Ordering::Relaxed);
    }
}

/// Appends LMCache's series and vLLM's external prefix-cache counters for `models`.
pub fn render(out: &mut String, models: &[(String, Arc<ModelMetrics>)]) {
    type Pick = fn(&ModelMetrics) -> f64;
    let usage: Pick = |m| (m.cpu_usage().0 as u64 * BLOCK_BYTES) as f64;
    let lookups: Pick = |m| m.lmcache().lookups.load(Ordering::Relaxed) as f64;
    let hits: Pick = |m| m.lmcache().hits.load(Ordering::Relaxed) as f64;
    let rate: Pick = |m| {
        let c = m.lmcache();
        let (asked, found) = (c.lookups.load(Ordering::Relaxed), c.hits.load(Ordering::Relaxed));
        if asked == 0 {
            0.0
        } else {
            found as f64 / asked as f64
        }
    };
    let series: [(&str, &str, &str, Pick, &str); 6] = [
        ("lmcache:local_cache_usage", "gauge", "Local cache usage (bytes) of lmcache", usage, "worker_id=\"0\""),
        ("lmcache:num_lookup_tokens_total", "counter", "Tokens looked up in lmcache", lookups, "worker_id=\"0\""),
        ("lmcache:num_lookup_hits_total", "counter", "Tokens found by lmcache lookups", hits, "worker_id=\"0\""),
        ("lmcache:lookup_hit_rate", "gauge", "Hit rate of lmcache lookups", rate, "worker_id=\"0\""),
        (
            "vllm:external_prefix_cache_queries_total",
            "counter",
            "External prefix cache queries, in tokens",
            lookups,
            "engine=\"0\"",
        ),
        (
            "vllm:external_prefix_cache_hits_total",
            "counter",
            "External prefix cache hits, in tokens",
            hits,
            "engine=\"0\"",
        ),
    ];
    for (name, kind, help, pick, label) in series {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (model, m) in models {
            let _ = writeln!(out, "{name}{{model_name=\"{model}\",{label}}} {}", pick(m));
        }
    }
}

/// `GET /lmcache/occupancy`: how full the CPU tiers of every model are together, or 404
/// without `--lmcache-blocks`.
pub async fn occupancy(State(state): State<Arc<SimState>>) -> Response {
    let (held, capacity) = state.models.iter().fold((0, 0), |(h, c), (_, m)| {
        let (held, capacity) = m.cpu_usage();
        (h + held, c + capacity)
    });
    if capacity == 0 {
        return (StatusCode::NOT_FOUND, "no LMCache tier (--lmcache-blocks)").into_response();
    }
    let occupancy = held as f64 / capacity as f64;
    Json(serde_json::json!({ "occupancy": occupancy, "cache_available": true })).into_response()
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::Request;
    use serde_json::{json, Value};
    use tower::ServiceExt as _;

    use super::*;
    use crate::sim::{router, SimArgs, CPU_HIT_HEADER, PREFILL_HEADER, PREFIX_HIT_HEADER};

    #[test]
    fn prefill_counts_missed_tokens_and_a_share_of_loaded_ones() {
        let model = Prefill::new(&LmcacheArgs { prefill_us_per_token: 100.0, ..LmcacheArgs::default() });
        let hit = |hit, cpu| PrefixHit { hit, blocks: 4, cpu, prefill_us: 0 };
        assert_eq!(model.micros(&hit(0, 0), 70), 7_000, "a miss prefills every token");
        assert_eq!(model.micros(&hit(4, 0), 70), 600, "GPU hits are free: 6 tokens past 4 blocks");
        assert_eq!(model.micros(&hit(4, 4), 70), 600 + 6_400 / 10, "CPU blocks cost a tenth");
        assert_eq!(Prefill::default().micros(&hit(0, 0), 70), 0, "off by default");
    }

    fn sim(gpu: u32, cpu: u32) -> axum::Router {
        let lmcache = LmcacheArgs { lmcache_blocks: cpu, prefill_us_per_token: 1000.0, ..LmcacheArgs::default() };
        router(&SimArgs { kv_blocks: gpu, lmcache, ..SimArgs::default() })
    }

    async fn get(app: &axum::Router, path: &str) -> (u16, String) {
        let response = app.clone().oneshot(Request::get(path).body(Body::empty()).unwrap()).await.unwrap();
        let status = response.status().as_u16();
        let body = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    /// Sends `words` as one user message; returns the hit headers and the usage.
    async fn chat(app: &axum::Router, text: &str) -> (String, Option<String>, Option<String>, Value) {
        let body = json!({"model": "sim-small", "max_tokens": 1, "messages": [{"role": "user", "content": text}]});
        let request = Request::post("/v1/chat/completions")
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .unwrap();
        let response = app.clone().oneshot(request).await.unwrap();
        let header = |name: &str| response.headers().get(name).map(|v| v.to_str().unwrap().to_owned());
        let (hit, cpu, prefill) = (header(PREFIX_HIT_HEADER).unwrap(), header(CPU_HIT_HEADER), header(PREFILL_HEADER));
        let body: Value =
            serde_json::from_slice(&axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap()).unwrap();
        (hit, cpu, prefill, body["usage"].clone())
    }

    fn words(from: usize, n: usize) -> String {
        (from..from + n).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" ")
    }

    /// A conversation pushed out of the GPU cache comes back from the CPU tier: a hit in
    /// the headers and the usage, a shorter prefill than a miss, the tier's metrics and
    /// occupancy.
    #[tokio::test]
    async fn a_prefix_evicted_from_the_gpu_is_served_from_the_cpu_tier() {
        let app = sim(4, 8);
        let a = words(0, 63); // "user:" + 63 words: 4 blocks
        let (_, _, miss_prefill, usage) = chat(&app, &a).await;
        assert!(usage.get("prompt_tokens_details").is_none(), "{usage}");
        chat(&app, &words(500, 63)).await; // a leaves the GPU cache for the CPU tier
        let (hit, cpu, prefill, usage) = chat(&app, &a).await;
        assert_eq!((hit.as_str(), cpu.as_deref()), ("4/4", Some("4")));
        assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], 64);
        let ms = |v: Option<String>| v.unwrap().parse::<f64>().unwrap();
        assert!(ms(prefill) < ms(miss_prefill) / 5.0, "loading beats recomputing");
        let (_, page) = get(&app, "/metrics").await;
        assert!(
            page.contains(&format!(
                "lmcache:local_cache_usage{{model_name=\"sim-small\",worker_id=\"0\"}} {}",
                8 * BLOCK_BYTES
            )),
            "{page}"
        );
        assert!(
            page.contains("lmcache:num_lookup_hits_total{model_name=\"sim-small\",worker_id=\"0\"} 64\n"),
            "{page}"
        );
        assert!(
            page.contains("vllm:external_prefix_cache_hits_total{model_name=\"sim-small\",engine=\"0\"} 64\n"),
            "{page}"
        );
        let (status, body) = get(&app, "/lmcache/occupancy").await;
        assert_eq!(status, 200);
        assert_eq!(serde_json::from_str::<Value>(&body).unwrap(), json!({"occupancy": 1.0, "cache_available": true}));
    }

    #[tokio::test]
    async fn without_the_tier_nothing_changes() {
        let app = sim(4, 0);
        let a = words(0, 63);
        chat(&app, &a).await;
        chat(&app, &words(500, 63)).await;
        let (hit, cpu, _, _) = chat(&app, &a).await;
        assert_eq!((hit.as_str(), cpu), ("0/4", None));
        assert_eq!(get(&app, "/lmcache/occupancy").await.0, 404);
        assert!(!get(&app, "/metrics").await.1.contains("lmcache:"));
    }
}
