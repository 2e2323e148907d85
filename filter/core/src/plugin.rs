//! The filter's plugin configuration (Envoy's `configuration` string, JSON).
//!
//! ```json
//! {"config": {...inline config document...},
//!  "cluster_header": "x-ferrogate-cluster", "max_body_bytes": 16777216,
//!  "sidecar_cluster": "ferrogate-sidecar", "sidecar_authority": "127.0.0.1:9000",
//!  "poll_interval_ms": 5000, "targets_max_age_ms": 5000, "internal_token": "..."}
//! ```
//! Either `config` (sidecar-less use) or `sidecar_cluster` must be present; with both, the
//! inline config serves until the first snapshot arrives.

use serde::{Deserialize, Serialize};

use crate::config::{Config, ConfigError, Problem, RawConfig};
use crate::headers::DEFAULT_CLUSTER_HEADER;

/// Default request body limit: 16 MiB (long prompts and inline images are large).
pub const DEFAULT_MAX_BODY_BYTES: usize = 16 * 1024 * 1024;
/// Default snapshot poll interval.
pub const DEFAULT_POLL_INTERVAL_MS: u64 = 5_000;
/// Default age past which the targets feed's engine figures count as unknown: a few of the
/// feed's 1 s polls, so one slow or lost answer does not make them stale.
pub const DEFAULT_TARGETS_MAX_AGE_MS: u64 = 5_000;
/// The smallest `targets_max_age_ms`: twice the feed's 1 s poll, so figures the sidecar keeps
/// confirming never read as stale between two polls.
pub const MIN_TARGETS_MAX_AGE_MS: u64 = 2_000;

/// The plugin configuration as written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPluginConfig {
    /// Inline configuration document (same shape as the YAML file, as JSON).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<RawConfig>,
    /// Request header that carries the chosen cluster (default `x-ferrogate-cluster`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_header: Option<String>,
    /// Request body limit in bytes (default 16 MiB); larger bodies get 413.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_body_bytes: Option<u64>,
    /// Envoy cluster name of the sidecar.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sidecar_cluster: Option<String>,
    /// `:authority` for sidecar calls (default: the cluster name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sidecar_authority: Option<String>,
    /// Snapshot poll interval (default 5000 ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll_interval_ms: Option<u64>,
    /// Age past which the targets feed's engine figures count as unknown (default 5000 ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub targets_max_age_ms: Option<u64>,
    /// Bearer token for the sidecar's filter-facing API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internal_token: Option<String>,
    /// The host retries failed attempts through the filter (`ferrogate serve`): honour the
    /// failover request headers of `crate::failover`. Off by default, because in any other
    /// host they would come from the client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_failover: Option<bool>,
    /// Label the request, token and cost metrics with the key's name (off by default: one
    /// series per key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_key_label: Option<bool>,
    /// Hand each routed request's OpenTelemetry GenAI attributes to the host as filter state
    /// (`crate::gen_ai`), for its spans or access logs (off by default: a hostcall per request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gen_ai_attributes: Option<bool>,
    /// The host is an endpoint picker (`ferrogate serve --epp-listen`): honour its subset and
    /// fallback request headers ([`crate::epp`]). Off by default, because in any other host
    /// they would come from the client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_picker: Option<bool>,
}

/// Where and how the filter reaches its sidecar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidecarSettings {
    /// Envoy cluster name.
    pub cluster: String,
    /// `:authority` for calls.
    pub authority: String,
    /// Poll interval in milliseconds.
    pub poll_interval_ms: u64,
    /// How long the targets feed's engine figures stay usable after the sidecar last confirmed
    /// them, in milliseconds ([`crate::targets::Freshness`]).
    pub targets_max_age_ms: u64,
    /// Bearer token, if the sidecar requires one.
    pub internal_token: Option<String>,
}

/// The validated plugin configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginConfig {
    /// Inline configuration, if given.
    pub config: Option<Config>,
    /// Lower-case request header carrying the cluster name.
    pub cluster_header: String,
    /// Request body limit in bytes.
    pub max_body_bytes: usize,
    /// Sidecar settings, if a sidecar is used.
    pub sidecar: Option<SidecarSettings>,
    /// Honour the host's failover headers (see [`RawPluginConfig::host_failover`]).
    pub host_failover: bool,
    /// Metrics carry a `key` label ([`RawPluginConfig::metrics_key_label`]).
    pub metrics_key_label: bool,
    /// Requests report GenAI attributes ([`RawPluginConfig::gen_ai_attributes`]).
    pub gen_ai_attributes: bool,
    /// Honour the endpoint picker's headers ([`RawPluginConfig::endpoint_picker`]).
    pub endpoint_picker: bool,
}

