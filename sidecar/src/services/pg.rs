//! The `postgres` store: the configuration as rows in normalized tables (`pg/0001_config.sql`),
//! shared by every sidecar and `serve` pointed at the same database.
//!
//! Every write runs in one transaction that applies the change, checks the whole resulting
//! configuration and bumps `fg_config_version`; a write that would make its own row
//! unservable is refused (400, with the problems), one that would strand other rows (deleting a
//! provider models still use) is refused too (409, naming them). Sidecars notice a new version
//! by polling it (and at once when Redis carries the notification, see `reload`) and publish a
//! new snapshot. Provider keys are stored sealed (`services::secrets`) and opened only to build
//! the snapshot.
//!
//! The same database holds the usage records filters report (`fg_usage`, see [`usage`]) and
//! the response cache's purges ([`cache_purges`]).

use std::collections::BTreeSet;

use deadpool_postgres::{GenericClient, Pool};
use ferrogate_core::config::cache::RawCacheStore;
use ferrogate_core::config::egress::RawEgress;
use ferrogate_core::config::RawRedis;
use ferrogate_core::config::{Problem, RawConfig};
use ferrogate_core::snapshot;
use tokio_postgres::NoTls;

use super::secrets::{MasterKey, SecretError};

pub mod cache_purges;
pub mod conversations;
pub mod requests;
pub mod responses;
pub mod rows;
pub mod usage;

pub use rows::{Change, Resource, Section};

/// Migrations, applied in order, each once (recorded in `fg_migrations`).
const MIGRATIONS: &[(i32, &str)] = &[
    (1, include_str!("pg/0001_config.sql")),
    (2, include_str!("pg/0002_usage.sql")),
    (3, include_str!("pg/0003_usage_cut.sql")),
    (4, include_str!("pg/0004_usage_partial.sql")),
    (5, include_str!("pg/0005_provider_kv.sql")),
    (6, include_str!("pg/0006_flow_control.sql")),
    (7, include_str!("pg/0007_endpoints_dns.sql")),
    (8, include_str!("pg/0008_usage_retries.sql")),
    (9, include_str!("pg/0009_responses.sql")),
    (10, include_str!("pg/0010_conversations.sql")),
    (11, include_str!("pg/0011_agents.sql")),
    (12, include_str!("pg/0012_usage_continues.sql")),
    (13, include_str!("pg/0013_usage_guardrails.sql")),
    (14, include_str!("pg/0014_guardrails.sql")),
    (15, include_str!("pg/0015_cache.sql")),
    (16, include_str!("pg/0016_identity.sql")),
    (17, include_str!("pg/0017_analytics.sql")),
    (18, include_str!("pg/0018_usage_client.sql")),
    (19, include_str!("pg/0019_events.sql")),
    (20, include_str!("pg/0020_provider_settings.sql")),
    (21, include_str!("pg/0021_usage_endpoint.sql")),
];

