//! Loading the gateway configuration for `ferrogate serve`.
//!
//! The file (YAML, or JSON which YAML parsers read too) is parsed into the core's raw
//! types, provider keys are filled in from the environment, and the result is validated once
//! here so a broken file fails at start with every problem listed. The filter receives the
//! same document as JSON in its plugin configuration, exactly as an Envoy deployment would
//! pass it, and the router gets one cluster per provider.

pub mod shape;

use std::path::Path;

use ferrogate_core::config::{Config, ConfigError, RawConfig};

use super::cluster::{Cluster, ClusterError};

/// The routing header the filter sets; Envoy configs use it as the route's `cluster_header`.
pub const CLUSTER_HEADER: &str = "x-ferrogate-cluster";

/// Why a configuration file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file cannot be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Not a YAML/JSON document at all.
    #[error("{path}: {message}")]
    Syntax {
        /// The file.
        path: String,
        /// Parser message, with line and column.
        message: String,
    },
    /// Unknown keys, values of the wrong type or failed checks; every problem is listed.
    #[error("{path}: {source}")]
    Invalid {
        /// The file.
        path: String,
        /// All problems.
        source: ConfigError,
    },
    /// Providers that cannot become clusters.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
}

/// A configuration ready for the gateway.
pub struct Loaded {
    /// Validated config.
    pub config: Config,
    /// The document as parsed, provider keys resolved (what the filter receives).
    pub raw: RawConfig,
    /// One cluster per provider.
    pub clusters: Vec<Cluster>,
}

/// How the filter reaches the sidecar services.
pub struct SidecarLink {
    /// Cluster name of the sidecar listener.
    pub cluster: String,
    /// `:authority` for calls to it.
    pub authority: String,
    /// Bearer token the sidecar expects.
    pub token: String,
    /// How often the filter polls for a new snapshot.
    pub poll_interval_ms: u64,
}

/// Reads and validates `path`, resolving provider keys from the environment. Every problem
/// is reported at once: unknown keys and other shape errors first, then the checks of the
/// document without its unknown keys.
pub fn load(path: &Path) -> Result<Loaded, LoadError> {
    let shown = path.display().to_string();
    let (raw, mut problems) = read_document(path)?;
    let Some(raw) = raw else {
        return Err(LoadError::Invalid { path: shown, source: ConfigError { problems } });
    };
    match Config::try_from(raw.clone()) {
        Ok(config) if problems.is_empty() => {
            let clusters = clusters_of(&config)?;
            Ok(Loaded { config, raw, clusters })
        }
        Ok(_) => Err(LoadError::Invalid { path: shown, source: ConfigError { problems } }),
        Err(invalid) => {
            problems.extend(invalid.problems);
            Err(LoadError::Invalid { path: shown, source: ConfigError { problems } })
        }
    }
}

/// Reads and parses `path`, resolving provider keys from the environment; not validated.
/// A document with unknown keys is refused, every one of them listed.
pub fn read_raw(path: &Path) -> Result<RawConfig, LoadError> {
    match read_document(path)? {
        (Some(raw), problems) if problems.is_empty() => Ok(raw),
        (_, problems) => Err(LoadError::Invalid { path: path.display().to_string(), source: ConfigError { problems } }),
    }
}

/// The document (when its shape is usable) and its shape problems, keys resolved.
fn read_document(path: &Path) -> Result<(Option<RawConfig>, Vec<ferrogate_core::config::Problem>), LoadError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read { path: shown.clone(), source })?;
    let read = shape::read(&text).map_err(|e| LoadError::Syntax { path: shown, message: e.to_string() })?;
    let raw = read.raw.map(|mut raw| {
        raw.resolve_api_keys(|name| std::env::var(name).ok());
        raw
    });
    Ok((raw, read.problems))
}

