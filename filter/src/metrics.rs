//! The filter's proxy-wasm metrics.
//!
//! Envoy stats carry no labels: dimensions are name segments, which Envoy's
//! `stats_config.stats_tags` can extract into Prometheus labels. Names follow
//! `ferrogate.<metric>.<model>.<provider>.<status>`; the segments are sanitised so a dot in a
//! model id cannot shift them. Ids are defined lazily, once per name and VM, and cached.

use std::collections::HashMap;

use proxy_wasm::hostcalls;
use proxy_wasm::types::MetricType;

/// What one finished request reports.
pub(crate) struct Observation<'a> {
    /// Public model name the client asked for (or "-").
    pub(crate) model: &'a str,
    /// Provider (or "-" when the request never got routed).
    pub(crate) provider: &'a str,
    /// Final status (499: client went away).
    pub(crate) status: u16,
    /// Prompt and completion tokens, when known.
    pub(crate) tokens: Option<(u64, u64)>,
    /// Total latency.
    pub(crate) latency_ms: u64,
    /// Time to first token, when there was one.
    pub(crate) ttft_ms: Option<u64>,
    /// Time spent in this filter's callbacks over the whole stream, in microseconds.
    pub(crate) filter_us: u64,
}

/// Counter increments of one (model, provider, status), summed until the tick.
struct Tally {
    model: String,
    provider: String,
    status: u16,
    requests: u64,
    tokens_in: u64,
    tokens_out: u64,
}

/// Distinct (model, provider, status) tallies a VM keeps between ticks; past this it flushes
/// early rather than grow (a flood of made-up model names cannot use up memory).
const MAX_TALLIES: usize = 256;

/// Metric ids of one VM, and counter increments not yet handed to the host.
///
/// Per request this allocates nothing and hashes nothing in the steady state: the request's
/// tally is found by comparing names (a VM sees few combinations per second), histogram ids
/// are cached in fields, and counter names are formatted once per tick in [`Metrics::flush`].
#[derive(Default)]
pub(crate) struct Metrics {
    ids: HashMap<String, u32>,
    requests_total: u64,
    tallies: Vec<Tally>,
    latency_ms: Option<u32>,
    ttft_ms: Option<u32>,
    filter_us: Option<u32>,
    /// Requests refused by a limit since the last tick, by what the limit counts.
    refused: [u64; 3],
    /// Streams cut at their allowance since the last tick: by a token limit, by a USD budget.
    cut: [u64; 2],
    /// Attempts abandoned for a retry since the last tick (`ferrogate.retries`).
    retries: u64,
    /// `precise_cache_aware` decisions since the last tick: hit, miss, neutral, tokenize
    /// fallback (`ferrogate.kv_decisions.<outcome>`).
    kv: [u64; 4],
    /// Requests that waited for a lease top-up since the last tick: admitted, refused
    /// (`ferrogate.lease_waits.<outcome>`).
    lease_waits: [u64; 2],
    /// Flow control since the last tick: requests queued, refused on a full band, expired
    /// (`ferrogate.flow.<queued|full|expired>`).
    flow: [u64; 3],
    queue_ms: Option<u32>,
    /// Queue-depth gauges set so far, by name, so an emptied band goes back to 0.
    depths: Vec<(String, u32)>,
}

/// How a `precise_cache_aware` pick went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KvDecision {
    /// Some endpoint held a leading run of the request's blocks.
    Hit,
    /// Token ids known, no endpoint held the first block.
    Miss,
    /// No token ids, or no connected endpoint with events: the approximate strategy decided.
    Neutral,
    /// `kv_tokenize` failed or was too slow: the approximate strategy decided.
    TokenizeFallback,
}

impl Metrics {
    /// Records one finished request.
    pub(crate) fn observe(&mut self, o: &Observation<'_>) {
        self.requests_total += 1;
        if let Some(tally) = self.tally(o.model, o.provider, o.status) {
            tally.requests += 1;
            if let Some((input, output)) = o.tokens {
                tally.tokens_in += input;
                tally.tokens_out += output;
            }
        }
        // Histograms need each value: recorded at once, ids cached after the first use.
        let id = cached(&mut self.ids, &mut self.latency_ms, "ferrogate.latency_ms");
        record(id, o.latency_ms);
        if let Some(ttft) = o.ttft_ms {
            record(cached(&mut self.ids, &mut self.ttft_ms, "ferrogate.ttft_ms"), ttft);
        }
        // The response header can only carry the request phase; this covers both phases.
        record(cached(&mut self.ids, &mut self.filter_us, "ferrogate.filter_us"), o.filter_us);
    }

