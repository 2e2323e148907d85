//! What the KV service shows: `GET /api/v1/kv` (per endpoint: connected, last sequence,
//! blocks, age of the last event and the stream's counts) and its Prometheus series.

use serde::Serialize;

use super::{EndpointStats, Kv};

/// One provider in `GET /api/v1/kv`.
#[derive(Debug, Serialize)]
pub struct PoolReport {
    /// The provider's name.
    pub provider: String,
    /// Blocks in its index.
    pub blocks: usize,
    /// Its endpoints.
    pub endpoints: Vec<EndpointStats>,
}

/// The admin view at `now_ms`.
pub fn report(kv: &Kv, now_ms: u64) -> Vec<PoolReport> {
    let blocks = kv.blocks();
    kv.stats(now_ms)
        .into_iter()
        .map(|(provider, endpoints)| {
            let blocks = blocks.iter().find(|(p, _)| *p == provider).map_or(0, |(_, n)| *n);
            PoolReport { provider, blocks, endpoints }
        })
        .collect()
}

/// Appends the Prometheus series (counters `_total`, gauges as they are).
pub fn prometheus(report: &[PoolReport], out: &mut String) {
    use std::fmt::Write;
    type Pick = fn(&EndpointStats) -> u64;
    let series: [(&str, &str, &str, Pick); 8] = [
        ("ferrogate_kv_events_total", "counter", "KV-cache events applied to the index.", |e| e.events),
        (
            "ferrogate_kv_malformed_total",
            "counter",
            "KV-event messages that are not event batches, and unknown events.",
            |e| e.malformed,
        ),
        (
            "ferrogate_kv_skipped_total",
            "counter",
            "KV events not indexed (another block size or group, an unknown parent).",
            |e| e.skipped,
        ),
        ("ferrogate_kv_gaps_total", "counter", "Gaps in the KV-event batch sequence.", |e| e.gaps),
        ("ferrogate_kv_replays_total", "counter", "Replays asked of the engine's replay socket.", |e| e.replays),
        ("ferrogate_kv_restarts_total", "counter", "Engine restarts seen in the KV-event stream.", |e| e.restarts),
        ("ferrogate_kv_connected", "gauge", "1 while the KV-event subscription is connected, else 0.", |e| {
            u64::from(e.connected)
        }),
        ("ferrogate_kv_endpoint_blocks", "gauge", "Blocks the endpoint holds in the KV index.", |e| e.blocks as u64),
    ];
    if report.is_empty() {
        return;
    }
    for (name, kind, help, pick) in series {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for pool in report {
            for e in pool.endpoints.iter().filter(|e| e.kv_events.is_some()) {
                let (p, a) = (escape(&pool.provider), escape(&e.endpoint));
                let _ = writeln!(out, "{name}{{provider=\"{p}\",endpoint=\"{a}\"}} {}", pick(e));
            }
        }
    }
    let _ = writeln!(
        out,
        "# HELP ferrogate_kv_index_blocks Blocks in the provider's KV index.\n# TYPE ferrogate_kv_index_blocks gauge"
    );
    for pool in report {
        let _ = writeln!(out, "ferrogate_kv_index_blocks{{provider=\"{}\"}} {}", escape(&pool.provider), pool.blocks);
    }
}

fn escape(label: &str) -> String {
    label.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}
