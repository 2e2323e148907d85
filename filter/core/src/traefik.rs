//! The Traefik middleware's settings (`http.middlewares.<name>.plugin.ferrogate`), as Traefik
//! hands them to the guest: its dynamic configuration's map encoded by Go's `json.Marshal`.
//!
//! ```yaml
//! settings:                 # camelCase, like Traefik's own options
//!   snapshotFile: /ferrogate/snapshot.json   # kept current by `ferrogate sidecar --snapshot-file`
//!   usageFile: /ferrogate/usage.jsonl        # ingested by `ferrogate sidecar --usage-inbox`
//!   config: { ... }         # or an inline configuration document (snake_case, as the file)
//!   clusterHeader: x-ferrogate-cluster
//!   maxBodyBytes: 16777216
//!   snapshotCheckMs: 1000
//!   followedByBuffering: false
//! ```
//!
//! Values from Traefik's label and KV providers arrive as strings, so numbers and booleans are
//! accepted either way. Unknown keys are refused with their name: a misspelt key would
//! otherwise silently fall back to a default.

use serde::{Deserialize, Deserializer};

use crate::config::{Config, ConfigError, Problem, RawConfig};
use crate::headers::DEFAULT_CLUSTER_HEADER;
use crate::plugin::DEFAULT_MAX_BODY_BYTES;

mod body_fit;

pub use body_fit::{fit_length, FitError};

/// How often the snapshot file's metadata is checked by default.
pub const DEFAULT_SNAPSHOT_CHECK_MS: u64 = 1_000;

/// Every settings key, as written in Traefik's dynamic configuration.
pub const SETTINGS_KEYS: [&str; 7] =
    ["config", "snapshotFile", "usageFile", "clusterHeader", "maxBodyBytes", "snapshotCheckMs", "followedByBuffering"];

/// The settings as Traefik passes them.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawSettings {
    /// Inline configuration document (the YAML file's shape).
    #[serde(default)]
    pub config: Option<RawConfig>,
    /// Path, inside the guest, of the snapshot file the sidecar keeps current.
    #[serde(default)]
    pub snapshot_file: Option<String>,
    /// Path, inside the guest, of the file usage records are appended to.
    #[serde(default)]
    pub usage_file: Option<String>,
    /// Request header naming the provider, which Traefik's internal routers match.
    #[serde(default)]
    pub cluster_header: Option<String>,
    /// Request body limit in bytes.
    #[serde(default, deserialize_with = "lenient_u64")]
    pub max_body_bytes: Option<u64>,
    /// How often the snapshot file is checked for a change, in milliseconds.
    #[serde(default, deserialize_with = "lenient_u64")]
    pub snapshot_check_ms: Option<u64>,
    /// A Traefik `buffering` middleware follows this one on the router, so a rewritten
    /// request body may change its length (see [`fit_length`]).
    #[serde(default, deserialize_with = "lenient_bool")]
    pub followed_by_buffering: Option<bool>,
}

/// Validated settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The inline configuration, when given.
    pub config: Option<Config>,
    /// See [`RawSettings::snapshot_file`].
    pub snapshot_file: Option<String>,
    /// See [`RawSettings::usage_file`].
    pub usage_file: Option<String>,
    /// Lower-case routing header name.
    pub cluster_header: String,
    /// Request body limit in bytes.
    pub max_body_bytes: usize,
    /// Snapshot file check interval in milliseconds.
    pub snapshot_check_ms: u64,
    /// See [`RawSettings::followed_by_buffering`].
    pub followed_by_buffering: bool,
}

