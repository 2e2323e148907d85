//! Where the configuration comes from, chosen by the file's `store:` block, and how changes
//! reach the snapshot.
//!
//! - `file` (default): the file itself, watched for edits ([`FileStore`]).
//! - `postgres`: the tables of [`PgStore`] (URL from the variable `url_env` names, default
//!   `FERROGATE_DATABASE_URL`); a never-written database is seeded from the file's rows. The
//!   version row is polled every interval; with `redis:` configured, every write also publishes
//!   its version on [`CHANNEL`] and every sidecar reloads at once (polling still repairs a
//!   missed message).

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use ferrogate_core::config::RawConfig;
use futures_util::StreamExt;
use tokio::sync::{watch, Notify};

use super::pg::{PgStore, StoreError};
use super::secrets::MasterKey;
use super::snapshot::Snapshots;
use super::store::FileStore;

/// Redis channel carrying new configuration versions.
pub const CHANNEL: &str = "ferrogate:config";

/// Why the configuration source cannot start.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The store settings are unusable.
    #[error("store: {0}")]
    Settings(String),
    /// The database refused.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The Postgres side of a running source: what the admin API writes to.
#[derive(Debug, Clone)]
pub struct Database {
    /// The store.
    pub store: Arc<PgStore>,
    /// Wakes the reload loop after a local write.
    pub changed: Arc<Notify>,
    /// Redis URL, when writes are announced to other sidecars.
    pub redis: Option<String>,
}

impl Database {
    /// Announces `version` after a write: this sidecar reloads now, others via Redis.
    pub async fn announce(&self, version: i64) {
        self.changed.notify_one();
        let Some(url) = &self.redis else { return };
        let sent = async {
            let client = redis::Client::open(url.as_str())?;
            let mut conn = client.get_multiplexed_async_connection().await?;
            redis::cmd("PUBLISH").arg(CHANNEL).arg(version).query_async::<i64>(&mut conn).await
        };
        if let Err(e) = sent.await {
            tracing::warn!(error = %e, "config version {version} not announced on Redis; other sidecars see it on their next poll");
        }
    }
}

/// Opens the source `file` names and publishes its first snapshot (when it can); returns the
/// database handle for the admin API when the store is Postgres.
///
/// # Errors
/// Unusable store settings, or a database that cannot be reached or migrated.
pub async fn start(
    file: &Path,
    raw: &RawConfig,
    snapshots: &Arc<Snapshots>,
    interval: Duration,
    shutdown: watch::Receiver<bool>,
) -> Result<Option<Database>, SourceError> {
    let kind = raw.store.as_ref().map_or("file", |s| s.kind.as_str());
    if kind != "postgres" {
        tokio::spawn(FileStore::new(file, interval).watch(snapshots.clone(), shutdown));
        return Ok(None);
    }
    let var = raw.store.as_ref().and_then(|s| s.url_env.clone()).unwrap_or_else(|| "FERROGATE_DATABASE_URL".into());
    let url = std::env::var(&var).map_err(|_| SourceError::Settings(format!("{var} is not set")))?;
    let master = MasterKey::from_env().map_err(|e| SourceError::Settings(e.to_string()))?;
    let store = Arc::new(PgStore::connect(&url, master).await?.with_egress(raw.egress.clone()).with_cache_store(raw));
    if store.seed(raw).await? {
        tracing::info!("empty configuration database seeded from {}", file.display());
    }
    let redis = match &raw.redis {
        Some(r) => {
            Some(std::env::var(&r.url_env).map_err(|_| SourceError::Settings(format!("{} is not set", r.url_env)))?)
        }
        None => None,
    };
    let db = Database { store, changed: Arc::new(Notify::new()), redis };
    let version = reload(&db.store, snapshots).await;
    if let Some(url) = &db.redis {
        tokio::spawn(subscribe(url.clone(), db.changed.clone(), shutdown.clone()));
    }
    tokio::spawn(poll(db.clone(), snapshots.clone(), interval, version, shutdown));
    Ok(Some(db))
}

/// Whether `raw` keeps its configuration in Postgres.
pub fn is_postgres(raw: &RawConfig) -> bool {
    raw.store.as_ref().is_some_and(|s| s.kind == "postgres")
}

/// [`start`], retried every two seconds in the background while the store is unreachable (the
/// caller serves its cached snapshot meanwhile); `slot` receives the database once connected.
pub async fn start_retrying(
    file: &Path,
    raw: &RawConfig,
    snapshots: &Arc<Snapshots>,
    interval: Duration,
    shutdown: watch::Receiver<bool>,
    slot: Arc<OnceLock<Database>>,
) {
    match start(file, raw, snapshots, interval, shutdown.clone()).await {
        Ok(db) => {
            if let Some(db) = db {
                let _ = slot.set(db);
            }
            return;
        }
        Err(e) => tracing::error!("{e}; retrying every 2 s"),
    }
    let (file, raw, snapshots) = (file.to_path_buf(), raw.clone(), snapshots.clone());
    tokio::spawn(async move {
        let mut stop = shutdown.clone();
        loop {
            tokio::select! {
                () = tokio::time::sleep(Duration::from_secs(2)) => {}
                _ = stop.changed() => return,
            }
            match start(&file, &raw, &snapshots, interval, shutdown.clone()).await {
                Ok(db) => {
                    tracing::info!("configuration store reachable again");
                    if let Some(db) = db {
                        let _ = slot.set(db);
                    }
                    return;
                }
                Err(e) => tracing::debug!("{e}"),
            }
        }
    });
}

/// Loads and publishes; returns the version loaded (None when the store failed).
async fn reload(store: &PgStore, snapshots: &Snapshots) -> Option<i64> {
    match store.load().await {
        Ok((version, raw)) => {
            if let Err(e) = snapshots.publish(raw) {
                tracing::error!("configuration version {version} not servable, the last good one stays: {e}");
            }
            Some(version)
        }
        Err(e) => {
            snapshots.reject("store", e.to_string());
            tracing::warn!("configuration store: {e}; the last good snapshot stays");
            None
        }
    }
}

/// Reloads when the version moves: every interval, and at once when woken.
async fn poll(
    db: Database,
    snapshots: Arc<Snapshots>,
    interval: Duration,
    mut last: Option<i64>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            () = db.changed.notified() => {}
            _ = shutdown.changed() => return,
        }
        match db.store.version().await {
            Ok(v) if Some(v) == last => {}
            Ok(_) => last = reload(&db.store, &snapshots).await.or(last),
            Err(e) => tracing::debug!("configuration version unreadable: {e}"),
        }
    }
}

/// Wakes the reload loop for every version announced on Redis; reconnects after failures.
async fn subscribe(url: String, changed: Arc<Notify>, mut shutdown: watch::Receiver<bool>) {
    loop {
        let session = async {
            let client = redis::Client::open(url.as_str())?;
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe(CHANNEL).await?;
            let mut messages = pubsub.on_message();
            while messages.next().await.is_some() {
                changed.notify_one();
            }
            Ok::<(), redis::RedisError>(())
        };
        tokio::select! {
            result = session => if let Err(e) = result {
                tracing::warn!(error = %e, "Redis subscription lost; polling covers until it is back");
            },
            _ = shutdown.changed() => return,
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = shutdown.changed() => return,
        }
    }
}
