//! The filter's proxy-wasm metrics: labelled series of the catalog in
//! `ferrogate_core::metrics` (labels as `;label=value` name segments, which Envoy's
//! `stats_tags` and `ferrogate serve` turn into Prometheus labels).
//!
//! Counters are summed per VM and handed to the host on the root's tick (one hostcall per
//! series per tick, not several per request); histograms are recorded as each request ends,
//! their ids cached per (model, provider). Label values come from the configuration or from
//! closed sets, so the number of series is bounded by the configuration; the tally tables are
//! capped as well, flushing early rather than growing.

mod ids;

use ferrogate_core::limits::Metric;
use ferrogate_core::metrics::{push_label, status_class};

use ids::{Ids, LabelledHists};

/// What one finished request reports. Label values are already bounded (see `http::labels`).
pub(crate) struct Observation<'a> {
    /// The API (`chat_completions`, `models`, ..., `unknown`).
    pub(crate) api: &'static str,
    /// The configured model the request resolved to, or `unknown`.
    pub(crate) model: &'a str,
    /// The provider it went to, or `none`.
    pub(crate) provider: &'a str,
    /// The key's name, when key labels are on and the caller has a key.
    pub(crate) key: Option<&'a str>,
    /// Final status (499: the client went away).
    pub(crate) status: u16,
    /// Why it ended in an error, if it did.
    pub(crate) reason: Option<&'static str>,
    /// Input (cached included), output and cached input tokens.
    pub(crate) tokens: [u64; 3],
    /// Cost in micro-USD, when priced.
    pub(crate) cost_micro_usd: Option<u64>,
    /// Whole request, ms (`None`: nothing to time, e.g. a request refused at its headers).
    pub(crate) latency_ms: u64,
    /// Time to first token, ms.
    pub(crate) ttft_ms: Option<u64>,
    /// Mean time between output tokens after the first, µs.
    pub(crate) itl_us: Option<u64>,
    /// Time in this filter's callbacks, µs.
    pub(crate) filter_us: u64,
}

/// Counter increments of one series combination, summed until the tick.
struct Tally {
    api: &'static str,
    model: String,
    provider: String,
    key: Option<String>,
    status: u16,
    reason: Option<&'static str>,
    requests: u64,
    tokens: [u64; 3],
    cost: u64,
}

/// Per provider: attempts sent and attempts abandoned for a retry.
struct Attempts {
    provider: String,
    sent: u64,
    failed_over: u64,
}

/// Distinct tallies a VM keeps between ticks; past this it flushes early.
const MAX_TALLIES: usize = 256;

/// The filter's sidecar feeds, as `sidecar_calls_total` names them.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Feed {
    Snapshot,
    Targets,
    Limits,
    Leases,
    Kv,
    Usage,
}

const FEEDS: [&str; 6] = ["snapshot", "targets", "limits", "leases", "kv", "usage"];

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

/// Metric ids of one VM, and counter increments not yet handed to the host.
#[derive(Default)]
pub(crate) struct Metrics {
    ids: Ids,
    tallies: Vec<Tally>,
    hists: LabelledHists,
    attempts: Vec<Attempts>,
    /// Limit refusals and cuts since the last tick, by what the limit counts (`Metric::ALL`).
    refused: [u64; Metric::ALL.len()],
    cut: [u64; Metric::ALL.len()],
    kv: [u64; 4],
    /// Lease waits by outcome: admitted, refused, late (refused), store away (fallback).
    lease_waits: [u64; 4],
    flow: [u64; 4],
    sidecar_calls: [[u64; 2]; FEEDS.len()],
    snapshot_version: Option<u64>,
    /// Guardrail counters by their full labelled name (bounded by the configuration's rules).
    guardrails: Vec<(String, u64)>,
}

impl Metrics {
    /// Records one finished request.
    pub(crate) fn observe(&mut self, o: &Observation<'_>) {
        if let Some(t) = self.tally(o) {
            t.requests += 1;
            for (sum, n) in t.tokens.iter_mut().zip(o.tokens) {
                *sum += n;
            }
            t.cost += o.cost_micro_usd.unwrap_or(0);
        }
        let [latency, ttft, itl] = self.hists.ids(&mut self.ids, o.model, o.provider);
        ids::record(latency, o.latency_ms);
        if let Some(v) = o.ttft_ms {
            ids::record(ttft, v);
        }
        if let Some(v) = o.itl_us {
            ids::record(itl, v);
        }
        // The response header can only carry the request phase; this covers both phases.
        ids::record(self.ids.histogram("ferrogate.filter_duration_us"), o.filter_us);
    }

    /// Counts an attempt sent to `provider`; `failed_over` when it was abandoned for a retry.
    pub(crate) fn attempt(&mut self, provider: &str, failed_over: bool) {
        let at = match self.attempts.iter().position(|a| a.provider == provider) {
            Some(at) => at,
            None => {
                if self.attempts.len() >= MAX_TALLIES {
                    self.flush();
                }
                self.attempts.push(Attempts { provider: provider.to_string(), sent: 0, failed_over: 0 });
                self.attempts.len() - 1
            }
        };
        if let Some(a) = self.attempts.get_mut(at) {
            a.sent += 1;
            a.failed_over += u64::from(failed_over);
        }
    }

