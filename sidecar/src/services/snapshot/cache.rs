//! The last-known-good snapshot on disk (`--snapshot-cache`), with no provider key in clear.
//!
//! The file is the served snapshot with each provider's `api_key` either sealed under
//! `FERROGATE_MASTER_KEY` (as the Postgres store seals it: `fgs1:...`, bound to the provider's
//! name) or, without a master key, left out: a provider that names `api_key_env` gets its key
//! from the environment again when the cache is read. MCP servers' credentials are always left
//! out, and A2A agents': read from `api_key_env` again, or fetched again for OAuth servers. It is written as the snapshot file is
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
