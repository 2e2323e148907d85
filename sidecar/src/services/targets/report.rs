//! What the admin API (`GET /api/v1/targets`) and `/metrics` show of the targets, and the
//! fingerprints of each provider's keys (never a key).

use ferrogate_core::config::Config;
use serde::Serialize;

use super::Health;

/// Every target, as `GET /api/v1/targets` answers.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The version of the feed the filters see.
    pub version: u64,
    /// Between health probe rounds.
    pub probe_interval_ms: u64,
    /// One per endpoint of every provider, in file order.
    pub targets: Vec<TargetReport>,
    /// Every provider with keys of its own (not minted by a sign-in), in file order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub provider_keys: Vec<ProviderKeys>,
}

/// A provider's keys, named by their fingerprints (`ferrogate_core::keypool::fingerprint`).
/// Whether a pooled key rests or is disabled is known to the proxy, not here: its
/// `ferrogate_provider_key_events_total` counts each key's cooldowns and disablings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProviderKeys {
    /// Provider name.
    pub provider: String,
    /// The keys' fingerprints, in the order requests rotate over them.
    pub keys: Vec<String>,
}

/// The [`ProviderKeys`] of `config`'s providers with keys of their own.
pub fn provider_keys(config: &Config) -> Vec<ProviderKeys> {
    let own = config.providers.iter().filter(|p| !p.signs_in && !p.keys.is_empty());
    let keys = |p: &ferrogate_core::config::Provider| p.keys.iter().map(|k| k.fingerprint.clone()).collect();
    own.map(|p| ProviderKeys { provider: p.name.clone(), keys: keys(p) }).collect()
}

/// One target's health (with the probe counters behind it) and engine load.
#[derive(Debug, Clone, Serialize)]
pub struct TargetReport {
    /// Provider name.
    pub provider: String,
    /// `host:port` of a pool member, or the provider's `base_url` authority.
    pub endpoint: String,
    /// The provider's API family.
    pub kind: &'static str,
    /// Whether it is probed and scraped (self-hosted engines only).
    pub probed: bool,
    /// Health verdict and probe history.
    #[serde(flatten)]
    pub health: Health,
    /// Requests running in the engine, when known.
    pub running: Option<u32>,
    /// Requests waiting in the engine, when known.
    pub waiting: Option<u32>,
    /// KV-cache usage 0..=1 (to the per mille the feed carries), when known.
    pub kv_usage: Option<f64>,
    /// LoRA adapters the engine reports in use (running, then waiting).
    pub adapters: Vec<String>,
    /// Adapters the engine keeps loaded at once, when it says.
    pub max_loras: Option<u32>,
    /// LMCache occupancy 0..=1 (to the per mille the feed carries), when its source says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_occupancy: Option<f64>,
    /// Its CPU and storage cache (LMCache) and external-cache figures, when it reports any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache: Option<super::cache::CacheFigures>,
}

/// Appends the target gauges in Prometheus text form, labels `provider` and `endpoint`:
/// `ferrogate_target_healthy` (1/0) for every target, and `ferrogate_target_running`,
/// `ferrogate_target_waiting` and `ferrogate_target_kv_usage` (0..=1) where the load is known,
/// `ferrogate_target_cache_occupancy` (0..=1) where an LMCache occupancy source answers.
pub fn prometheus(report: &Report, out: &mut String) {
    use std::fmt::Write;
    type Pick = fn(&TargetReport) -> Option<f64>;
    let series: [(&str, &str, Pick); 5] = [
        ("healthy", "1 while a routing target is healthy, else 0.", |t| Some(f64::from(u8::from(t.health.healthy)))),
        ("running", "Requests running in the target's engine, where scraped.", |t| t.running.map(f64::from)),
        ("waiting", "Requests waiting in the target's engine, where scraped.", |t| t.waiting.map(f64::from)),
        ("kv_usage", "KV-cache usage of the target's engine, 0 to 1, where scraped.", |t| t.kv_usage),
        ("cache_occupancy", "LMCache occupancy of the target's engine, 0 to 1, where its source answers.", |t| {
            t.cache_occupancy
        }),
    ];
    for (name, help, pick) in series {
        let _ = writeln!(out, "# HELP ferrogate_target_{name} {help}\n# TYPE ferrogate_target_{name} gauge");
        for t in &report.targets {
            if let Some(value) = pick(t) {
                let (p, e) = (escape(&t.provider), escape(&t.endpoint));
                let _ = writeln!(out, "ferrogate_target_{name}{{provider=\"{p}\",endpoint=\"{e}\"}} {value}");
            }
        }
    }
}

fn escape(label: &str) -> String {
    label.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}