    /// Counts a request a limit refused.
    pub(crate) fn refused(&mut self, metric: Metric) {
        self.refused[metric.index()] += 1;
    }

    /// Counts a stream cut at its allowance.
    pub(crate) fn cut(&mut self, metric: Metric) {
        self.cut[metric.index()] += 1;
    }

    /// Counts a `precise_cache_aware` decision.
    pub(crate) fn kv_decision(&mut self, d: KvDecision) {
        if let Some(n) = self.kv.get_mut(d as usize) {
            *n += 1;
        }
    }

    /// Counts a flow-control event.
    pub(crate) fn flow(&mut self, event: crate::http::FlowEvent) {
        if let Some(n) = self.flow.get_mut(event as usize) {
            *n += 1;
        }
    }

    /// Counts a request that waited for a lease top-up, by how it ended.
    pub(crate) fn lease_wait(&mut self, admitted: bool) {
        self.lease_waits[usize::from(!admitted)] += 1;
    }

    /// Counts a request refused because no lease answer came in time (the store reachable).
    pub(crate) fn lease_late(&mut self) {
        self.lease_waits[2] += 1;
    }

    /// Counts a leased admission decided by the fallback for a store that is away.
    pub(crate) fn lease_away(&mut self) {
        self.lease_waits[3] += 1;
    }

    /// Counts a call to the sidecar by its outcome (an answer of the expected status, or not).
    pub(crate) fn sidecar_call(&mut self, feed: Feed, ok: bool) {
        if let Some(n) = self.sidecar_calls.get_mut(feed as usize) {
            n[usize::from(!ok)] += 1;
        }
    }

    /// Counts `n` matches of guardrail rule `rule` (`policy/rule`) on `stage` with `action`.
    pub(crate) fn guardrail_hit(&mut self, rule: &str, stage: &str, action: &str, n: u64) {
        let name = labelled("ferrogate.guardrail_hits_total", &[("rule", rule), ("stage", stage), ("action", action)]);
        self.guardrail_count(name, n);
    }

    /// Counts one external guardrail check's verdict.
    pub(crate) fn guardrail_check(&mut self, rule: &str, stage: &str, verdict: &str) {
        let name =
            labelled("ferrogate.guardrail_checks_total", &[("rule", rule), ("stage", stage), ("outcome", verdict)]);
        self.guardrail_count(name, 1);
    }

    /// Counts one response-cache outcome (`hit`, `miss`, `bypass`) of `model`.
    pub(crate) fn cache_lookup(&mut self, model: &str, outcome: &str) {
        let name = labelled("ferrogate.cache_lookups_total", &[("model", model), ("outcome", outcome)]);
        self.guardrail_count(name, 1);
    }

    /// Counts one event of a provider's pooled key (`cooldown`, `disabled`), the key named by
    /// its fingerprint only.
    pub(crate) fn key_event(&mut self, provider: &str, fingerprint: &str, event: &str) {
        let labels = [("provider", provider), ("key", fingerprint), ("outcome", event)];
        self.guardrail_count(labelled("ferrogate.provider_key_events_total", &labels), 1);
    }

    /// Adds `n` to the labelled counter `name` (guardrail, cache and key-pool counters),
    /// flushed with the other tallies.
    fn guardrail_count(&mut self, name: String, n: u64) {
        match self.guardrails.iter_mut().find(|(k, _)| *k == name) {
            Some((_, sum)) => *sum += n,
            None => {
                if self.guardrails.len() >= MAX_TALLIES {
                    self.flush();
                }
                self.guardrails.push((name, n));
            }
        }
    }

    /// Records how long a request waited in `model`'s flow-control queue.
    pub(crate) fn queued(&mut self, model: &str, ms: u64) {
        let mut name = "ferrogate.queue_duration_ms".to_string();
        push_label(&mut name, "model", model);
        ids::record(self.ids.histogram(&name), ms);
    }

    /// Sets the queue-depth gauges of `model`, zeroing bands that emptied.
    pub(crate) fn depths(&mut self, model: &str, bands: &[(i32, usize)]) {
        self.ids.depths(model, bands);
    }

    /// The snapshot the VM applies, by its content version (a hex hash): its first 32 bits.
    pub(crate) fn snapshot(&mut self, version: &str) {
        let number = ferrogate_core::snapshot::version_number(version);
        if number.is_some() && number != self.snapshot_version {
            self.snapshot_version = number;
            self.ids.gauge("ferrogate.snapshot_version", number.unwrap_or(0));
        }
    }

