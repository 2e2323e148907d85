//! What an engine's `/metrics` page says of its cache beyond the GPU: LMCache's series
//! (`lmcache/observability.py`, on vLLM's page when LMCache runs in the engine) and vLLM's
//! external prefix-cache counters (tokens asked of, and found in, a connector such as LMCache).
//!
//! Samples of one series over several label sets (TP workers, data-parallel engines) are
//! summed; the hit rates, which are ratios, take their mean.

use serde::Serialize;

use super::prom::samples;

/// An engine's cache figures; `None` where the page has no such series.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct CacheFigures {
    /// Bytes LMCache holds in CPU memory (`lmcache:local_cache_usage`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_bytes: Option<f64>,
    /// Bytes LMCache holds on local storage (`lmcache:local_storage_usage`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub storage_bytes: Option<f64>,
    /// LMCache's lookup hit rate since its last log, 0..=1 (`lmcache:lookup_hit_rate`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lookup_hit_rate: Option<f64>,
    /// LMCache's retrieve hit rate, 0..=1 (`lmcache:retrieve_hit_rate`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retrieve_hit_rate: Option<f64>,
    /// Tokens LMCache was asked to look up (`lmcache:num_lookup_tokens_total`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lookup_tokens: Option<f64>,
    /// Tokens those lookups found (`lmcache:num_lookup_hits_total`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lookup_hit_tokens: Option<f64>,
    /// Tokens vLLM asked its external cache for (`vllm:external_prefix_cache_queries_total`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub external_query_tokens: Option<f64>,
    /// Tokens the external cache had (`vllm:external_prefix_cache_hits_total`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub external_hit_tokens: Option<f64>,
}

impl CacheFigures {
    /// True when the page had none of the series (no LMCache, no external cache).
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// Reads the cache series of `text`. Non-finite and negative values are ignored.
pub fn read(text: &str) -> CacheFigures {
    let mut out = CacheFigures::default();
    let (mut lookup_rates, mut retrieve_rates) = (Rate::default(), Rate::default());
    for s in samples(text) {
        if !s.value.is_finite() || s.value < 0.0 {
            continue;
        }
        let sum = match s.name {
            "lmcache:local_cache_usage" => &mut out.cpu_bytes,
            "lmcache:local_storage_usage" => &mut out.storage_bytes,
            "lmcache:num_lookup_tokens_total" => &mut out.lookup_tokens,
            "lmcache:num_lookup_hits_total" => &mut out.lookup_hit_tokens,
            "vllm:external_prefix_cache_queries_total" => &mut out.external_query_tokens,
            "vllm:external_prefix_cache_hits_total" => &mut out.external_hit_tokens,
            "lmcache:lookup_hit_rate" => {
                lookup_rates.add(s.value);
                continue;
            }
            "lmcache:retrieve_hit_rate" => {
                retrieve_rates.add(s.value);
                continue;
            }
            _ => continue,
        };
        *sum = Some(sum.unwrap_or(0.0) + s.value);
    }
    out.lookup_hit_rate = lookup_rates.mean();
    out.retrieve_hit_rate = retrieve_rates.mean();
    out
}

/// A mean over label sets.
#[derive(Default)]
struct Rate {
    sum: f64,
    n: u32,
}

impl Rate {
    fn add(&mut self, v: f64) {
        self.sum += v.min(1.0);
        self.n += 1;
    }
    fn mean(&self) -> Option<f64> {
        (self.n > 0).then(|| self.sum / f64::from(self.n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// vLLM 0.34 with LMCache 0.5.6 in the engine, abridged: two TP workers (LMCache labels
    /// its series by worker and role), and vLLM's own external-cache counters.
    const PAGE: &str = r#"# HELP lmcache:local_cache_usage Local cache usage (bytes) of lmcache
# TYPE lmcache:local_cache_usage gauge
lmcache:local_cache_usage{model_name="llama",role="worker",served_model_name="",worker_id="0"} 1.073741824e+09
lmcache:local_cache_usage{model_name="llama",role="worker",served_model_name="",worker_id="1"} 1.073741824e+09
# TYPE lmcache:lookup_hit_rate gauge
lmcache:lookup_hit_rate{model_name="llama",role="scheduler",served_model_name="",worker_id="0"} 0.5
lmcache:lookup_hit_rate{model_name="llama",role="worker",served_model_name="",worker_id="1"} 0.7
# TYPE lmcache:num_lookup_tokens counter
lmcache:num_lookup_tokens_total{model_name="llama",role="scheduler",served_model_name="",worker_id="0"} 4096.0
lmcache:num_lookup_tokens_created{model_name="llama",role="scheduler",served_model_name="",worker_id="0"} 1.79e+09
# TYPE lmcache:num_lookup_hits counter
lmcache:num_lookup_hits_total{model_name="llama",role="scheduler",served_model_name="",worker_id="0"} 1024.0
# HELP vllm:external_prefix_cache_queries External prefix cache queries from KV connector cross-instance cache sharing, in terms of number of queried tokens.
# TYPE vllm:external_prefix_cache_queries counter
vllm:external_prefix_cache_queries_total{engine="0",model_name="llama"} 5000.0
vllm:external_prefix_cache_hits_total{engine="0",model_name="llama"} 1200.0
lmcache:retrieve_hit_rate{model_name="llama",role="worker",served_model_name="",worker_id="0"} NaN
vllm:num_requests_running{engine="0",model_name="llama"} 1.0
"#;

    #[test]
    fn lmcache_and_external_cache_series_are_read() {
        let c = read(PAGE);
        assert_eq!(c.cpu_bytes, Some(2_147_483_648.0), "summed over workers");
        assert_eq!(c.lookup_hit_rate, Some(0.6), "a mean of the rates");
        assert_eq!((c.lookup_tokens, c.lookup_hit_tokens), (Some(4096.0), Some(1024.0)));
        assert_eq!((c.external_query_tokens, c.external_hit_tokens), (Some(5000.0), Some(1200.0)));
        assert_eq!((c.retrieve_hit_rate, c.storage_bytes), (None, None), "NaN and absent series");
        assert!(!c.is_empty());
    }

    #[test]
    fn a_page_without_them_is_empty() {
        assert!(read("vllm:num_requests_running 1\n# garbage {{{\n").is_empty());
        assert!(read("").is_empty());
    }
}