/// Failure to load the plugin configuration.
#[derive(Debug, thiserror::Error)]
pub enum PluginConfigError {
    /// Not JSON of the expected shape (unknown keys are named here).
    #[error("plugin configuration syntax: {0}")]
    Syntax(#[from] serde_json::Error),
    /// Well-formed but invalid; inline config problems have paths under `config.`.
    #[error(transparent)]
    Invalid(#[from] ConfigError),
}

impl PluginConfig {
    fn new(
        config: Option<Config>,
        cluster_header: String,
        max_body_bytes: usize,
        sidecar: Option<SidecarSettings>,
        (host_failover, metrics_key_label, gen_ai_attributes, endpoint_picker): (bool, bool, bool, bool),
    ) -> Self {
        Self {
            config,
            cluster_header,
            max_body_bytes,
            sidecar,
            host_failover,
            metrics_key_label,
            gen_ai_attributes,
            endpoint_picker,
        }
    }

    /// Parses and validates the plugin configuration bytes.
    pub fn from_json_slice(json: &[u8]) -> Result<Self, PluginConfigError> {
        let raw: RawPluginConfig = serde_json::from_slice(json)?;
        Ok(Self::try_from(raw)?)
    }
}

impl TryFrom<RawPluginConfig> for PluginConfig {
    type Error = ConfigError;

    fn try_from(raw: RawPluginConfig) -> Result<Self, ConfigError> {
        let mut problems = Vec::new();
        let mut add = |path: &str, message: String| problems.push(Problem { path: path.into(), message });
        let cluster_header = raw.cluster_header.unwrap_or_else(|| DEFAULT_CLUSTER_HEADER.into());
        if let Err(e) = check_header_name(&cluster_header) {
            add("cluster_header", e);
        }
        let max = raw.max_body_bytes.unwrap_or(DEFAULT_MAX_BODY_BYTES as u64);
        let max_body_bytes = usize::try_from(max).ok().filter(|&m| m > 0 && max <= u64::from(u32::MAX));
        if max_body_bytes.is_none() {
            add("max_body_bytes", format!("{max} is not between 1 and {}", u32::MAX));
        }
        if raw.config.is_none() && raw.sidecar_cluster.is_none() {
            add("config", "needs an inline config or a sidecar_cluster".into());
        }
        if raw.poll_interval_ms == Some(0) {
            add("poll_interval_ms", "must be at least 1".into());
        }
        if let Some(age) = raw.targets_max_age_ms.filter(|&age| age < MIN_TARGETS_MAX_AGE_MS) {
            add("targets_max_age_ms", format!("{age} is below {MIN_TARGETS_MAX_AGE_MS} (twice the feed's 1 s poll)"));
        }
        if raw.sidecar_cluster.is_none() {
            for (field, set) in [
                ("sidecar_authority", raw.sidecar_authority.is_some()),
                ("poll_interval_ms", raw.poll_interval_ms.is_some()),
                ("targets_max_age_ms", raw.targets_max_age_ms.is_some()),
                ("internal_token", raw.internal_token.is_some()),
            ] {
                if set {
                    add(field, "only meaningful with sidecar_cluster".into());
                }
            }
        }
        let config = match raw.config.map(Config::try_from).transpose() {
            Ok(config) => config,
            Err(e) => {
                let nested = e.problems.into_iter().map(|p| Problem { path: format!("config.{}", p.path), ..p });
                problems.extend(nested);
                None
            }
        };
        let sidecar = raw.sidecar_cluster.map(|cluster| SidecarSettings {
            authority: raw.sidecar_authority.unwrap_or_else(|| cluster.clone()),
            cluster,
            poll_interval_ms: raw.poll_interval_ms.unwrap_or(DEFAULT_POLL_INTERVAL_MS),
            targets_max_age_ms: raw.targets_max_age_ms.unwrap_or(DEFAULT_TARGETS_MAX_AGE_MS),
            internal_token: raw.internal_token,
        });
        match (problems.is_empty(), max_body_bytes) {
            (true, Some(max_body_bytes)) => {
                let host_failover = raw.host_failover.unwrap_or(false);
                let metrics_key_label = raw.metrics_key_label.unwrap_or(false);
                let gen_ai_attributes = raw.gen_ai_attributes.unwrap_or(false);
                let endpoint_picker = raw.endpoint_picker.unwrap_or(false);
                let switches = (host_failover, metrics_key_label, gen_ai_attributes, endpoint_picker);
                Ok(PluginConfig::new(config, cluster_header, max_body_bytes, sidecar, switches))
            }
            _ => Err(ConfigError { problems }),
        }
    }
}

/// A header name the filter may set: lower-case token characters, not a pseudo-header.
fn check_header_name(name: &str) -> Result<(), String> {
    let ok = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_' | b'.');
    if !name.is_empty() && name.bytes().all(ok) {
        Ok(())
    } else {
        Err(format!("{name:?} is not a lower-case header name"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults() {
        let p = PluginConfig::from_json_slice(br#"{"config":{}}"#).unwrap();
        assert_eq!(p.cluster_header, "x-ferrogate-cluster");
        assert_eq!(p.max_body_bytes, 16_777_216);
        assert!(p.sidecar.is_none());
        assert!(p.config.is_some());
    }

    #[test]
    fn sidecar_fields_are_kept() {
        let json = br#"{"sidecar_cluster":"fg","poll_interval_ms":250,"internal_token":"t","max_body_bytes":10,"cluster_header":"x-c"}"#;
        let p = PluginConfig::from_json_slice(json).unwrap();
        let s = p.sidecar.unwrap();
        assert_eq!((s.cluster.as_str(), s.authority.as_str(), s.poll_interval_ms), ("fg", "fg", 250));
        assert_eq!(s.internal_token.as_deref(), Some("t"));
        assert_eq!(s.targets_max_age_ms, DEFAULT_TARGETS_MAX_AGE_MS);
        assert_eq!((p.max_body_bytes, p.cluster_header.as_str()), (10, "x-c"));
        assert!(p.config.is_none());
    }

    #[test]
    fn the_targets_age_bound_is_a_sidecar_setting_of_two_seconds_or_more() {
        let p = PluginConfig::from_json_slice(br#"{"sidecar_cluster":"fg","targets_max_age_ms":2000}"#).unwrap();
        assert_eq!(p.sidecar.map(|s| s.targets_max_age_ms), Some(2_000));
        let problems = |json: &[u8]| match PluginConfig::from_json_slice(json) {
            Err(PluginConfigError::Invalid(e)) => e.problems.into_iter().map(|p| (p.path, p.message)).collect(),
            other => panic!("expected Invalid, got {other:?}"),
        };
        let short: Vec<(String, String)> = problems(br#"{"sidecar_cluster":"fg","targets_max_age_ms":1999}"#);
        assert_eq!(short[0].0, "targets_max_age_ms");
        assert!(short[0].1.contains("below 2000"), "{short:?}");
        let alone = problems(br#"{"config":{},"targets_max_age_ms":5000}"#);
        assert_eq!(alone, [("targets_max_age_ms".to_string(), "only meaningful with sidecar_cluster".to_string())]);
        let e = PluginConfig::from_json_slice(br#"{"sidecar_cluster":"fg","target_max_age_ms":5000}"#).unwrap_err();
        assert!(e.to_string().contains("unknown field `target_max_age_ms`"), "{e}");
    }

    #[test]
    fn unknown_keys_are_named() {
        let e = PluginConfig::from_json_slice(br#"{"config":{},"clusterHeader":"x"}"#).unwrap_err();
        assert!(e.to_string().contains("unknown field `clusterHeader`"), "{e}");
        let e = PluginConfig::from_json_slice(br#"{"config":{"modles":[]}}"#).unwrap_err();
        assert!(e.to_string().contains("unknown field `modles`"), "{e}");
    }

    #[test]
    fn every_problem_is_reported() {
        let json = br#"{"cluster_header":"X-Bad","max_body_bytes":0,"internal_token":"t",
            "config":{"models":[{"name":"m","targets":[{"provider":"nope","model":"x"}]}]}}"#;
        let Err(PluginConfigError::Invalid(e)) = PluginConfig::from_json_slice(json) else {
            panic!("expected Invalid")
        };
        let paths: Vec<&str> = e.problems.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(
            paths,
            ["cluster_header", "max_body_bytes", "internal_token", "config.models[0].targets[0].provider"]
        );
        assert!(PluginConfig::from_json_slice(b"{}").is_err());
        assert!(PluginConfig::from_json_slice(b"").is_err());
    }
}
