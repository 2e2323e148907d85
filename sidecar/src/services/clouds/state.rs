//! The credentials part of the snapshot state: the sources of the configuration last
//! published and the current credential of each provider. [`Snapshots`] holds one and calls
//! [`State::publishing`] and [`State::expand`] around each publication; the refresher
//! ([`super::start`]) reads [`State::sources`], records what it mints with [`State::set`] and
//! is woken by [`State::wanted`] when a publication names a source with no credential yet.
//!
//! [`Snapshots`]: crate::services::snapshot::Snapshots

use std::sync::{Mutex, MutexGuard, PoisonError};

use ferrogate_core::config::RawConfig;
use tokio::sync::Notify;

use super::{expand, sources, Minted, MintedMap, Source};

/// Sources and credentials (no secret in its `Debug`: [`super::Credential`] redacts).
#[derive(Debug, Default)]
pub struct State {
    inner: Mutex<Inner>,
    wake: Notify,
}

#[derive(Debug, Default)]
struct Inner {
    sources: Vec<(String, Source)>,
    minted: MintedMap,
}

impl State {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records the sources of `raw`, being published: credentials of providers gone or whose
    /// source changed are dropped, and a source with no credential wakes the refresher.
    /// Whether `raw` has any source (then it is kept to publish again).
    pub(crate) fn publishing(&self, raw: &RawConfig) -> bool {
        let wanted = sources(raw);
        let mut inner = self.lock();
        inner.minted.retain(|name, m| wanted.iter().any(|(n, s)| n == name && *s == m.source));
        if wanted.iter().any(|(name, _)| !inner.minted.contains_key(name)) {
            self.wake.notify_one();
        }
        inner.sources = wanted;
        !inner.sources.is_empty()
    }

    /// `raw` with the current credentials filled in ([`super::expand`]).
    pub fn expand(&self, raw: RawConfig) -> RawConfig {
        expand(raw, &self.lock().minted)
    }

    /// The providers with a credential source in the configuration last published.
    pub fn sources(&self) -> Vec<(String, Source)> {
        self.lock().sources.clone()
    }

    /// Records provider `name`'s new credential; whether it changed what is served (then
    /// [`crate::services::snapshot::Snapshots::republish`]). A credential of a source the
    /// configuration no longer has (it changed while the credential was minted) is dropped.
    pub fn set(&self, name: &str, minted: Minted) -> bool {
        let mut inner = self.lock();
        if !inner.sources.iter().any(|(n, s)| n == name && *s == minted.source) {
            return false;
        }
        inner.minted.insert(name.to_string(), minted.clone()) != Some(minted)
    }

    /// Provider `name`'s current credential.
    pub fn get(&self, name: &str) -> Option<Minted> {
        self.lock().minted.get(name).cloned()
    }

    /// Drops the credentials that ended by Unix time `now`; whether any did.
    pub fn drop_expired(&self, now: u64) -> bool {
        let mut inner = self.lock();
        let before = inner.minted.len();
        inner.minted.retain(|_, m| m.expires_at.is_none_or(|end| end > now));
        inner.minted.len() != before
    }

    /// When the first current credential ends (Unix seconds).
    pub fn next_expiry(&self) -> Option<u64> {
        self.lock().minted.values().filter_map(|m| m.expires_at).min()
    }

    /// Resolves when a publication names a source with no credential yet.
    pub async fn wanted(&self) {
        self.wake.notified().await;
    }
}