/// Why the settings cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// Not a JSON object of the expected shape (an unknown key is named).
    #[error("middleware settings: {0}")]
    Syntax(#[from] serde_json::Error),
    /// Well-formed but invalid (inline configuration problems have paths under `config.`).
    #[error(transparent)]
    Invalid(#[from] ConfigError),
}

impl Settings {
    /// Parses and validates the bytes of `get_config` (Traefik sends `null` when the
    /// middleware has no settings, which is refused: there is nothing to serve).
    pub fn from_json_slice(json: &[u8]) -> Result<Settings, SettingsError> {
        let raw: Option<RawSettings> = serde_json::from_slice(json)?;
        Ok(Settings::try_from(raw.unwrap_or_default())?)
    }
}

impl TryFrom<RawSettings> for Settings {
    type Error = ConfigError;

    fn try_from(raw: RawSettings) -> Result<Settings, ConfigError> {
        let mut problems = Vec::new();
        let mut add = |path: &str, message: String| problems.push(Problem { path: path.into(), message });
        let cluster_header = raw.cluster_header.unwrap_or_else(|| DEFAULT_CLUSTER_HEADER.into()).to_ascii_lowercase();
        if cluster_header.is_empty() || !cluster_header.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
            add("clusterHeader", format!("{cluster_header:?} is not a header name"));
        }
        let max = raw.max_body_bytes.unwrap_or(DEFAULT_MAX_BODY_BYTES as u64);
        let max_body_bytes = usize::try_from(max).ok().filter(|&m| m > 0 && max <= u64::from(u32::MAX));
        if max_body_bytes.is_none() {
            add("maxBodyBytes", format!("{max} is not between 1 and {}", u32::MAX));
        }
        let snapshot_check_ms = raw.snapshot_check_ms.unwrap_or(DEFAULT_SNAPSHOT_CHECK_MS);
        if snapshot_check_ms == 0 {
            add("snapshotCheckMs", "must be at least 1".into());
        }
        if raw.config.is_none() && raw.snapshot_file.is_none() {
            add("config", "needs an inline config or a snapshotFile".into());
        }
        for (key, path) in [("snapshotFile", &raw.snapshot_file), ("usageFile", &raw.usage_file)] {
            if path.as_deref().is_some_and(|p| !p.starts_with('/')) {
                add(key, "must be an absolute path inside the plugin's mounts".into());
            }
        }
        let config = match raw.config.map(Config::try_from).transpose() {
            Ok(config) => config,
            Err(e) => {
                problems.extend(e.problems.into_iter().map(|p| Problem { path: format!("config.{}", p.path), ..p }));
                None
            }
        };
        match max_body_bytes.filter(|_| problems.is_empty()) {
            Some(max_body_bytes) => Ok(Settings {
                config,
                snapshot_file: raw.snapshot_file,
                usage_file: raw.usage_file,
                cluster_header,
                max_body_bytes,
                snapshot_check_ms,
                followed_by_buffering: raw.followed_by_buffering.unwrap_or(false),
            }),
            None => Err(ConfigError { problems }),
        }
    }
}

/// A number, or a string holding one (Traefik's label and KV providers send strings).
#[derive(Deserialize)]
#[serde(untagged)]
enum NumberOrText {
    Number(u64),
    Text(String),
}

fn lenient_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    match Option::<NumberOrText>::deserialize(d)? {
        None => Ok(None),
        Some(NumberOrText::Number(n)) => Ok(Some(n)),
        Some(NumberOrText::Text(t)) => t
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| serde::de::Error::custom(format!("{t:?} is not a non-negative integer"))),
    }
}

/// A boolean, or a string holding one.
#[derive(Deserialize)]
#[serde(untagged)]
enum BoolOrText {
    Bool(bool),
    Text(String),
}

fn lenient_bool<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    match Option::<BoolOrText>::deserialize(d)? {
        None => Ok(None),
        Some(BoolOrText::Bool(b)) => Ok(Some(b)),
        Some(BoolOrText::Text(t)) => match t.trim() {
            "true" => Ok(Some(true)),
            "false" => Ok(Some(false)),
            _ => Err(serde::de::Error::custom(format!("{t:?} is not true or false"))),
        },
    }
}

#[cfg(test)]
mod tests;
