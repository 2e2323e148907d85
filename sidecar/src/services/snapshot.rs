//! Snapshot publication: the configuration the filters serve, built once per change.
//!
//! A store hands in a [`RawConfig`]; [`Snapshots::publish`] prunes unservable rows
//! ([`ferrogate_core::snapshot::build`]), serializes the snapshot once, and makes it the
//! answer of `GET /v1/snapshot` (with `ETag`; `If-None-Match` → 304). A build that fails
//! keeps the last good snapshot and records why (`/api/v1/config/problems`).
//!
//! Last known good: with a cache file, every published snapshot is written to it ([`cache`]:
//! atomically, mode 0600, provider keys sealed or left out), and a sidecar whose store is
//! unreachable at start serves the cached one until the store answers.
//!
//! Cache purges: [`Snapshots::add_purge`] records a purge of the response cache (the last
//! [`MAX_PURGES`]; a purge of everything drops the older ones) and publishes the last
//! configuration again with them in `cache_purges`, under a new version, so filters holding
//! entries in their own memory learn of it on their next poll. The cache file keeps them too.
//!
//! Snapshot file: with `--snapshot-file`, [`file`] keeps the served body in a file for a filter
//! that reads its configuration from disk instead of calling the sidecar.

mod cache;
pub mod file;
mod purges;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use ferrogate_core::config::cache::Purge;
use ferrogate_core::config::{Config, ConfigError, RawConfig};
use ferrogate_core::snapshot::{self, Snapshot, WireProblem};
use serde::Serialize;
use tokio::sync::{watch, Notify};

use crate::services::secrets::MasterKey;
use crate::services::{clouds, dns};

/// Purges kept (and sent to filters) at most; older ones are dropped first.
pub const MAX_PURGES: usize = 256;

/// One published snapshot.
#[derive(Debug)]
pub struct Served {
    /// Its version (the ETag without quotes).
    pub version: String,
    /// The serialized [`Snapshot`], sent as is.
    pub body: Bytes,
    /// The validated configuration (for the sidecar's own use: clusters, admin).
    pub config: Config,
    /// The rows that were dropped to build it.
    pub problems: Vec<WireProblem>,
    /// When this version was first published, Unix ms (`ferrogate_snapshot_age_seconds`).
    pub published_unix_ms: u64,
}

/// What `/api/v1/config/problems` shows.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ProblemReport {
    /// Version being served, if any.
    pub version: Option<String>,
    /// Rows dropped from the served snapshot.
    pub dropped: Vec<WireProblem>,
    /// Why the latest build failed (empty when the latest build is the one served).
    pub rejected: Vec<WireProblem>,
}

/// Why a cached snapshot could not be restored.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// The file cannot be read.
    #[error("snapshot cache: {0}")]
    Io(#[from] std::io::Error),
    /// The file is not a snapshot, or a sealed key in it cannot be opened.
    #[error("snapshot cache: {0}")]
    Format(String),
    /// The cached configuration no longer builds.
    #[error("snapshot cache: {0}")]
    Invalid(#[from] ConfigError),
}

/// The current snapshot and the last build failure.
#[derive(Debug)]
pub struct Snapshots {
    current: watch::Sender<Option<Arc<Served>>>,
    rejected: Mutex<Vec<WireProblem>>,
    cache: Option<PathBuf>,
    /// Seals the provider keys written to the cache (`FERROGATE_MASTER_KEY`).
    master: Option<MasterKey>,
    /// `endpoints_dns` state ([`dns`]).
    dns: Mutex<DnsState>,
    /// Asks the resolver for a name with no answer yet.
    dns_wake: Notify,
    /// Asks pool discovery ([`super::kube`]) to follow a pool not followed yet.
    pools_wake: Notify,
    /// OAuth tokens of MCP servers by server name ([`crate::services::mcp_oauth`]), put in
    /// every publication as the servers' `api_key`.
    oauth_tokens: Mutex<std::collections::BTreeMap<String, String>>,
    /// Tells the token fetcher the OAuth servers may have changed.
    oauth_wake: Notify,
    /// Cloud providers' credential sources and minted credentials ([`clouds`]), put in every
    /// publication as their `aws_keys` or `api_key`.
    clouds: clouds::State,
    /// The ticket of the publication being served: publications build outside any lock (a
    /// DNS answer republishes while the store's publication may still be building), so one
    /// that took its configuration before the one served is dropped instead of overwriting it.
    served_ticket: Mutex<u64>,
    /// Response-cache purges, oldest first, sent with every publication.
    purges: Mutex<Vec<Purge>>,
    /// The configuration last given to [`Snapshots::publish`], published again when a purge
    /// is added.
    last_raw: Mutex<Option<RawConfig>>,
    /// Runs once between a publication's build and its serving (tests of that interleaving).
    #[cfg(test)]
    pub(crate) before_serving: Mutex<Option<TestHook>>,
}

/// A callback for [`Snapshots::before_serving`].
#[cfg(test)]
pub(crate) struct TestHook(pub Box<dyn FnOnce() + Send>);

#[cfg(test)]
impl std::fmt::Debug for TestHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TestHook")
    }
}

