//! Shared fixtures for unit tests.

use crate::config::{Config, RawConfig};

/// Loads `testdata/config/{name}` (YAML) into a validated [`Config`].
pub(crate) fn fixture(name: &str) -> Config {
    let path = format!("{}/../../testdata/config/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let raw: RawConfig = serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    Config::try_from(raw).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// `testdata/config/keys.yaml`: keys alice(0) bob(1) carol(2) dave(3) erin(4) frank(5).
pub(crate) fn keys_config() -> Config {
    fixture("keys.yaml")
}

/// 2030-01-01T00:00:00Z, carol's expiry.
pub(crate) const CAROL_EXPIRES: i64 = 1_893_456_000;