/// Switches of the filter's plugin configuration that `serve` sets from its flags.
#[derive(Debug, Clone, Copy, Default)]
pub struct FilterOptions {
    /// `serve` retries failed attempts through the filter (`host_failover`).
    pub failover: bool,
    /// Metrics carry the key's name (`metrics_key_label`).
    pub metrics_key_label: bool,
    /// Requests hand their GenAI attributes over for the span (`gen_ai_attributes`).
    pub gen_ai_attributes: bool,
    /// The endpoint picker serves: the filter honours its subset and fallback headers
    /// (`endpoint_picker`).
    pub endpoint_picker: bool,
}

/// The filter's plugin configuration (JSON), exactly what an Envoy deployment would put in
/// the filter's `configuration` string.
/// Options are written only when on, so filters that predate them accept the configuration.
pub fn plugin_configuration(
    raw: &RawConfig,
    max_body_bytes: usize,
    sidecar: Option<&SidecarLink>,
    options: FilterOptions,
) -> String {
    let mut doc = serde_json::json!({
        "config": raw,
        "cluster_header": CLUSTER_HEADER,
        "max_body_bytes": max_body_bytes,
    });
    if let (true, Some(obj)) = (options.failover, doc.as_object_mut()) {
        obj.insert("host_failover".into(), true.into());
    }
    if let (true, Some(obj)) = (options.metrics_key_label, doc.as_object_mut()) {
        obj.insert("metrics_key_label".into(), true.into());
    }
    if let (true, Some(obj)) = (options.gen_ai_attributes, doc.as_object_mut()) {
        obj.insert("gen_ai_attributes".into(), true.into());
    }
    if let (true, Some(obj)) = (options.endpoint_picker, doc.as_object_mut()) {
        obj.insert("endpoint_picker".into(), true.into());
    }
    if let (Some(link), Some(obj)) = (sidecar, doc.as_object_mut()) {
        obj.insert("sidecar_cluster".into(), link.cluster.clone().into());
        obj.insert("sidecar_authority".into(), link.authority.clone().into());
        obj.insert("internal_token".into(), link.token.clone().into());
        obj.insert("poll_interval_ms".into(), link.poll_interval_ms.into());
    }
    doc.to_string()
}

/// One cluster per provider: its pool when it has one, else its base URL's host and port;
/// one per MCP server (`mcp:<name>`), A2A agent (`a2a:<name>`) and guardrail webhook
/// (`guardrail:<policy>:<rule>`), its URL's host and port.
pub fn clusters_of(config: &Config) -> Result<Vec<Cluster>, ClusterError> {
    let mut clusters = Vec::with_capacity(config.providers.len() + config.mcp.items.len());
    for s in &config.mcp.items {
        let endpoint = format!("{}:{}", bracket(&s.url.host), s.url.port);
        clusters.push(Cluster::new(&s.cluster, s.url.scheme.as_str(), vec![endpoint])?);
    }
    for a in &config.a2a.items {
        let endpoint = format!("{}:{}", bracket(&a.url.host), a.url.port);
        clusters.push(Cluster::new(&a.cluster, a.url.scheme.as_str(), vec![endpoint])?);
    }
    // Guardrail webhooks (`guardrail:<policy>:<rule>`), their URL's host and port.
    for check in config.guardrails.policies.items.iter().flat_map(|p| p.input_checks.iter().chain(&p.output_checks)) {
        if let ferrogate_core::config::guardrails::CheckTarget::Webhook { cluster, url } = &check.target {
            let endpoint = format!("{}:{}", bracket(&url.host), url.port);
            clusters.push(Cluster::new(cluster, url.scheme.as_str(), vec![endpoint])?);
        }
    }
    for p in &config.providers {
        let endpoints = if p.endpoints.is_empty() {
            vec![format!("{}:{}", bracket(&p.base_url.host), p.base_url.port)]
        } else {
            p.endpoints.clone()
        };
        clusters.push(Cluster::new(&p.name, p.base_url.scheme.as_str(), endpoints)?);
    }
    Ok(clusters)
}

fn bracket(host: &str) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_string()
    }
}