/// The configuration last published as the store gave it (with its `endpoints_dns` names) and
/// what those names resolved to.
#[derive(Debug, Default)]
struct DnsState {
    raw: Option<RawConfig>,
    answers: dns::Answers,
    /// Tickets handed to publications, in the order they took their configuration.
    tickets: u64,
}

impl Snapshots {
    /// No snapshot yet; published ones are also written to `cache` when given, provider keys
    /// sealed under `FERROGATE_MASTER_KEY` when it is set (else left out of the file).
    pub fn new(cache: Option<PathBuf>) -> Snapshots {
        let master = match (&cache, MasterKey::from_env()) {
            (None, _) => None,
            (Some(_), Ok(master)) => master,
            (Some(_), Err(e)) => {
                tracing::warn!("{e}: provider keys are left out of the snapshot cache");
                None
            }
        };
        Snapshots::with_master(cache, master)
    }

    /// [`Snapshots::new`] with the master key given.
    pub fn with_master(cache: Option<PathBuf>, master: Option<MasterKey>) -> Snapshots {
        Snapshots {
            current: watch::channel(None).0,
            rejected: Mutex::new(Vec::new()),
            cache,
            master,
            dns: Mutex::default(),
            dns_wake: Notify::new(),
            pools_wake: Notify::new(),
            oauth_tokens: Mutex::default(),
            oauth_wake: Notify::new(),
            clouds: clouds::State::default(),
            served_ticket: Mutex::new(0),
            purges: Mutex::default(),
            last_raw: Mutex::default(),
            #[cfg(test)]
            before_serving: Mutex::new(None),
        }
    }

    /// The snapshot being served.
    pub fn current(&self) -> Option<Arc<Served>> {
        self.current.borrow().clone()
    }

    /// Notified on every publication.
    pub fn subscribe(&self) -> watch::Receiver<Option<Arc<Served>>> {
        self.current.subscribe()
    }

    /// Builds and serves `raw`; on failure the previous snapshot stays.
    ///
    /// # Errors
    /// The problems that fail the whole build (they are also kept for the problems report).
    pub fn publish(&self, raw: RawConfig) -> Result<Arc<Served>, ConfigError> {
        *lock(&self.last_raw) = Some(raw.clone());
        let (raw, ticket) = self.with_dns_endpoints(raw);
        // Read after the ticket is taken: a purge added later publishes under a later ticket.
        let cache_purges = lock(&self.purges).clone();
        let built = match snapshot::build(raw) {
            Ok(built) => built,
            Err(e) => {
                *self.lock_rejected() = e.problems.iter().map(WireProblem::from).collect();
                return Err(e);
            }
        };
        let mut built = built;
        // `responses:` is the sidecar's alone (read from the file at start): filters are not
        // sent it, so a filter older than the block still takes the snapshot.
        built.raw.responses = None;
        let config_json = serde_json::to_vec(&built.raw).unwrap_or_default();
        let problems: Vec<WireProblem> = built.problems.iter().map(WireProblem::from).collect();
        let version = snapshot::version_with_purges(&config_json, &cache_purges);
        built.config.cache.purges.clone_from(&cache_purges);
        let doc = Snapshot { version, config: built.raw, problems, cache_purges };
        let body = Bytes::from(serde_json::to_vec(&doc).unwrap_or_default());
        // Publishing the same content again (a DNS answer that did not change it) keeps its age.
        let previous = self.current().filter(|c| c.version == doc.version).map(|c| c.published_unix_ms);
        let published_unix_ms = previous.unwrap_or_else(crate::services::now_ms);
        let (version, problems, config) = (doc.version.clone(), doc.problems.clone(), built.config);
        let served = Arc::new(Served { version, body, config, problems, published_unix_ms });
        self.lock_rejected().clear();
        #[cfg(test)]
        {
            // Taken first: the hook may publish, which comes back here.
            let hook = self.before_serving.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
            if let Some(hook) = hook {
                (hook.0)();
            }
        }
        self.serve(ticket, served.clone(), &doc);
        Ok(served)
    }

