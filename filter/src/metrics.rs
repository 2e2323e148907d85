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

/// Metric ids of one VM, and counter increments not yet handed to the host.
#[derive(Default)]
pub(crate) struct Metrics {
    ids: HashMap<String, u32>,
    /// Counters are summed here and flushed on the root's tick: one hostcall per counter per
    /// second instead of four per request. Histograms need each value and are recorded at once.
    pending: HashMap<String, u64>,
}

impl Metrics {
    /// Records one finished request.
    pub(crate) fn observe(&mut self, o: &Observation<'_>) {
        let (model, provider) = (segment(o.model), segment(o.provider));
        self.count("ferrogate.requests_total".to_string(), 1);
        self.count(format!("ferrogate.requests.{model}.{provider}.{}", o.status), 1);
        if let Some((input, output)) = o.tokens {
            self.count(format!("ferrogate.tokens_in.{model}.{provider}"), input);
            self.count(format!("ferrogate.tokens_out.{model}.{provider}"), output);
        }
        self.add(MetricType::Histogram, "ferrogate.latency_ms", o.latency_ms);
        if let Some(ttft) = o.ttft_ms {
            self.add(MetricType::Histogram, "ferrogate.ttft_ms", ttft);
        }
        // The response header can only carry the request phase; this covers both phases.
        self.add(MetricType::Histogram, "ferrogate.filter_us", o.filter_us);
    }

    fn count(&mut self, name: String, value: u64) {
        *self.pending.entry(name).or_default() += value;
    }

    /// Hands the summed counter increments to the host (called on the root's tick).
    pub(crate) fn flush(&mut self) {
        let pending = std::mem::take(&mut self.pending);
        for (name, value) in pending {
            self.add(MetricType::Counter, &name, value);
        }
    }

    fn add(&mut self, kind: MetricType, name: &str, value: u64) {
        if kind == MetricType::Counter && value == 0 {
            return; // Envoy rejects zero increments.
        }
        let id = match self.ids.get(name) {
            Some(id) => *id,
            None => match hostcalls::define_metric(kind, name) {
                Ok(id) => {
                    self.ids.insert(name.to_string(), id);
                    id
                }
                Err(e) => {
                    log::debug!("define_metric({name}): {e:?}");
                    return;
                }
            },
        };
        let result = match kind {
            MetricType::Histogram => hostcalls::record_metric(id, value),
            _ => hostcalls::increment_metric(id, i64::try_from(value).unwrap_or(i64::MAX)),
        };
        if let Err(e) = result {
            log::debug!("metric {name}: {e:?}");
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