    /// Counts a request a limit refused (`ferrogate.limit_refused.<requests|tokens|usd>`).
    pub(crate) fn refused(&mut self, metric: ferrogate_core::limits::Metric) {
        use ferrogate_core::limits::Metric;
        let i = match metric {
            Metric::Requests => 0,
            Metric::Tokens => 1,
            Metric::MicroUsd => 2,
        };
        if let Some(n) = self.refused.get_mut(i) {
            *n += 1;
        }
    }

    /// Counts a stream cut at its allowance (`ferrogate.limit_cut.<tokens|usd>`).
    pub(crate) fn cut(&mut self, metric: ferrogate_core::limits::Metric) {
        let i = usize::from(metric == ferrogate_core::limits::Metric::MicroUsd);
        if let Some(n) = self.cut.get_mut(i) {
            *n += 1;
        }
    }

    /// Counts a `precise_cache_aware` decision.
    pub(crate) fn kv_decision(&mut self, d: KvDecision) {
        let i = d as usize;
        if let Some(n) = self.kv.get_mut(i) {
            *n += 1;
        }
    }

    /// Counts a flow-control event.
    pub(crate) fn flow(&mut self, event: crate::http::FlowEvent) {
        if let Some(n) = self.flow.get_mut(event as usize) {
            *n += 1;
        }
    }

    /// Records how long a request waited in a flow-control queue (`ferrogate.queue_ms`).
    pub(crate) fn queued(&mut self, ms: u64) {
        if let Some(id) = cached(&mut self.ids, &mut self.queue_ms, "ferrogate.queue_ms") {
            let _ = hostcalls::record_metric(id, ms);
        }
    }

    /// Sets the queue-depth gauges of `model` (`ferrogate.queue_depth.<model>.<band>`; a
    /// negative band is written `n<band>`), zeroing bands that emptied.
    pub(crate) fn depths(&mut self, model: &str, bands: &[(i32, usize)]) {
        let prefix = format!("ferrogate.queue_depth.{}.", segment(model));
        let mut seen: Vec<String> = Vec::with_capacity(bands.len());
        for &(band, n) in bands {
            let band = if band < 0 { format!("n{}", band.unsigned_abs()) } else { band.to_string() };
            let name = format!("{prefix}{band}");
            self.gauge(&name, n as u64);
            seen.push(name);
        }
        let stale: Vec<String> = self
            .depths
            .iter()
            .filter(|(n, _)| n.starts_with(&prefix) && !seen.contains(n))
            .map(|(n, _)| n.clone())
            .collect();
        for name in stale {
            self.gauge(&name, 0);
        }
    }

    fn gauge(&mut self, name: &str, value: u64) {
        let id = match self.depths.iter().find(|(n, _)| n == name) {
            Some((_, id)) => *id,
            None => {
                let Ok(id) = hostcalls::define_metric(MetricType::Gauge, name) else { return };
                self.depths.push((name.to_string(), id));
                id
            }
        };
        let _ = hostcalls::record_metric(id, value);
    }

    /// Counts a request that waited for a lease top-up, by how it ended.
    pub(crate) fn lease_wait(&mut self, admitted: bool) {
        if let Some(n) = self.lease_waits.get_mut(usize::from(!admitted)) {
            *n += 1;
        }
    }

    /// Counts an attempt the host abandoned to retry elsewhere.
    pub(crate) fn retried(&mut self) {
        self.retries += 1;
    }

    fn tally(&mut self, model: &str, provider: &str, status: u16) -> Option<&mut Tally> {
        let eq = ferrogate_core::bytes::eq;
        let found = self.tallies.iter().position(|t| {
            t.status == status
                && eq(t.model.as_bytes(), model.as_bytes())
                && eq(t.provider.as_bytes(), provider.as_bytes())
        });
        let at = match found {
            Some(at) => at,
            None => {
                if self.tallies.len() >= MAX_TALLIES {
                    self.flush();
                }
                let (model, provider) = (model.to_string(), provider.to_string());
                self.tallies.push(Tally { model, provider, status, requests: 0, tokens_in: 0, tokens_out: 0 });
                self.tallies.len() - 1
            }
        };
        self.tallies.get_mut(at)
    }