    /// Serves (and caches) a publication unless a later one is served already.
    fn serve(&self, ticket: u64, served: Arc<Served>, doc: &Snapshot) {
        let mut current = self.served_ticket.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if ticket < *current {
            tracing::debug!(version = %served.version, "a later configuration is served already; this one is dropped");
            return;
        }
        *current = ticket;
        self.persist(doc);
        self.replace(served);
    }

    /// `raw` with its `endpoints_dns` names replaced by their last answers, its OAuth MCP
    /// servers' tokens and its cloud providers' credentials filled in, and the publication's
    /// ticket; `raw` itself is kept to publish again when an answer, a token or a credential
    /// changes, and a name not resolved yet wakes the resolver.
    fn with_dns_endpoints(&self, raw: RawConfig) -> (RawConfig, u64) {
        let names = dns::keys(&raw);
        let oauth = raw.mcp_servers.iter().any(|s| s.oauth.is_some());
        let clouds = self.clouds.publishing(&raw);
        let mut state = self.dns.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        state.tickets += 1;
        let ticket = state.tickets;
        state.answers.retain(|name, _| names.contains(name));
        if oauth {
            self.oauth_wake.notify_one();
        }
        if names.is_empty() && !oauth && !clouds {
            state.raw = None;
            return (raw, ticket);
        }
        if dns::names(&raw).iter().any(|name| !state.answers.contains_key(name)) {
            self.dns_wake.notify_one();
        }
        if dns::pool_refs(&raw).iter().any(|r| !state.answers.contains_key(&super::kube::answer_key(r))) {
            self.pools_wake.notify_one();
        }
        let mut expanded = dns::expand(raw.clone(), &state.answers);
        state.raw = Some(raw);
        drop(state);
        let tokens = self.oauth_tokens.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for server in expanded.mcp_servers.iter_mut().filter(|s| s.oauth.is_some()) {
            server.api_key = tokens.get(&server.name).cloned();
        }
        drop(tokens);
        (self.clouds.expand(expanded), ticket)
    }

    /// The cloud credentials' state: the sources of the configuration last published and what
    /// the refresher minted for them.
    pub fn clouds(&self) -> &clouds::State {
        &self.clouds
    }

    /// The OAuth MCP servers of the configuration last published, each with the `resource` its
    /// tokens are asked for (the server's `url` unless set).
    pub fn oauth_wanted(&self) -> Vec<(String, ferrogate_core::config::mcp::RawMcpOauth)> {
        let state = self.dns.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let servers = state.raw.iter().flat_map(|r| r.mcp_servers.iter());
        let with = |s: &ferrogate_core::config::mcp::RawMcpServer| {
            let mut oauth = s.oauth.clone()?;
            oauth.resource.get_or_insert_with(|| s.url.clone());
            Some((s.name.clone(), oauth))
        };
        servers.filter_map(with).collect()
    }

    /// Records server `name`'s new token; whether it changed (then [`Snapshots::republish`]).
    pub fn set_oauth_token(&self, name: &str, token: String) -> bool {
        let mut tokens = self.oauth_tokens.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        tokens.insert(name.to_string(), token.clone()) != Some(token)
    }

    /// Resolves when a publication names OAuth MCP servers (they may have changed).
    pub async fn oauth_changed(&self) {
        self.oauth_wake.notified().await;
    }

    /// The `endpoints_dns` names of the configuration last published.
    pub fn dns_names(&self) -> Vec<String> {
        let state = self.dns.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        state.raw.as_ref().map(dns::names).unwrap_or_default()
    }

