//! The catalog of ferrogate's request metrics and how their labels travel through Envoy.
//!
//! Envoy stats have no labels, so the filter writes a labelled series as one stat whose name
//! carries its labels after the family name:
//!
//! ```text
//! ferrogate.requests_total;api=chat_completions;model=chat;provider=local;status=200;status_class=2xx
//! ```
//!
//! Envoy's `stats_config.stats_tags` (`envoy/stats-tags.yaml`: one regex `(;<label>=([^;]*))`
//! per label) takes each `;label=value` out of the name and makes it a tag, so Envoy's
//! `/stats/prometheus` prints `ferrogate_requests_total{api="chat_completions",...}`.
//! `ferrogate serve` applies the same regexes to the same names, and then follows Prometheus'
//! conventions where Envoy keeps its own (seconds and USD instead of milliseconds,
//! microseconds and micro-USD; a `# HELP` line per family): [`Unit`].
//!
//! Label values come only from the configuration (a model or provider it names, a key's name)
//! or from closed sets in the code (API, status, reason), never from what a client sends, so
//! the number of series is bounded by the configuration.

use std::borrow::Cow;

use crate::config::{Config, Resolved};

/// The kind of a metric, as proxy-wasm defines it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up.
    Counter,
    /// Set to a value.
    Gauge,
    /// Distribution over Envoy's default buckets.
    Histogram,
}

/// The unit a family is recorded in (the filter records integers only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// A count, or a dimensionless value.
    None,
    /// Milliseconds (`_ms`); Prometheus' base unit is seconds.
    Milliseconds,
    /// Microseconds (`_us`); Prometheus' base unit is seconds.
    Microseconds,
    /// Micro-USD (`_microusd`); exported as USD.
    MicroUsd,
}

impl Unit {
    /// Factor from the recorded unit to the base unit.
    pub fn to_base(self) -> f64 {
        match self {
            Unit::None => 1.0,
            Unit::Milliseconds => 1e-3,
            Unit::Microseconds | Unit::MicroUsd => 1e-6,
        }
    }

    /// The name suffix of the recorded unit and the base unit's (`_ms` → `_seconds`).
    pub fn suffixes(self) -> Option<(&'static str, &'static str)> {
        match self {
            Unit::None => None,
            Unit::Milliseconds => Some(("_ms", "_seconds")),
            Unit::Microseconds => Some(("_us", "_seconds")),
            Unit::MicroUsd => Some(("_microusd", "_usd")),
        }
    }
}

/// One metric family.
#[derive(Debug, Clone, Copy)]
pub struct Family {
    /// The proxy-wasm name before any label (`ferrogate.requests_total`).
    pub name: &'static str,
    /// Counter, gauge or histogram.
    pub kind: Kind,
    /// What the recorded integers count.
    pub unit: Unit,
    /// Its labels, in the order the filter writes them (`key` comes last, when enabled).
    pub labels: &'static [&'static str],
    /// The `# HELP` text.
    pub help: &'static str,
}

/// Every label any family carries; each has one `stats_tags` regex ([`tag_regex`]).
pub const LABELS: [&str; 15] = [
    "api",
    "model",
    "provider",
    "status",
    "status_class",
    "reason",
    "type",
    "metric",
    "outcome",
    "feed",
    "band",
    "key",
    "rule",
    "stage",
    "action",
];

/// The `stats_tags` regex of `label`: the first group (`;label=value`) leaves the name, the
/// second (the value) becomes the tag.
pub fn tag_regex(label: &str) -> String {
    format!("(;{label}=([^;]*))")
}

const MP: &[&str] = &["model", "provider"];

