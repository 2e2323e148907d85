//! Target health and engine load: what the sidecar learns about every routing target and
//! feeds to its filter (`GET /v1/targets`, [`ferrogate_core::targets::TargetFeed`]).
//!
//! The targets are the endpoints of the providers of the snapshot being served (one per pool
//! member, or the `base_url` authority without a pool; see [`probe::targets`]), followed as
//! the snapshot changes: a new endpoint starts healthy with unknown load, a removed one is
//! dropped, a kept one keeps its state.
//!
//! Self-hosted engines are probed every [`Settings::probe_interval`] (`GET /health`, else
//! `GET /v1/models`, each within [`Settings::timeout`]) and turn unhealthy after
//! [`FAILURES_TO_UNHEALTHY`] consecutive failures, healthy again after
//! [`SUCCESSES_TO_HEALTHY`] consecutive successes; while unhealthy they carry a cooldown of
//! [`Settings::cooldown`] from the latest failure. Their `/metrics` are scraped every
//! [`Settings::scrape_interval`] for the running and waiting requests and the KV-cache usage
//! (vLLM or SGLang series, [`prom`]) and, from vLLM, the LoRA adapters in use ([`lora`]); an
//! endpoint whose `/metrics` answers without engine series is asked again only every
//! [`NO_METRICS_RETRY`]. A failed scrape makes the load and adapters unknown (never stale).
//! With the provider's `lmcache.occupancy`, each scrape round also reads every endpoint's
//! LMCache occupancy ([`occupancy`]), unknown when the read fails. SaaS providers are not
//! probed: they stay healthy here, and passive signals from real traffic are the filter's to
//! add.
//!
//! Probes and scrapes of a round run concurrently, at most [`CONCURRENCY`] at a time. The
//! feed is rebuilt after every round and gets a new version only when something changed.
//! Versions count up from the start time (Unix ms × 1,000), so a restarted sidecar never
//! repeats one of its predecessor's: a filter still holding that feed would get 304 for it and
//! take the old figures for confirmed.

use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use bytes::Bytes;
use ferrogate_core::targets::{EndpointState, TargetFeed};
use futures_util::stream::{self, StreamExt};
use tokio::sync::watch;

use super::snapshot::{Served, Snapshots};

pub mod cache;
pub mod health;
pub mod lora;
pub mod occupancy;
pub mod probe;
pub mod prom;
mod report;

use super::now_ms;
pub use health::{Health, FAILURES_TO_UNHEALTHY, SUCCESSES_TO_HEALTHY};
use probe::{Prober, Scrape, Target};
pub use report::{prometheus, ProviderKeys, Report, TargetReport};

/// Probes and scrapes in flight at once.
pub const CONCURRENCY: usize = 32;
/// How long an endpoint whose `/metrics` has no engine series is left alone.
pub const NO_METRICS_RETRY: Duration = Duration::from_secs(30);

/// Timing of probes and scrapes.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Between health probe rounds (default 5 s).
    pub probe_interval: Duration,
    /// Between `/metrics` scrape rounds (default 2 s).
    pub scrape_interval: Duration,
    /// Per probe or scrape request (default 2 s).
    pub timeout: Duration,
    /// How long an unhealthy endpoint is parked after each failed probe (default 30 s).
    pub cooldown: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            probe_interval: Duration::from_secs(5),
            scrape_interval: Duration::from_secs(2),
            timeout: Duration::from_secs(2),
            cooldown: Duration::from_secs(30),
        }
    }
}

/// The health and load of every target of the served snapshot.
pub struct Targets {
    settings: Settings,
    prober: Prober,
    table: Mutex<Table>,
    /// The serialized feed and the states it was built from.
    feed: RwLock<Published>,
}

#[derive(Default)]
struct Table {
    /// Version of the snapshot the entries were built from.
    snapshot: Option<String>,
    entries: Vec<Entry>,
    /// The providers' keys, by fingerprint, from the same snapshot.
    provider_keys: Vec<ProviderKeys>,
}

/// One target and what is known about it.
struct Entry {
    target: Target,
    health: Health,
    load: prom::Load,
    /// What it reports of its CPU and storage caches (LMCache) and external cache hits.
    cache: cache::CacheFigures,
    /// The LoRA adapters it reports (nothing when it does not).
    lora: lora::Lora,
    /// Its LMCache occupancy (0..=1) from the last read, if it has a source that answered.
    occupancy: Option<f64>,
    /// Unix ms before which `/metrics` is not scraped again (it had no engine series).
    metrics_retry_at_ms: u64,
}

#[derive(Default)]
struct Published {
    version: u64,
    states: Vec<EndpointState>,
    body: Bytes,
}