/// Failures of the store; `Invalid` and `Conflict` are the caller's, the rest are ours.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The change would leave its own row unservable (400).
    #[error("invalid: {}", join(.0))]
    Invalid(Vec<Problem>),
    /// The change would make other rows unservable (409).
    #[error("conflict: {0}")]
    Conflict(String),
    /// No such row (404).
    #[error("{0} not found")]
    NotFound(String),
    /// A provider key was given but no `FERROGATE_MASTER_KEY` is set to seal it (400).
    #[error("FERROGATE_MASTER_KEY is not set: provider keys cannot be stored")]
    NoMasterKey,
    /// The database refused or is unreachable.
    #[error("database: {0}")]
    Db(#[from] tokio_postgres::Error),
    /// No connection could be had from the pool.
    #[error("database pool: {0}")]
    Pool(#[from] deadpool_postgres::PoolError),
    /// The pool could not be built from the URL.
    #[error("database url: {0}")]
    Url(String),
    /// A sealed credential could not be opened (or sealed).
    #[error("{row} credential: {source}")]
    Secret {
        /// Whose credential: `providers/<name>`, `mcp_servers/<name>` or `a2a_agents/<name>`.
        row: String,
        /// Why.
        source: SecretError,
    },
    /// A stored row this build cannot read (written by a newer one?).
    #[error("{row}: the stored row cannot be read: {message}")]
    Unreadable {
        /// The row, `section/name`.
        row: String,
        /// The parser's complaint.
        message: String,
    },
}

fn join(problems: &[Problem]) -> String {
    problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

/// A connection pool on the configuration database.
pub struct PgStore {
    pool: Pool,
    master: Option<MasterKey>,
    /// The file's `egress:` block: a security policy, so it governs the rows too (every other
    /// top-level block of the file stays out of the configuration the rows make).
    egress: Option<RawEgress>,
    /// The file's `cache_store:` with the `redis:` it may need: where response-cache entries
    /// live is a property of the deployment (its Redis), not of rows.
    cache: Option<(RawCacheStore, Option<RawRedis>)>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").field("sealing", &self.master.is_some()).finish_non_exhaustive()
    }
}

impl PgStore {
    /// Connects and applies pending migrations.
    ///
    /// # Errors
    /// A bad URL, an unreachable database or a failed migration.
    pub async fn connect(url: &str, master: Option<MasterKey>) -> Result<PgStore, StoreError> {
        let pg: tokio_postgres::Config =
            url.parse().map_err(|e: tokio_postgres::Error| StoreError::Url(e.to_string()))?;
        let manager = deadpool_postgres::Manager::new(pg, NoTls);
        let pool = Pool::builder(manager).max_size(8).build().map_err(|e| StoreError::Url(e.to_string()))?;
        let store = PgStore { pool, master, egress: None, cache: None };
        store.migrate().await?;
        Ok(store)
    }

    /// The same store, its rows checked and served under `egress` (the file's block).
    pub fn with_egress(mut self, egress: Option<RawEgress>) -> PgStore {
        self.egress = egress;
        self
    }

    /// The same store, serving the file's `cache_store:` (and, when it names Redis, `redis:`).
    pub fn with_cache_store(mut self, file: &RawConfig) -> PgStore {
        self.cache = file.cache_store.clone().map(|store| {
            let redis = (store.kind.as_deref() == Some("redis")).then(|| file.redis.clone()).flatten();
            (store, redis)
        });
        self
    }

    /// Every row, under the file's egress policy and cache store.
    async fn rows(&self, c: &impl GenericClient) -> Result<RawConfig, StoreError> {
        let mut raw = rows::read(c).await?;
        raw.egress.clone_from(&self.egress);
        if let Some((store, redis)) = &self.cache {
            raw.cache_store = Some(store.clone());
            if raw.redis.is_none() {
                raw.redis.clone_from(redis);
            }
        }
        Ok(raw)
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        // One migrator at a time across sidecars starting together.
        tx.execute("SELECT pg_advisory_xact_lock(4242424242)", &[]).await?;
        tx.execute("CREATE TABLE IF NOT EXISTS fg_migrations (version integer PRIMARY KEY)", &[]).await?;
        for (version, sql) in MIGRATIONS {
            let done = tx.query_opt("SELECT 1 FROM fg_migrations WHERE version = $1", &[version]).await?;
            if done.is_none() {
                tx.batch_execute(sql).await?;
                tx.execute("INSERT INTO fg_migrations (version) VALUES ($1)", &[version]).await?;
                tracing::info!(version, "database migration applied");
            }
        }
        tx.commit().await?;
        Ok(())
    }

    /// The connection pool (the admin identity's tables live in the same database).
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The configuration version (bumped by every write).
    ///
    /// # Errors
    /// The database is unreachable.
    pub async fn version(&self) -> Result<i64, StoreError> {
        let client = self.pool.get().await?;
        Ok(client.query_one("SELECT version FROM fg_config_version", &[]).await?.get(0))
    }

    /// The whole configuration with provider keys opened, and its version, read consistently.
    ///
    /// # Errors
    /// The database is unreachable, or a sealed key cannot be opened.
    pub async fn load(&self) -> Result<(i64, RawConfig), StoreError> {
        let mut client = self.pool.get().await?;
        let tx =
            client.build_transaction().isolation_level(tokio_postgres::IsolationLevel::RepeatableRead).start().await?;
        let version: i64 = tx.query_one("SELECT version FROM fg_config_version", &[]).await?.get(0);
        let mut raw = self.rows(&tx).await?;
        tx.commit().await?;
        self.open_keys(&mut raw)?;
        raw.resolve_api_keys(|name| std::env::var(name).ok());
        Ok((version, raw))
    }

    /// Imports `raw` when the store has never been written (version 0): a file's rows seed a
    /// new database once. Returns whether it did. A provider that names `api_key_env` is
    /// stored with the variable's name only, never its value: the key is read from the
    /// environment each time the configuration is loaded, so rotating the variable (and
    /// restarting) takes effect, and no master key is needed for it.
    ///
    /// # Errors
    /// The database is unreachable or refuses a row.
    pub async fn seed(&self, raw: &RawConfig) -> Result<bool, StoreError> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let version: i64 = tx.query_one("SELECT version FROM fg_config_version FOR UPDATE", &[]).await?.get(0);
        if version != 0 {
            return Ok(false);
        }
        for change in rows::changes_of(&without_env_keys(raw)) {
            let change = self.seal(change)?;
            rows::apply(&tx, &change).await?;
        }
        tx.execute("UPDATE fg_config_version SET version = version + 1", &[]).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Applies one change if the configuration stays servable; returns the new version.
    ///
    /// # Errors
    /// [`StoreError::Invalid`], [`StoreError::Conflict`], [`StoreError::NotFound`] for the
    /// caller's mistakes; database failures otherwise. Nothing is written on error.
    pub async fn write(&self, change: Change) -> Result<i64, StoreError> {
        let change = self.seal(change)?;
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        // Serialize writers: the check below must see every earlier write.
        tx.query_one("SELECT version FROM fg_config_version FOR UPDATE", &[]).await?;
        let before = servable(self.rows(&tx).await?);
        if !rows::apply(&tx, &change).await? {
            return Err(StoreError::NotFound(change.target()));
        }
        let after_raw = self.rows(&tx).await?;
        check_change(&change, &before, after_raw)?;
        let version: i64 =
            tx.query_one("UPDATE fg_config_version SET version = version + 1 RETURNING version", &[]).await?.get(0);
        tx.commit().await?;
        Ok(version)
    }

    /// Reads one section's rows as the config file would write them (provider keys omitted).
    ///
    /// # Errors
    /// The database is unreachable.
    pub async fn list(&self, section: Section) -> Result<serde_json::Value, StoreError> {
        let client = self.pool.get().await?;
        let raw = rows::read(&client).await?;
        Ok(rows::section_json(&raw, section))
    }

    fn seal(&self, change: Change) -> Result<Change, StoreError> {
        change.seal_with(|row, key| {
            let master = self.master.as_ref().ok_or(StoreError::NoMasterKey)?;
            master
                .seal(key.as_bytes(), &secret_aad(row))
                .map_err(|source| StoreError::Secret { row: row.to_string(), source })
        })
    }

    fn open_keys(&self, raw: &mut RawConfig) -> Result<(), StoreError> {
        for (row, key) in rows::credentials(raw) {
            let Some(sealed) = key.take() else { continue };
            let master = self.master.as_ref().ok_or(StoreError::NoMasterKey)?;
            let opened = master.open(&sealed, &secret_aad(&row));
            let plain = opened.map_err(|source| StoreError::Secret { row: row.clone(), source })?;
            *key = Some(String::from_utf8_lossy(&plain).into_owned());
        }
        Ok(())
    }
}

/// `raw` without the credentials its rows take from the environment (`api_key_env`).
fn without_env_keys(raw: &RawConfig) -> RawConfig {
    let mut raw = raw.clone();
    for p in raw.providers.iter_mut().filter(|p| p.api_key_env.is_some()) {
        p.api_key = None;
    }
    for s in raw.mcp_servers.iter_mut().filter(|s| s.api_key_env.is_some()) {
        s.api_key = None;
    }
    for a in raw.a2a_agents.iter_mut().filter(|a| a.api_key_env.is_some()) {
        a.api_key = None;
    }
    raw
}

/// Associated data binding a sealed credential to its row (`providers/<name>`, ...): a sealed
/// key copied into another row does not open.
fn secret_aad(row: &str) -> String {
    format!("{row}/api_key")
}

/// The rows (section, name) a configuration serves once unservable rows are dropped.
fn servable(raw: RawConfig) -> BTreeSet<(Section, String)> {
    snapshot::build(raw).map(|b| rows::names(&b.raw)).unwrap_or_default()
}

/// Refuses a change that drops its own row (400) or rows that were servable before (409). A
/// configuration that does not build at all (a problem no single row can be dropped for, such
/// as a guardrail policy's rule) is the written row's fault (400), or, for a delete, the rows
/// that still need the deleted one (409: a provider a moderation rule names).
fn check_change(change: &Change, before: &BTreeSet<(Section, String)>, after: RawConfig) -> Result<(), StoreError> {
    let built = match snapshot::build(after.clone()) {
        Ok(built) => built,
        Err(e) if change.is_put() => return Err(StoreError::Invalid(e.problems)),
        Err(e) => {
            let why = join(&e.problems);
            return Err(StoreError::Conflict(format!(
                "{} would make the configuration invalid: {why}",
                change.target()
            )));
        }
    };
    let now = rows::names(&built.raw);
    let own = change.row();
    if change.is_put() && !now.contains(&own) {
        let problems = rows::problems_of(&built.problems, &after, &own);
        return Err(StoreError::Invalid(problems));
    }
    let lost: Vec<String> =
        before.iter().filter(|r| **r != own && !now.contains(*r)).map(|(s, n)| format!("{}/{n}", s.as_str())).collect();
    if !lost.is_empty() {
        return Err(StoreError::Conflict(format!(
            "{} would stop being servable: {}",
            change.target(),
            lost.join(", ")
        )));
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests;