/// The families the filter defines, in the order the manual lists them.
pub const FAMILIES: &[Family] = &[
    family("ferrogate.requests_total", Kind::Counter, Unit::None, &["api", "model", "provider", "status", "status_class"],
        "Requests finished, by API, model, provider and final status; the filter's own answers included (model unknown, provider none when not routed)."),
    family("ferrogate.errors_total", Kind::Counter, Unit::None, &["api", "model", "provider", "reason"],
        "Requests that ended in an error, by reason: the error code of the filter's own answer, upstream_error, upstream_failed or client_closed."),
    family("ferrogate.tokens_total", Kind::Counter, Unit::None, &["model", "provider", "type"],
        "Tokens, by type: input (cached included), output, cached_input."),
    family("ferrogate.cost_microusd_total", Kind::Counter, Unit::MicroUsd, MP,
        "Cost of priced requests, from the pricing table."),
    family("ferrogate.request_duration_ms", Kind::Histogram, Unit::Milliseconds, MP,
        "Request duration, first callback to the end of the response."),
    family("ferrogate.time_to_first_token_ms", Kind::Histogram, Unit::Milliseconds, MP,
        "Time to first token: the first event carrying output for streams, the first body byte otherwise."),
    family("ferrogate.inter_token_latency_us", Kind::Histogram, Unit::Microseconds, MP,
        "Mean time between output tokens of a streamed answer after the first (one value per request with two or more)."),
    family("ferrogate.filter_duration_us", Kind::Histogram, Unit::Microseconds, &[],
        "Time spent in the filter's callbacks over a whole request, usage tracking and the record included."),
    family("ferrogate.queue_duration_ms", Kind::Histogram, Unit::Milliseconds, &["model"],
        "Time a request waited in a flow-control queue."),
    family("ferrogate.limit_rejections_total", Kind::Counter, Unit::None, &["metric"],
        "Requests refused by a limit, by what the limit counts: requests, tokens, usd, mcp_requests, tool_calls."),
    family("ferrogate.limit_cuts_total", Kind::Counter, Unit::None, &["metric"],
        "Streams cut at their allowance (overrun: cut), by what the limit counts."),
    family("ferrogate.upstream_attempts_total", Kind::Counter, Unit::None, &["provider"],
        "Attempts sent to a provider, retried ones included."),
    family("ferrogate.failovers_total", Kind::Counter, Unit::None, &["provider"],
        "Attempts abandoned to retry elsewhere, by the provider that failed."),
    family("ferrogate.flow_control_total", Kind::Counter, Unit::None, &["outcome"],
        "Flow control: requests queued, refused on a full band (full), that waited their time to live (expired)."),
    family("ferrogate.queue_depth", Kind::Gauge, Unit::None, &["model", "band"],
        "Requests waiting in a model's flow-control queue, by priority band."),
    family("ferrogate.lease_waits_total", Kind::Counter, Unit::None, &["outcome"],
        "Requests that waited for a limits lease top-up, by how the wait ended: admitted, refused."),
    family("ferrogate.limits_synced", Kind::Gauge, Unit::None, &[],
        "1 while the cross-replica limits view is current, else 0 (with redis and some limit only)."),
    family("ferrogate.kv_decisions_total", Kind::Counter, Unit::None, &["outcome"],
        "precise_cache_aware picks by what the KV index said: hit, miss, neutral, tokenize_fallback."),
    family("ferrogate.sidecar_calls_total", Kind::Counter, Unit::None, &["feed", "outcome"],
        "Calls from the filter to its sidecar, by feed and outcome (ok, error)."),
    family("ferrogate.snapshot_version", Kind::Gauge, Unit::None, &[],
        "The snapshot the filter applies: the first 32 bits of its content version, as a number (compare ferrogate_snapshot_served_version)."),
    family("ferrogate.targets_feed_stale", Kind::Gauge, Unit::None, &[],
        "1 while the targets feed's engine figures are older than targets_max_age_ms (the sidecar stopped confirming them) and count as unknown, else 0."),
    family("ferrogate.targets_feed_stale_total", Kind::Counter, Unit::None, &[],
        "Times the targets feed went stale (its engine figures aged past targets_max_age_ms)."),
    family("ferrogate.guardrail_hits_total", Kind::Counter, Unit::None, &["rule", "stage", "action"],
        "Guardrail detector matches, by rule (policy/rule), stage (input, output) and the rule's action (block, redact, mask, log)."),
    family("ferrogate.guardrail_checks_total", Kind::Counter, Unit::None, &["rule", "stage", "outcome"],
        "External guardrail checks (webhooks, moderation), by rule, stage and verdict: allow, block, rewrite, error."),
    family("ferrogate.cache_lookups_total", Kind::Counter, Unit::None, &["model", "outcome"],
        "Requests under a response-cache policy, by model and outcome: hit, miss, bypass."),
    family("ferrogate.provider_key_events_total", Kind::Counter, Unit::None, &["provider", "key", "outcome"],
        "Keys of a provider's pool left alone, by provider, key fingerprint (k-...) and outcome: cooldown (it answered 429), disabled (401/403, until the provider's keys change)."),
];

const fn family(
    name: &'static str,
    kind: Kind,
    unit: Unit,
    labels: &'static [&'static str],
    help: &'static str,
) -> Family {
    Family { name, kind, unit, labels, help }
}

/// The family a stat name belongs to (its part before the first `;`).
pub fn family_of(stat: &str) -> Option<&'static Family> {
    let base = stat.split(';').next().unwrap_or(stat);
    FAMILIES.iter().find(|f| f.name == base)
}