impl Targets {
    /// No targets yet; call [`Targets::sync`] with a snapshot (or use [`start`]).
    pub fn new(settings: Settings) -> Targets {
        let prober = Prober::new(settings.timeout);
        let first = Published { version: now_ms().saturating_mul(1_000), ..Published::default() };
        let targets = Targets { settings, prober, table: Mutex::default(), feed: RwLock::new(first) };
        targets.publish();
        targets
    }

    /// The timing in use.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Follows `served` (no-op when its version is the one already followed).
    pub fn sync(&self, served: Option<&Served>) {
        {
            let mut table = self.table();
            let version = served.map(|s| s.version.clone());
            if table.snapshot == version {
                return;
            }
            let wanted = served.map(|s| probe::targets(&s.config)).unwrap_or_default();
            let mut old = std::mem::take(&mut table.entries);
            table.entries = wanted.into_iter().map(|target| carry_over(&mut old, target)).collect();
            table.provider_keys = served.map(|s| report::provider_keys(&s.config)).unwrap_or_default();
            table.snapshot = version;
        }
        self.publish();
    }

    /// Probes every active target once, concurrently, and records the results.
    pub async fn probe_round(&self) {
        let work = self.active_targets();
        let prober = &self.prober;
        let results: Vec<(Target, Result<(), String>)> = stream::iter(work)
            .map(|t| async move {
                let r = prober.health(&t).await;
                (t, r)
            })
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        let (now, cooldown) = (now_ms(), millis(self.settings.cooldown));
        {
            let mut table = self.table();
            for (t, result) in results {
                if let Some(e) = find(&mut table.entries, &t) {
                    e.health.observe(result, now, cooldown);
                }
            }
        }
        self.publish();
    }

    /// Scrapes `/metrics` of every active target whose metrics are due, and reads the LMCache
    /// occupancy of every one with a source, once, concurrently; records what came back.
    pub async fn scrape_round(&self) {
        let work = self.scrape_work(now_ms());
        let prober = &self.prober;
        let results: Vec<(Target, Option<Scrape>, Option<f64>)> = stream::iter(work)
            .map(|(t, due)| async move {
                let scrape = async {
                    if due {
                        Some(prober.metrics(&t).await)
                    } else {
                        None
                    }
                };
                let (s, occupancy) = tokio::join!(scrape, prober.occupancy(&t));
                (t, s, occupancy)
            })
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        let retry_at = now_ms().saturating_add(millis(NO_METRICS_RETRY));
        {
            let mut table = self.table();
            for (t, scrape, occupancy) in results {
                if let Some(e) = find(&mut table.entries, &t) {
                    if let Some(scrape) = scrape {
                        e.record_scrape(scrape, retry_at);
                    }
                    e.occupancy = occupancy;
                }
            }
        }
        self.publish();
    }

    /// What a scrape round at `now` asks: every active target whose metrics are due or that
    /// has an occupancy source, with whether its metrics are due.
    fn scrape_work(&self, now: u64) -> Vec<(Target, bool)> {
        let due = |e: &Entry| e.metrics_retry_at_ms <= now;
        let wanted = |e: &&Entry| e.target.active && (due(e) || e.target.occupancy_url.is_some());
        self.table().entries.iter().filter(wanted).map(|e| (e.target.clone(), due(e))).collect()
    }

    /// Active targets (those probed).
    fn active_targets(&self) -> Vec<Target> {
        self.table().entries.iter().filter(|e| e.target.active).map(|e| e.target.clone()).collect()
    }

    /// Rebuilds the feed; its version moves only when a state changed.
    fn publish(&self) {
        let states: Vec<EndpointState> = self.table().entries.iter().map(Entry::state).collect();
        let mut feed = self.feed.write().unwrap_or_else(PoisonError::into_inner);
        if feed.states == states && !feed.body.is_empty() {
            return;
        }
        let version = feed.version + 1;
        let wire = TargetFeed { version, endpoints: states };
        let body = Bytes::from(wire.to_json().unwrap_or_default());
        *feed = Published { version, states: wire.endpoints, body };
    }

    /// The feed body for the filter (`GET /v1/targets`) and its version.
    pub fn feed(&self) -> (u64, Bytes) {
        let feed = self.feed.read().unwrap_or_else(PoisonError::into_inner);
        (feed.version, feed.body.clone())
    }

    /// Everything known per target, for the admin API.
    pub fn report(&self) -> Report {
        let (targets, provider_keys) = {
            let table = self.table();
            (table.entries.iter().map(Entry::detail).collect(), table.provider_keys.clone())
        };
        let probe_interval_ms = millis(self.settings.probe_interval);
        Report { version: self.feed().0, probe_interval_ms, targets, provider_keys }
    }
}

