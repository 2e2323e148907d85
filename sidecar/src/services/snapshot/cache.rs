//! The last-known-good snapshot on disk (`--snapshot-cache`), with no provider key in clear.
//!
//! The file is the served snapshot with each provider's `api_key` either sealed under
//! `FERROGATE_MASTER_KEY` (as the Postgres store seals it: `fgs1:...`, bound to the provider's
//! name) or, without a master key, left out: a provider that names `api_key_env` gets its key
//! from the environment again when the cache is read. MCP servers' credentials are always left
//! out, and A2A agents': read from `api_key_env` again, or fetched again for OAuth servers.
//! Cloud providers' minted credentials (`aws_keys`, and the `api_key` of a provider with a
//! `credentials` block) are left out too: [`crate::services::clouds`] mints them again at
//! start. A provider's key pool (`api_keys`) is always left out and read from its
//! `api_keys_env` again. It is written as the snapshot file is
//! ([`super::file::write_atomically`]): to a sibling file created with mode 0600, flushed, then
//! renamed over the cache, so a crash never leaves a torn cache and no other local user can
//! read it.

use std::path::Path;

use ferrogate_core::config::cache::Purge;
use ferrogate_core::config::RawConfig;
use ferrogate_core::snapshot::Snapshot;

use super::CacheError;
use crate::services::secrets::{MasterKey, SEALED_PREFIX};

/// The associated data a provider key is sealed with in the cache.
fn aad(provider: &str) -> String {
    format!("snapshot-cache/providers/{provider}/api_key")
}

/// Writes the snapshot `doc` to `path`, keys sealed with `master` or left out.
///
/// # Errors
/// A key cannot be sealed, or the file cannot be written.
pub(super) fn write(path: &Path, doc: &Snapshot, master: Option<&MasterKey>) -> Result<(), CacheError> {
    let mut doc = doc.clone();
    for provider in &mut doc.config.providers {
        // Minted credentials are short-lived and minted again at start: never kept on disk.
        provider.aws_keys = None;
        provider.api_keys = Vec::new();
        if ferrogate_core::config::cloud::signs_in(provider) {
            provider.api_key = None;
        }
        let Some(key) = provider.api_key.take() else { continue };
        provider.api_key = match master {
            Some(m) => {
                Some(m.seal(key.as_bytes(), &aad(&provider.name)).map_err(|e| CacheError::Format(e.to_string()))?)
            }
            None => None,
        };
    }
    for server in &mut doc.config.mcp_servers {
        server.api_key = None;
    }
    for agent in &mut doc.config.a2a_agents {
        agent.api_key = None;
    }
    let text = serde_json::to_vec(&doc).map_err(|e| CacheError::Format(e.to_string()))?;
    super::file::write_atomically(path, &text)?;
    Ok(())
}

/// Reads the cached configuration back, with the cache purges it was served with: sealed keys
/// opened with `master`, missing ones taken from the variables their providers name (`env`
/// looks them up).
///
/// # Errors
/// The file cannot be read or is not a snapshot; a sealed key cannot be opened (no master
/// key, or another one).
pub(super) fn read(
    path: &Path,
    master: Option<&MasterKey>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<(RawConfig, Vec<Purge>), CacheError> {
    let body = std::fs::read(path)?;
    let doc: Snapshot = serde_json::from_slice(&body).map_err(|e| CacheError::Format(e.to_string()))?;
    let mut config = doc.config;
    for provider in &mut config.providers {
        provider.api_keys = provider.api_keys_env.iter().filter_map(|var| env(var)).collect();
        match provider.api_key.take() {
            Some(sealed) if sealed.starts_with(SEALED_PREFIX) => {
                let master = master.ok_or_else(|| {
                    CacheError::Format(format!(
                        "provider {}: its key is sealed and FERROGATE_MASTER_KEY is not set",
                        provider.name
                    ))
                })?;
                let key = master
                    .open(&sealed, &aad(&provider.name))
                    .map_err(|e| CacheError::Format(format!("provider {}: {e}", provider.name)))?;
                provider.api_key = Some(String::from_utf8_lossy(&key).into_owned());
            }
            // A key in clear (a cache written before keys were sealed) is used as it is.
            Some(plain) => provider.api_key = Some(plain),
            None => provider.api_key = provider.api_key_env.as_deref().and_then(&env),
        }
    }
    for server in &mut config.mcp_servers {
        server.api_key = server.api_key_env.as_deref().and_then(&env);
    }
    for agent in &mut config.a2a_agents {
        agent.api_key = agent.api_key_env.as_deref().and_then(&env);
    }
    Ok((config, doc.cache_purges))
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;
    use ferrogate_core::config::cloud::RawAwsKeys;

    use super::*;

    const CONFIG: &str = r#"
providers:
  - { name: claude, kind: bedrock, region: us-east-1, credentials: { source: aws_web_identity } }
  - { name: gemini, kind: vertex, project: my-project-1, region: us-central1, credentials: { source: gcp_metadata } }
  - { name: openai, kind: openai, base_url: "https://api.openai.com", api_key_env: OPENAI_KEY }
  - { name: pool, kind: openai, base_url: "https://api.openai.com", api_keys_env: [K1, K2] }
models: []
"#;

    /// A served snapshot whose cloud providers hold minted credentials.
    fn served() -> Snapshot {
        let mut config: RawConfig = serde_saphyr::from_str(CONFIG).unwrap();
        config.providers[0].aws_keys = Some(Box::new(RawAwsKeys {
            access_key_id: "ASIAMINTEDKEYID".into(),
            secret_access_key: "minted-secret-access-key".into(),
            session_token: Some("minted-session-token".into()),
            expires_at: Some(4_000_000_000),
        }));
        config.providers[1].api_key = Some("ya29.minted-google-token".into());
        config.providers[2].api_key = Some("sk-static-key".into());
        config.providers[3].api_keys = vec!["sk-pool-one".into(), "sk-pool-two".into()];
        Snapshot { version: "v1".into(), config, problems: Vec::new(), cache_purges: Vec::new() }
    }

    #[test]
    fn minted_cloud_credentials_and_key_pools_never_reach_the_cache() {
        let dir =
            std::env::temp_dir().join(format!("fg-cache-clouds-{}-{}", std::process::id(), rand::random::<u64>()));
        std::fs::create_dir_all(&dir).unwrap();
        let master = MasterKey::from_base64(&base64::engine::general_purpose::STANDARD.encode([7u8; 32])).unwrap();
        for master in [None, Some(&master)] {
            let path = dir.join("cache.json");
            write(&path, &served(), master).unwrap();
            let text = std::fs::read_to_string(&path).unwrap();
            for secret in ["minted", "ASIA", "ya29", "sk-static-key", "sk-pool"] {
                assert!(!text.contains(secret), "{secret} in the cache: {text}");
            }
            let env = |name: &str| match name {
                "OPENAI_KEY" => Some("sk-from-env".to_string()),
                "K2" => Some("sk-k2-from-env".to_string()),
                _ => None,
            };
            let (config, _) = read(&path, master, env).unwrap();
            assert!(config.providers[0].aws_keys.is_none());
            assert!(config.providers[0].credentials.is_some(), "the source stays, to be minted again");
            assert!(config.providers[1].api_key.is_none());
            let static_key = if master.is_some() { "sk-static-key" } else { "sk-from-env" };
            assert_eq!(config.providers[2].api_key.as_deref(), Some(static_key), "static keys as before");
            assert_eq!(config.providers[3].api_keys, ["sk-k2-from-env"], "pools are read from their variables again");
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