    fn tally(&mut self, o: &Observation<'_>) -> Option<&mut Tally> {
        let eq = |a: &str, b: &str| ferrogate_core::bytes::eq(a.as_bytes(), b.as_bytes());
        let found = self.tallies.iter().position(|t| {
            t.status == o.status
                && t.api == o.api
                && t.reason == o.reason
                && eq(&t.model, o.model)
                && eq(&t.provider, o.provider)
                && t.key.as_deref() == o.key
        });
        let at = match found {
            Some(at) => at,
            None => {
                if self.tallies.len() >= MAX_TALLIES {
                    self.flush();
                }
                self.tallies.push(Tally {
                    api: o.api,
                    model: o.model.to_string(),
                    provider: o.provider.to_string(),
                    key: o.key.map(str::to_string),
                    status: o.status,
                    reason: o.reason,
                    requests: 0,
                    tokens: [0; 3],
                    cost: 0,
                });
                self.tallies.len() - 1
            }
        };
        self.tallies.get_mut(at)
    }

    /// Hands the summed counter increments to the host (called on the root's tick).
    pub(crate) fn flush(&mut self) {
        for t in std::mem::take(&mut self.tallies) {
            self.flush_tally(&t);
        }
        for (name, n) in std::mem::take(&mut self.guardrails) {
            self.ids.count(&name, n);
        }
        for a in std::mem::take(&mut self.attempts) {
            self.ids.count(&labelled("ferrogate.upstream_attempts_total", &[("provider", &a.provider)]), a.sent);
            if a.failed_over > 0 {
                self.ids.count(&labelled("ferrogate.failovers_total", &[("provider", &a.provider)]), a.failed_over);
            }
        }
        let metrics = Metric::ALL.map(Metric::as_str);
        let (refused, cut) = (std::mem::take(&mut self.refused), std::mem::take(&mut self.cut));
        self.flush_set("ferrogate.limit_rejections_total", "metric", &metrics, refused);
        self.flush_set("ferrogate.limit_cuts_total", "metric", &metrics, cut);
        let kv = std::mem::take(&mut self.kv);
        self.flush_set("ferrogate.kv_decisions_total", "outcome", &["hit", "miss", "neutral", "tokenize_fallback"], kv);
        let flow = std::mem::take(&mut self.flow);
        self.flush_set("ferrogate.flow_control_total", "outcome", &["queued", "full", "expired", "woken"], flow);
        let waits = std::mem::take(&mut self.lease_waits);
        let outcomes = ["admitted", "refused", "late", "store_away"];
        self.flush_set("ferrogate.lease_waits_total", "outcome", &outcomes, waits);
        for (feed, [ok, err]) in FEEDS.into_iter().zip(std::mem::take(&mut self.sidecar_calls)) {
            for (outcome, n) in [("ok", ok), ("error", err)].into_iter().filter(|&(_, n)| n > 0) {
                let name = labelled("ferrogate.sidecar_calls_total", &[("feed", feed), ("outcome", outcome)]);
                self.ids.count(&name, n);
            }
        }
    }

    fn flush_tally(&mut self, t: &Tally) {
        let (model, provider) = (t.model.as_str(), t.provider.as_str());
        let status = t.status.to_string();
        let mut labels = vec![("api", t.api), ("model", model), ("provider", provider)];
        labels.extend([("status", status.as_str()), ("status_class", status_class(t.status))]);
        labels.extend(t.key.as_deref().map(|k| ("key", k)));
        self.ids.count(&labelled("ferrogate.requests_total", &labels), t.requests);
        if let Some(reason) = t.reason {
            let labels = [("api", t.api), ("model", model), ("provider", provider), ("reason", reason)];
            self.ids.count(&labelled("ferrogate.errors_total", &labels), t.requests);
        }
        for (kind, n) in ["input", "output", "cached_input"].into_iter().zip(t.tokens).filter(|&(_, n)| n > 0) {
            let mut labels = vec![("model", model), ("provider", provider), ("type", kind)];
            labels.extend(t.key.as_deref().map(|k| ("key", k)));
            self.ids.count(&labelled("ferrogate.tokens_total", &labels), n);
        }
        if t.cost > 0 {
            let mut labels = vec![("model", model), ("provider", provider)];
            labels.extend(t.key.as_deref().map(|k| ("key", k)));
            self.ids.count(&labelled("ferrogate.cost_microusd_total", &labels), t.cost);
        }
    }

    fn flush_set<const N: usize>(&mut self, family: &str, label: &str, values: &[&str; N], counts: [u64; N]) {
        // Most sets are all zeros on most ticks: no name is built for them.
        for (value, n) in values.iter().zip(counts).filter(|&(_, n)| n > 0) {
            self.ids.count(&labelled(family, &[(label, value)]), n);
        }
    }
}

/// `family;label=value;...`.
pub(crate) fn labelled(family: &str, labels: &[(&str, &str)]) -> String {
    let mut name = String::with_capacity(family.len() + 24 * labels.len());
    name.push_str(family);
    for (label, value) in labels {
        push_label(&mut name, label, value);
    }
    name
}