/// The entry of `target` from `old` (its state kept), or a new one.
fn carry_over(old: &mut Vec<Entry>, target: Target) -> Entry {
    match old.iter().position(|e| e.target.provider == target.provider && e.target.endpoint == target.endpoint) {
        Some(i) => {
            let mut e = old.swap_remove(i);
            if e.target.active && !target.active {
                e.health = Health::default();
                e.load = prom::Load::default();
                e.cache = cache::CacheFigures::default();
                e.lora = lora::Lora::default();
                e.occupancy = None;
            }
            e.target = target;
            e
        }
        None => Entry {
            target,
            health: Health::default(),
            load: prom::Load::default(),
            cache: cache::CacheFigures::default(),
            lora: lora::Lora::default(),
            occupancy: None,
            metrics_retry_at_ms: 0,
        },
    }
}

/// The entry of `t`, unless the snapshot changed it meanwhile (a result about the old target
/// is dropped).
fn find<'a>(entries: &'a mut [Entry], t: &Target) -> Option<&'a mut Entry> {
    entries.iter_mut().find(|e| e.target == *t)
}

impl Entry {
    /// Records a scrape; an answer without engine series puts the next one off until
    /// `retry_at_ms`. No answer (the engine restarting) is retried on the next round.
    fn record_scrape(&mut self, scrape: Scrape, retry_at_ms: u64) {
        let (load, lora, no_metrics) = match &scrape {
            Scrape::Page(text) => {
                let load = prom::load(text);
                let empty = load.is_empty();
                (load, lora::read(text).unwrap_or_default(), empty)
            }
            Scrape::NoMetrics(_) => (prom::Load::default(), lora::Lora::default(), true),
            Scrape::Failed(_) => (prom::Load::default(), lora::Lora::default(), false),
        };
        self.cache = match &scrape {
            Scrape::Page(text) => cache::read(text),
            _ => cache::CacheFigures::default(),
        };
        self.load = load;
        self.lora = lora;
        if no_metrics {
            self.metrics_retry_at_ms = retry_at_ms;
        }
    }

    fn state(&self) -> EndpointState {
        EndpointState {
            provider: self.target.provider.clone(),
            endpoint: self.target.endpoint.clone(),
            healthy: self.health.healthy,
            cooldown_until_ms: self.health.cooldown_until_ms,
            running: self.load.running.map(count),
            waiting: self.load.waiting.map(count),
            kv_usage_permille: self.load.kv_usage.and_then(EndpointState::permille),
            cache_occupancy_permille: self.occupancy.and_then(EndpointState::permille),
            adapters: self.lora.adapters.clone(),
            max_loras: self.lora.max_loras,
        }
    }

    fn detail(&self) -> TargetReport {
        let state = self.state();
        TargetReport {
            provider: state.provider,
            endpoint: state.endpoint,
            kind: self.target.kind.as_str(),
            probed: self.target.active,
            health: self.health.clone(),
            running: state.running,
            waiting: state.waiting,
            kv_usage: state.kv_usage_permille.map(|p| f64::from(p) / 1000.0),
            cache_occupancy: state.cache_occupancy_permille.map(|p| f64::from(p) / 1000.0),
            adapters: state.adapters,
            max_loras: state.max_loras,
            cache: (!self.cache.is_empty()).then_some(self.cache),
        }
    }
}

/// A gauge value as a count (rounded, saturating).
fn count(v: f64) -> u32 {
    // `as` saturates and maps NaN to 0; load values are finite and non-negative already.
    v.round() as u32
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Starts following `snapshots` and the probe and scrape loops, until `shutdown`.
pub fn start(snapshots: Arc<Snapshots>, settings: Settings, shutdown: watch::Receiver<bool>) -> Arc<Targets> {
    let targets = Arc::new(Targets::new(settings));
    let mut rx = snapshots.subscribe();
    let current = rx.borrow_and_update().clone();
    targets.sync(current.as_deref());
    tokio::spawn(follow(targets.clone(), rx, shutdown.clone()));
    let (probe, scrape) = (targets.settings.probe_interval, targets.settings.scrape_interval);
    let t = targets.clone();
    tokio::spawn(every(probe, shutdown.clone(), move || {
        let t = t.clone();
        async move { t.probe_round().await }
    }));
    let t = targets.clone();
    tokio::spawn(every(scrape, shutdown, move || {
        let t = t.clone();
        async move { t.scrape_round().await }
    }));
    targets
}

/// Syncs the targets with every newly published snapshot.
async fn follow(
    targets: Arc<Targets>,
    mut rx: watch::Receiver<Option<Arc<Served>>>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            changed = rx.changed() => {
                if changed.is_err() {
                    return;
                }
                let served = rx.borrow_and_update().clone();
                targets.sync(served.as_deref());
            }
            _ = shutdown.changed() => return,
        }
    }
}

/// Runs `round` every `period` (a round longer than the period delays the next one) until
/// `shutdown`; a round in progress is abandoned at shutdown.
async fn every<F, Fut>(period: Duration, mut shutdown: watch::Receiver<bool>, round: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut tick = tokio::time::interval(period.max(Duration::from_millis(10)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = async { tick.tick().await; round().await } => {}
            _ = shutdown.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests;