    /// The `endpoints_inference_pool` references of the configuration last published.
    pub fn pool_refs(&self) -> Vec<String> {
        let state = self.dns.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        state.raw.as_ref().map(dns::pool_refs).unwrap_or_default()
    }

    /// Whether every `endpoints_inference_pool` of the configuration last published has been
    /// listed at least once (its pods are known, even if there are none).
    pub fn pools_synced(&self) -> bool {
        let state = self.dns.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let listed = |r: &String| state.answers.contains_key(&super::kube::answer_key(r));
        state.raw.as_ref().is_none_or(|raw| dns::pool_refs(raw).iter().all(listed))
    }

    /// Records what `name` (an `endpoints_dns` name or a pool's [`super::kube::answer_key`])
    /// stands for now; whether that changed its answer. An answer for a name the configuration
    /// no longer uses (a lookup that ended after a publication dropped it) is not kept.
    pub fn set_dns_answer(&self, name: &str, endpoints: Vec<String>) -> bool {
        let mut state = self.dns.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if state.answers.get(name) == Some(&endpoints)
            || !state.raw.as_ref().is_some_and(|r| dns::keys(r).iter().any(|k| k == name))
        {
            return false;
        }
        tracing::info!(name, ?endpoints, "pool endpoints: new answer");
        state.answers.insert(name.to_string(), endpoints);
        true
    }

    /// Publishes the last configuration again, with the current DNS answers and OAuth tokens.
    pub fn republish(&self) {
        let raw = self.dns.lock().unwrap_or_else(std::sync::PoisonError::into_inner).raw.clone();
        if let Some(raw) = raw {
            if let Err(e) = self.publish(raw) {
                tracing::warn!(error = %e, "the configuration with the new endpoints or tokens does not build");
            }
        }
    }

    /// Resolves when a published configuration names an `endpoints_dns` not resolved yet.
    pub async fn dns_wanted(&self) {
        self.dns_wake.notified().await;
    }

    /// Resolves when a published configuration names a pool with no endpoints found yet.
    pub async fn pools_wanted(&self) {
        self.pools_wake.notified().await;
    }

    /// Records a store failure (unreadable file, syntax error) without touching the snapshot.
    pub fn reject(&self, path: &str, message: String) {
        *self.lock_rejected() = vec![WireProblem { path: path.to_string(), message }];
    }

    /// Serves the cached snapshot (the store is unreachable at start): its sealed keys
    /// opened, the others read from their `api_key_env` variables again.
    ///
    /// # Errors
    /// No cache configured is `Ok(false)`; an unreadable or invalid cache is an error.
    pub fn restore_cached(&self) -> Result<bool, CacheError> {
        let Some(path) = &self.cache else { return Ok(false) };
        let (raw, purges) = cache::read(path, self.master.as_ref(), |name| std::env::var(name).ok())?;
        {
            let mut held = lock(&self.purges);
            if held.is_empty() {
                *held = purges;
            }
        }
        self.publish(raw)?;
        Ok(true)
    }

    /// What was dropped from the served snapshot and why the latest build failed.
    pub fn report(&self) -> ProblemReport {
        let current = self.current();
        ProblemReport {
            version: current.as_ref().map(|s| s.version.clone()),
            dropped: current.map(|s| s.problems.clone()).unwrap_or_default(),
            rejected: self.lock_rejected().clone(),
        }
    }

    fn replace(&self, served: Arc<Served>) {
        let changed = self.current().is_none_or(|old| old.version != served.version);
        if changed {
            tracing::info!(version = %served.version, dropped = served.problems.len(), "configuration snapshot published");
            for p in &served.problems {
                tracing::warn!(path = %p.path, "{}", p.message);
            }
        }
        self.current.send_replace(Some(served));
    }

    fn persist(&self, doc: &Snapshot) {
        let Some(path) = &self.cache else { return };
        if let Err(e) = cache::write(path, doc, self.master.as_ref()) {
            tracing::warn!(error = %e, path = %path.display(), "cannot write the snapshot cache");
        }
    }

    fn lock_rejected(&self) -> std::sync::MutexGuard<'_, Vec<WireProblem>> {
        self.rejected.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// `mutex` locked; a poisoned lock is taken over (its data is replaced whole, never torn).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests;
