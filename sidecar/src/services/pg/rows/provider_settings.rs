//! The `settings` column of `fg_providers`: what a provider has beyond its address, key and KV
//! pool — an `openai_compatible` preset, a cloud's region, project, API version and credential
//! source, a key pool's variables and cooldown — as one JSON object. No key is ever in it.

use ferrogate_core::config::cloud::RawCredentials;
use ferrogate_core::config::RawProvider;
use serde::{Deserialize, Serialize};

/// The column's shape.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(default)]
struct Settings {
    #[serde(skip_serializing_if = "Option::is_none")]
    preset: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    region: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    project: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    api_version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    credentials: Option<Box<RawCredentials>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    api_keys_env: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    key_cooldown_secs: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    endpoints_inference_pool: Option<String>,
}

/// The column's value for `p` (`None` when it has none of these settings).
pub(super) fn column(p: &RawProvider) -> Option<serde_json::Value> {
    let s = Settings {
        preset: p.preset.clone(),
        region: p.region.clone(),
        project: p.project.clone(),
        api_version: p.api_version.clone(),
        credentials: p.credentials.clone(),
        api_keys_env: p.api_keys_env.clone(),
        key_cooldown_secs: p.key_cooldown_secs,
        endpoints_inference_pool: p.endpoints_inference_pool.clone(),
    };
    let value = serde_json::to_value(s).ok()?;
    value.as_object().is_some_and(|m| !m.is_empty()).then_some(value)
}

/// `provider` with the settings of its column.
pub(super) fn apply(mut provider: RawProvider, column: Option<serde_json::Value>) -> RawProvider {
    let Some(s) = column.and_then(|v| serde_json::from_value::<Settings>(v).ok()) else { return provider };
    provider.preset = s.preset;
    provider.region = s.region;
    provider.project = s.project;
    provider.api_version = s.api_version;
    provider.credentials = s.credentials;
    provider.api_keys_env = s.api_keys_env;
    provider.key_cooldown_secs = s.key_cooldown_secs;
    provider.endpoints_inference_pool = s.endpoints_inference_pool;
    provider
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_round_trip_and_carry_no_key() {
        let yaml = r#"
name: b
kind: bedrock
region: us-east-1
credentials: { source: aws_web_identity, role_arn: "arn:aws:iam::1:role/x" }
api_keys_env: [K1, K2]
key_cooldown_secs: 30
endpoints_inference_pool: llm/vllm-pool
api_keys: [sk-secret-1]
aws_keys: { access_key_id: AKID, secret_access_key: SECRET }
"#;
        let p: RawProvider = serde_saphyr::from_str(yaml).unwrap();
        let col = column(&p).unwrap();
        let text = col.to_string();
        assert!(!text.contains("sk-secret") && !text.contains("SECRET"), "{text}");
        let back = apply(RawProvider { name: "b".into(), kind: "bedrock".into(), ..RawProvider::default() }, Some(col));
        assert_eq!(back.region.as_deref(), Some("us-east-1"));
        assert_eq!(back.endpoints_inference_pool.as_deref(), Some("llm/vllm-pool"));
        assert_eq!(back.credentials, p.credentials);
        assert_eq!((back.api_keys_env, back.key_cooldown_secs), (vec!["K1".to_string(), "K2".to_string()], Some(30)));
        assert!(column(&RawProvider::default()).is_none());
    }
}