/// The `model` label of a request for `requested`: the configured model it resolves to
/// (aliases fold into their model); for `provider/model`, that id when the pricing table names
/// it, else `provider/*`; `unknown` for anything else. Never the client's text as such, so the
/// values are bounded by the configuration.
pub fn model_label<'a>(config: &'a Config, requested: &'a str) -> Cow<'a, str> {
    match config.resolve(requested) {
        Some(Resolved::Model(i)) => config.models.get(i).map_or(Cow::Borrowed(UNKNOWN), |m| Cow::Borrowed(&m.name)),
        Some(Resolved::Pinned { provider, model }) => {
            if config.pricing.contains_key(requested) || config.pricing.contains_key(model) {
                Cow::Borrowed(requested)
            } else {
                let name = config.providers.get(provider).map_or(UNKNOWN, |p| p.name.as_str());
                Cow::Owned(format!("{name}/*"))
            }
        }
        None => Cow::Borrowed(UNKNOWN),
    }
}

/// The label value of anything the configuration does not name.
pub const UNKNOWN: &str = "unknown";
/// The `api` label of `/mcp/{server}` requests.
pub const MCP: &str = "mcp";
/// The `api` label of `/a2a/{agent}` requests.
pub const A2A: &str = "a2a";
/// The `provider` label of a request that was not routed.
pub const NO_PROVIDER: &str = "none";

/// `2xx` for 200..=299 and so on; `other` outside 100..=599.
pub fn status_class(status: u16) -> &'static str {
    match status {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        500..=599 => "5xx",
        _ => "other",
    }
}

/// Appends `;label=value` to a stat name. `;` and `=` would end the value early and control
/// characters have no place in a label, so they become `_`; values are capped at 128 bytes.
pub fn push_label(name: &mut String, label: &str, value: &str) {
    name.push(';');
    name.push_str(label);
    name.push('=');
    let mut taken = 0;
    for c in value.chars() {
        taken += c.len_utf8();
        if taken > 128 {
            break;
        }
        name.push(if c == ';' || c == '=' || c.is_control() { '_' } else { c });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_label_of_every_family_is_known_and_names_are_unique() {
        for (i, f) in FAMILIES.iter().enumerate() {
            assert!(f.name.starts_with("ferrogate."), "{}", f.name);
            assert!(!f.help.is_empty(), "{}", f.name);
            for l in f.labels {
                assert!(LABELS.contains(l), "{}: {l}", f.name);
            }
            assert!(FAMILIES.iter().skip(i + 1).all(|g| g.name != f.name), "{}", f.name);
            // The unit is in the name, so serve can rename it and Envoy users can read it.
            if let Some((suffix, _)) = f.unit.suffixes() {
                assert!(f.name.trim_end_matches("_total").ends_with(suffix), "{}", f.name);
            }
            assert_eq!(f.kind == Kind::Counter, f.name.ends_with("_total"), "{}", f.name);
        }
    }

    #[test]
    fn labels_cannot_break_out_of_their_value() {
        let mut name = "ferrogate.requests_total".to_string();
        push_label(&mut name, "model", "a;provider=x\n");
        assert_eq!(name, "ferrogate.requests_total;model=a_provider_x_");
        assert_eq!(family_of(&name).map(|f| f.name), Some("ferrogate.requests_total"));
        let mut long = String::new();
        push_label(&mut long, "model", &"é".repeat(100));
        assert_eq!(long.len(), ";model=".len() + 128);
    }

    #[test]
    fn model_labels_come_from_the_configuration_only() {
        let yaml = "providers:\n  - { name: openai, kind: openai, base_url: 'https://api.openai.com' }\n\
                    models:\n  - { name: chat, targets: [{ provider: openai, model: gpt-4.1-mini }] }\n\
                    aliases: { gpt: chat }\npricing:\n  gpt-4o: { input_per_mtok: 2.5, output_per_mtok: 10 }\n";
        let raw: crate::config::RawConfig = serde_saphyr::from_str(yaml).unwrap();
        let config = Config::try_from(raw).unwrap();
        assert_eq!(model_label(&config, "chat"), "chat");
        assert_eq!(model_label(&config, "gpt"), "chat", "an alias counts as its model");
        assert_eq!(model_label(&config, "openai/gpt-4o"), "openai/gpt-4o", "priced: named by the config");
        assert_eq!(model_label(&config, "openai/made-up-7"), "openai/*");
        for anything in ["aaa_24437", "", "nowhere/x", "openai/"] {
            assert_eq!(model_label(&config, anything), UNKNOWN, "{anything}");
        }
    }

    #[test]
    fn status_classes() {
        assert_eq!(status_class(200), "2xx");
        assert_eq!(status_class(499), "4xx");
        assert_eq!(status_class(503), "5xx");
        assert_eq!(status_class(0), "other");
        assert_eq!(status_class(999), "other");
    }
}