    /// Hands the summed counter increments to the host (called on the root's tick): one
    /// hostcall per counter per second instead of several per request.
    pub(crate) fn flush(&mut self) {
        let total = std::mem::take(&mut self.requests_total);
        self.count("ferrogate.requests_total", total);
        let retries = std::mem::take(&mut self.retries);
        self.count("ferrogate.retries", retries);
        let refused = std::mem::take(&mut self.refused);
        for (reason, n) in ["requests", "tokens", "usd"].into_iter().zip(refused) {
            self.count(&format!("ferrogate.limit_refused.{reason}"), n);
        }
        let cut = std::mem::take(&mut self.cut);
        for (reason, n) in ["tokens", "usd"].into_iter().zip(cut) {
            self.count(&format!("ferrogate.limit_cut.{reason}"), n);
        }
        let kv = std::mem::take(&mut self.kv);
        for (outcome, n) in ["hit", "miss", "neutral", "tokenize_fallback"].into_iter().zip(kv) {
            self.count(&format!("ferrogate.kv_decisions.{outcome}"), n);
        }
        let flow = std::mem::take(&mut self.flow);
        for (event, n) in ["queued", "full", "expired"].into_iter().zip(flow) {
            self.count(&format!("ferrogate.flow.{event}"), n);
        }
        let waits = std::mem::take(&mut self.lease_waits);
        for (outcome, n) in ["admitted", "refused"].into_iter().zip(waits) {
            self.count(&format!("ferrogate.lease_waits.{outcome}"), n);
        }
        for t in std::mem::take(&mut self.tallies) {
            let (model, provider) = (segment(&t.model), segment(&t.provider));
            self.count(&format!("ferrogate.requests.{model}.{provider}.{}", t.status), t.requests);
            self.count(&format!("ferrogate.tokens_in.{model}.{provider}"), t.tokens_in);
            self.count(&format!("ferrogate.tokens_out.{model}.{provider}"), t.tokens_out);
        }
    }

    fn count(&mut self, name: &str, value: u64) {
        if value == 0 {
            return; // Envoy rejects zero increments.
        }
        let Some(id) = define(&mut self.ids, MetricType::Counter, name) else { return };
        if let Err(e) = hostcalls::increment_metric(id, i64::try_from(value).unwrap_or(i64::MAX)) {
            log::debug!("metric {name}: {e:?}");
        }
    }
}

/// The id of histogram `name`, from `slot` or defined (once) and cached there.
fn cached(ids: &mut HashMap<String, u32>, slot: &mut Option<u32>, name: &str) -> Option<u32> {
    if slot.is_none() {
        *slot = define(ids, MetricType::Histogram, name);
    }
    *slot
}

fn record(id: Option<u32>, value: u64) {
    if let Some(id) = id {
        if let Err(e) = hostcalls::record_metric(id, value) {
            log::debug!("metric {id}: {e:?}");
        }
    }
}

/// The id of metric `name`, defined with the host on first use.
fn define(ids: &mut HashMap<String, u32>, kind: MetricType, name: &str) -> Option<u32> {
    if let Some(id) = ids.get(name) {
        return Some(*id);
    }
    match hostcalls::define_metric(kind, name) {
        Ok(id) => {
            ids.insert(name.to_string(), id);
            Some(id)
        }
        Err(e) => {
            log::debug!("define_metric({name}): {e:?}");
            None
        }
    }
}

/// A name segment: `[A-Za-z0-9_-]` only, so model ids like `gpt-4.1` or `org/model` stay one
/// segment.
fn segment(s: &str) -> String {
    let cleaned: String =
        s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).take(64).collect();
    if cleaned.is_empty() {
        "-".to_string()
    } else {
        cleaned
    }
}

#[cfg(test)]
mod tests {
    use super::segment;

    #[test]
    fn segments_cannot_contain_dots_or_slashes() {
        assert_eq!(segment("gpt-4.1"), "gpt-4_1");
        assert_eq!(segment("local/sim"), "local_sim");
        assert_eq!(segment(""), "-");
    }
}
