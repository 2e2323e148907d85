//! The targets feed: what the sidecar knows about every routing target's health and engine
//! load, polled by the filter (`GET /v1/targets` on the sidecar cluster).
//!
//! One [`EndpointState`] per endpoint of every provider: each `host:port` of a provider's
//! `endpoints` pool, or the provider's `base_url` authority ([`crate::config::Provider::authority`])
//! when it has no pool. The sidecar probes self-hosted engines actively (`/health`, then
//! `/v1/models`) and scrapes their vLLM/SGLang `/metrics`; SaaS providers are not probed and
//! stay healthy unless passive signals say otherwise.
//!
//! Semantics for the router:
//! - `healthy: false` means the sidecar saw several consecutive probe failures. Such an
//!   endpoint carries `cooldown_until_ms` (Unix ms), pushed forward by every further failure;
//!   [`EndpointState::parked`] is true while that time is in the future. Once it has passed
//!   with no newer feed (the sidecar stopped answering), the endpoint is eligible again:
//!   stale health information fails open.
//! - `running` / `waiting`: requests in the engine's batch / queue, summed over the models it
//!   serves; `kv_usage_permille`: KV-cache usage in per mille (0..=1000, integer so the filter
//!   compares without floats), the fullest model's when an engine serves several. Each is
//!   absent when unknown (no `/metrics`, scrape failed, not a self-hosted engine).
//! - `cache_occupancy_permille`: how full the engine's LMCache store is (its occupancy
//!   source), for `lmcache_aware`; absent when unknown.
//! - `adapters` / `max_loras`: the LoRA adapters a vLLM engine reports in use (its running
//!   and waiting requests' adapters, `vllm:lora_requests_info`) and its adapter capacity;
//!   omitted when the engine reports none. `lora_aware` prefers them over what it learned.
//! - `version` changes whenever any field of any entry changes, so an unchanged version means
//!   an unchanged feed.
//! - The engine figures are as old as the sidecar's last answer (a 200, or a 304 saying the
//!   feed is unchanged), not as the body: a feed the sidecar stopped confirming ages, and past
//!   [`Freshness::max_age_ms`] its figures count as unknown ([`Freshness::stale`]).
//!
//! The wire form is compact JSON; the optional fields are omitted when unknown:
//! `{"version":7,"endpoints":[{"provider":"pool","endpoint":"10.0.0.1:8000","healthy":true,
//! "running":3,"waiting":0,"kv_usage_permille":412}]}`.

use serde::{Deserialize, Serialize};

/// One answer of `GET /v1/targets`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetFeed {
    /// Changes whenever the content changes (a generation counter of the sidecar).
    pub version: u64,
    /// Every endpoint of every configured provider.
    #[serde(default)]
    pub endpoints: Vec<EndpointState>,
}

/// Health and load of one endpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointState {
    /// Provider name (the config slug).
    pub provider: String,
    /// `host:port` of a pool member, or the provider's `base_url` authority.
    pub endpoint: String,
    /// False after consecutive failed probes, until consecutive successes.
    pub healthy: bool,
    /// Unix ms until which an unhealthy endpoint should not be picked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cooldown_until_ms: Option<u64>,
    /// Requests in the engine's running batch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<u32>,
    /// Requests queued in the engine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<u32>,
    /// KV-cache usage, per mille (0..=1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_usage_permille: Option<u16>,
    /// How full the engine's offload cache is, per mille (LMCache's occupancy source:
    /// `occupancy` when `cache_available`); absent when unknown, unavailable or stale.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_occupancy_permille: Option<u16>,
    /// LoRA adapters the engine reports in use (vLLM's running and waiting adapters), each
    /// once; empty when it reports none or is not asked (so older feeds read the same).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub adapters: Vec<String>,
    /// How many adapters the engine keeps loaded at once (vLLM's `--max-loras`), if it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_loras: Option<u32>,
}

impl TargetFeed {
    /// Parses an answer.
    ///
    /// # Errors
    /// The body is not a feed.
    pub fn parse(body: &[u8]) -> Result<TargetFeed, serde_json::Error> {
        serde_json::from_slice(body)
    }

    /// The compact JSON form.
    ///
    /// # Errors
    /// Never in practice (every field serializes); kept for the caller to decide.
    pub fn to_json(&self) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec(self)
    }

    /// The state of `endpoint` of `provider`, if the feed has it.
    pub fn get(&self, provider: &str, endpoint: &str) -> Option<&EndpointState> {
        self.endpoints.iter().find(|e| e.provider == provider && e.endpoint == endpoint)
    }
}

/// How current the engine figures of the latest feed are. The filter records when the sidecar
/// last answered a poll (the feed body carries no time, and a 304 confirms it without a body),
/// and hands that time to the router with the bound from its plugin settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Freshness {
    /// Unix ms of the sidecar's latest answer confirming the feed.
    pub confirmed_ms: u64,
    /// How long after that the figures may still be used.
    pub max_age_ms: u64,
}

impl Freshness {
    /// True when the figures are older than the bound at `now_ms`: they no longer say what the
    /// engines do (the sidecar died or cannot be reached), so they count as unknown. A clock
    /// that stepped back reads as fresh.
    pub fn stale(&self, now_ms: u64) -> bool {
        now_ms.saturating_sub(self.confirmed_ms) > self.max_age_ms
    }
}

impl EndpointState {
    /// True while an unhealthy endpoint's cooldown runs at `now_ms`: do not pick it. An
    /// unhealthy endpoint without a cooldown, or past it, is not parked (fail open).
    pub fn parked(&self, now_ms: u64) -> bool {
        !self.healthy && self.cooldown_until_ms.is_some_and(|until| now_ms < until)
    }

