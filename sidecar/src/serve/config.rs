//! Loading the gateway configuration for `ferrogate serve`.
//!
//! The file (YAML, or JSON which YAML parsers read too) is parsed into the core's raw
//! types, provider keys are filled in from the environment, and the result is validated once
//! here so a broken file fails at start with every problem listed. The filter receives the
//! same document as JSON in its plugin configuration, exactly as an Envoy deployment would
//! pass it, and the router gets one cluster per provider.

use std::path::Path;

use ferrogate_core::config::{Config, ConfigError, RawConfig};

use super::cluster::{Cluster, ClusterError, Clusters};

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
    /// Not YAML/JSON of the configuration's shape (unknown keys included).
    #[error("{path}: {message}")]
    Syntax {
        /// The file.
        path: String,
        /// Parser message, naming the offending key and position.
        message: String,
    },
    /// Well-formed but invalid; every problem is listed.
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
    /// The filter's plugin configuration (JSON).
    pub plugin_configuration: String,
    /// One cluster per provider.
    pub clusters: Clusters,
    /// Routing header name.
    pub cluster_header: String,
}

/// Reads and validates `path`, resolving provider keys from the environment.
pub fn load(path: &Path, max_body_bytes: usize) -> Result<Loaded, LoadError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read { path: shown.clone(), source })?;
    let mut raw: RawConfig =
        serde_yaml::from_str(&text).map_err(|e| LoadError::Syntax { path: shown.clone(), message: e.to_string() })?;
    raw.resolve_api_keys(|name| std::env::var(name).ok());
    let config = Config::try_from(raw.clone()).map_err(|source| LoadError::Invalid { path: shown, source })?;
    let clusters = clusters_of(&config)?;
    let plugin_configuration = serde_json::json!({
        "config": raw,
        "cluster_header": CLUSTER_HEADER,
        "max_body_bytes": max_body_bytes,
    })
    .to_string();
    Ok(Loaded { config, plugin_configuration, clusters, cluster_header: CLUSTER_HEADER.to_string() })
}

/// One cluster per provider: its pool when it has one, else its base URL's host and port.
pub fn clusters_of(config: &Config) -> Result<Clusters, ClusterError> {
    let mut clusters = Vec::with_capacity(config.providers.len());
    for p in &config.providers {
        let endpoints = if p.endpoints.is_empty() {
            vec![format!("{}:{}", bracket(&p.base_url.host), p.base_url.port)]
        } else {
            p.endpoints.clone()
        };
        clusters.push(Cluster::new(&p.name, p.base_url.scheme.as_str(), endpoints)?);
    }
    Clusters::new(clusters)
}

fn bracket(host: &str) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_string()
    }
}
