//! The configuration snapshot the sidecar serves to filters (`GET /v1/snapshot`).
//!
//! Built once per configuration change, never per request: the sidecar turns its store's rows
//! into a [`RawConfig`] (provider secrets resolved), prunes what cannot be served
//! ([`build`]) and sends the result as one JSON document. The filter validates it into a
//! [`Config`] once per version and shares it with every worker VM.
//!
//! Per-row resilience: a row that is unservable on its own (a model naming a missing
//! provider, a key with an unknown group, a duplicate name...) is dropped and reported in
//! `problems`, and everything else keeps serving. A problem that is not about one row (the
//! `store` or `redis` settings) fails the whole build, and the last good snapshot stays.

use serde::{Deserialize, Serialize};

use crate::config::cache::Purge;
use crate::config::{Config, ConfigError, Problem, RawConfig};

mod prune;

/// The wire document of `GET /v1/snapshot`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Snapshot {
    /// Opaque version; the response's `ETag` is this value quoted.
    pub version: String,
    /// The servable configuration (provider keys included: the endpoint is token-guarded).
    pub config: RawConfig,
    /// Rows dropped from the store's configuration, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<WireProblem>,
    /// Response-cache purges recorded by the sidecar, oldest first (into
    /// `config.cache.purges` on receipt). Absent when there are none, so filters older than
    /// the field keep taking snapshots until a purge is made.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cache_purges: Vec<Purge>,
}

/// A problem as sent to filters and shown by the admin API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireProblem {
    /// Path into the store's document, e.g. `models[1].targets[0].provider`.
    pub path: String,
    /// What is wrong, and that the row was dropped.
    pub message: String,
}

impl From<&Problem> for WireProblem {
    fn from(p: &Problem) -> Self {
        WireProblem { path: p.path.clone(), message: p.message.clone() }
    }
}

/// A servable configuration and what was dropped to get it.
#[derive(Debug)]
pub struct Built {
    /// The validated configuration.
    pub config: Config,
    /// The document it was validated from (what the snapshot carries).
    pub raw: RawConfig,
    /// Dropped rows, with paths into the original document.
    pub problems: Vec<Problem>,
}

/// Validates `raw`, dropping rows that cannot be served alone.
///
/// # Errors
/// The problems that are not about a single row (nothing was dropped for those).
pub fn build(raw: RawConfig) -> Result<Built, ConfigError> {
    prune::build(raw)
}

/// A stable version string for a snapshot's content (FNV-1a over the canonical JSON, hex):
/// two sidecars serving the same configuration give the same ETag, and a restart does not
/// make every filter refetch.
pub fn content_version(config_json: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in config_json {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// The version of a snapshot whose configuration serializes to `config_json` and that carries
/// `purges`: [`content_version`] of the configuration alone when there are none (the version
/// a sidecar without purges gives), else of the configuration followed by the purges, so a new
/// purge is a new version that filters fetch.
pub fn version_with_purges(config_json: &[u8], purges: &[Purge]) -> String {
    if purges.is_empty() {
        return content_version(config_json);
    }
    let mut all = config_json.to_vec();
    all.push(b'\n');
    all.extend_from_slice(&serde_json::to_vec(purges).unwrap_or_default());
    content_version(&all)
}

/// A content version as a number for a metric gauge: its first 32 bits (8 hex digits), the
/// same in the filter's `ferrogate_snapshot_version` and the sidecar's
/// `ferrogate_snapshot_served_version`; `None` for a version that is not hex.
pub fn version_number(version: &str) -> Option<u64> {
    version.get(..8).and_then(|h| u64::from_str_radix(h, 16).ok())
}

impl Snapshot {
    /// Parses and validates a snapshot body as the filter receives it.
    ///
    /// # Errors
    /// A body that is not a snapshot, or a configuration that does not validate (the sidecar
    /// prunes before sending, so this means version skew or corruption).
    pub fn parse(body: &[u8]) -> Result<(Snapshot, Config), SnapshotError> {
        let snapshot: Snapshot = serde_json::from_slice(body)?;
        let mut config = Config::try_from(snapshot.config.clone())?;
        config.cache.purges.clone_from(&snapshot.cache_purges);
        Ok((snapshot, config))
    }

    /// Like [`Snapshot::parse`], but the raw document is consumed by validation instead of
    /// kept: what the filter does on every swap, where a copy of a large document would cost
    /// a fifth of the swap.
    ///
    /// # Errors
    /// As [`Snapshot::parse`].
    pub fn receive(body: &[u8]) -> Result<Received, SnapshotError> {
        let Snapshot { version, config, problems, cache_purges } = serde_json::from_slice(body)?;
        let mut config = Config::try_from(config)?;
        config.cache.purges = cache_purges;
        Ok(Received { version, problems, config })
    }
}

/// A snapshot as the filter keeps it: its version, its problems and the validated
/// configuration.
#[derive(Debug)]
pub struct Received {
    /// The snapshot's version.
    pub version: String,
    /// Rows the sidecar dropped, and why.
    pub problems: Vec<WireProblem>,
    /// The validated configuration (the snapshot's cache purges in `config.cache.purges`).
    pub config: Config,
}

/// Why a snapshot body was refused.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// Not a snapshot document.
    #[error("snapshot syntax: {0}")]
    Syntax(#[from] serde_json::Error),
    /// A configuration the filter cannot serve.
    #[error("snapshot configuration: {0}")]
    Invalid(#[from] ConfigError),
}

#[cfg(test)]
mod tests;