    /// KV-cache usage per mille from a 0..=1 fraction (clamped; NaN is unknown).
    pub fn permille(fraction: f64) -> Option<u16> {
        if fraction.is_nan() {
            return None;
        }
        // Clamped to 0..=1000 first, so the cast cannot truncate.
        Some((fraction.clamp(0.0, 1.0) * 1000.0).round() as u16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool_member() -> EndpointState {
        EndpointState {
            provider: "pool".into(),
            endpoint: "10.0.0.1:8000".into(),
            healthy: true,
            cooldown_until_ms: None,
            running: Some(3),
            waiting: Some(0),
            kv_usage_permille: Some(412),
            cache_occupancy_permille: None,
            adapters: Vec::new(),
            max_loras: None,
        }
    }

    #[test]
    fn a_feed_round_trips_in_compact_form() {
        let saas = EndpointState {
            provider: "openai".into(),
            endpoint: "api.openai.com".into(),
            healthy: true,
            ..Default::default()
        };
        let down = EndpointState { healthy: false, cooldown_until_ms: Some(1_700_000_030_000), ..pool_member() };
        let feed = TargetFeed { version: 7, endpoints: vec![pool_member(), saas, down] };
        let bytes = feed.to_json().unwrap();
        assert_eq!(
            std::str::from_utf8(&bytes).unwrap(),
            concat!(
                r#"{"version":7,"endpoints":["#,
                r#"{"provider":"pool","endpoint":"10.0.0.1:8000","healthy":true,"running":3,"waiting":0,"kv_usage_permille":412},"#,
                r#"{"provider":"openai","endpoint":"api.openai.com","healthy":true},"#,
                r#"{"provider":"pool","endpoint":"10.0.0.1:8000","healthy":false,"cooldown_until_ms":1700000030000,"running":3,"waiting":0,"kv_usage_permille":412}"#,
                "]}"
            )
        );
        assert_eq!(TargetFeed::parse(&bytes).unwrap(), feed);
    }

    #[test]
    fn parsing_tolerates_absent_fields_and_rejects_wrong_types() {
        let feed =
            TargetFeed::parse(br#"{"version":1,"endpoints":[{"provider":"p","endpoint":"h:1","healthy":false}]}"#);
        let feed = feed.unwrap();
        assert_eq!(feed.get("p", "h:1").map(|e| (e.healthy, e.running)), Some((false, None)));
        assert!(feed.get("p", "h:2").is_none());
        assert_eq!(TargetFeed::parse(br#"{"version":2}"#).unwrap().endpoints, []);
        assert!(TargetFeed::parse(br#"{"version":"x","endpoints":[]}"#).is_err());
        assert!(TargetFeed::parse(br#"{"version":1,"endpoints":[{"provider":"p","endpoint":"h:1"}]}"#).is_err());
        assert!(TargetFeed::parse(
            br#"{"version":1,"endpoints":[{"provider":"p","endpoint":"h","healthy":true,"kv_usage_permille":70000}]}"#
        )
        .is_err());
        assert!(TargetFeed::parse(b"\xff junk").is_err());
    }

    #[test]
    fn lora_residency_travels_only_when_reported() {
        let lora = EndpointState { adapters: vec!["sql".into(), "chat".into()], max_loras: Some(2), ..pool_member() };
        let feed = TargetFeed { version: 3, endpoints: vec![lora.clone()] };
        let text = String::from_utf8(feed.to_json().unwrap()).unwrap();
        assert!(text.ends_with(r#""kv_usage_permille":412,"adapters":["sql","chat"],"max_loras":2}]}"#), "{text}");
        assert_eq!(TargetFeed::parse(text.as_bytes()).unwrap(), feed);
        // A feed from before the fields existed reads as "nothing reported".
        let old = TargetFeed::parse(br#"{"version":1,"endpoints":[{"provider":"p","endpoint":"h:1","healthy":true}]}"#);
        let old = old.unwrap();
        assert_eq!(old.get("p", "h:1").map(|e| (e.adapters.len(), e.max_loras)), Some((0, None)));
    }

    #[test]
    fn parked_only_while_an_unhealthy_cooldown_runs() {
        let healthy = pool_member();
        assert!(!healthy.parked(0));
        let down = EndpointState { healthy: false, cooldown_until_ms: Some(1_000), ..pool_member() };
        assert!(down.parked(999));
        assert!(!down.parked(1_000), "stale cooldown fails open");
        let no_cooldown = EndpointState { healthy: false, ..pool_member() };
        assert!(!no_cooldown.parked(0));
    }

    #[test]
    fn figures_go_stale_only_past_the_bound() {
        let f = Freshness { confirmed_ms: 10_000, max_age_ms: 5_000 };
        assert!(!f.stale(10_000) && !f.stale(15_000), "up to the bound, the figures hold");
        assert!(f.stale(15_001));
        assert!(!f.stale(9_000), "a clock that stepped back reads as fresh");
    }

    #[test]
    fn permille_clamps_and_rounds() {
        assert_eq!(EndpointState::permille(0.4124), Some(412));
        assert_eq!(EndpointState::permille(0.4126), Some(413));
        assert_eq!(EndpointState::permille(-1.0), Some(0));
        assert_eq!(EndpointState::permille(7.0), Some(1000));
        assert_eq!(EndpointState::permille(f64::INFINITY), Some(1000));
        assert_eq!(EndpointState::permille(f64::NAN), None);
    }
}
