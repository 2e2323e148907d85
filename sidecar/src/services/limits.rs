//! The limits ledger: every proxy's consumption, per limit counter, across the replicas of the
//! gateway — what `GET /v1/limits` feeds the filter and what the admin API and `/metrics` show.
//!
//! Each usage batch the filter posts is folded in after it is stored: a record the limits
//! admitted (`admitted: true`) adds one request, its tokens and its cost to every counter of
//! its key's plan (`ferrogate_core::limits::feed::charges`), in the bucket of the time it
//! ended; the record of an MCP/A2A call adds one request and its tool call to the counters of
//! its MCP/A2A plan (`ferrogate_core::limits::agent::recorded`). The ledger keeps this replica's amounts per counter and bucket (for as long as the
//! bucket can count). With `redis:` configured the changed ones are written every
//! [`FLUSH_EVERY`] into one hash per counter and bucket, a field per replica holding that
//! replica's absolute amount, and the sidecar reads every active hash back every
//! [`READ_EVERY`] (see [`redis`]). Without Redis the amounts serve visibility only (the
//! filter's shared-data counters already enforce limits within one proxy).
//!
//! Redis down: amounts keep accumulating in memory (bounded by the number of active counters,
//! not by traffic) and are written when it is back; a Redis that comes back empty gets every
//! live amount again. Meanwhile the feed says `synced: false`, one line is logged per change,
//! and nothing restarts.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use bytes::Bytes;
use ferrogate_core::config::Config;
use ferrogate_core::limits::agent;
use ferrogate_core::limits::feed::{charges, Feed};
use ferrogate_core::limits::{Amounts, LimitSpec, Metric, Tally, Window};
use ferrogate_core::usage::Record;
use serde::Serialize;

pub mod lease;
pub mod redis;

/// How often folded increments are written to Redis.
pub const FLUSH_EVERY: Duration = Duration::from_millis(100);
/// How often the global view is read back from Redis.
pub const READ_EVERY: Duration = Duration::from_millis(250);

/// One counter's bucket: (counter name, bucket number).
type BucketKey = (String, u64);
/// An index built from one snapshot version, kept with that version's name.
pub(crate) type PerVersion<T> = Mutex<Option<(String, Arc<T>)>>;

/// The index in `slot` when it was built for `version`, else `build`'s, kept for next time.
pub(crate) fn for_version<T>(slot: &PerVersion<T>, version: &str, build: impl FnOnce() -> T) -> Arc<T> {
    let mut cached = slot.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((v, index)) = cached.as_ref() {
        if v == version {
            return index.clone();
        }
    }
    let index = Arc::new(build());
    *cached = Some((version.to_string(), index.clone()));
    index
}

/// The ledger of one sidecar (one replica).
#[derive(Debug)]
pub struct Ledger {
    /// This replica's id in Redis (its own amounts are not fed back to its filter).
    pub replica: String,
    /// This replica's amounts per counter and bucket, and which changed since the last write.
    own: Mutex<Own>,
    /// The last global view.
    view: RwLock<View>,
    /// Key name → key index, for the snapshot version it was built from.
    keys: PerVersion<HashMap<String, usize>>,
    /// Whether Redis holds the shared counters.
    shared: bool,
    /// Grants of capacity from the shared counters (`POST /v1/limits/lease`).
    pub leases: lease::Leases,
}

/// This replica's amounts: absolute per bucket, so writing them to Redis (`HSET` of this
/// replica's field) is idempotent — a retried write cannot double-count, and a Redis that
/// restarted empty is repaired by writing them all again.
#[derive(Debug, Default)]
struct Own {
    amounts: HashMap<BucketKey, (Window, u64)>,
    dirty: HashSet<BucketKey>,
}

/// The last view read from Redis.
#[derive(Debug, Default, Clone)]
pub struct View {
    /// The feed for this replica's filter, serialized.
    pub feed: Bytes,
    /// Every replica's amounts per counter (current and previous bucket).
    pub totals: HashMap<String, Tally>,
    /// Whether the last read succeeded.
    pub synced: bool,
}

impl Ledger {
    /// A ledger for `replica`; `shared` when Redis holds the counters (start [`redis::run`]).
    pub fn new(replica: String, shared: bool) -> Ledger {
        Ledger::with_leases(replica, shared, lease::Leases::default())
    }

    /// A ledger whose filter admits against `leases` when they are enabled.
    pub fn with_leases(replica: String, shared: bool, leases: lease::Leases) -> Ledger {
        let feed = Feed { replica: replica.clone(), synced: !shared, counters: Vec::new(), leases: leases.enabled() };
        let feed = Bytes::from(serde_json::to_vec(&feed).unwrap_or_default());
        let view = View { feed, synced: !shared, ..View::default() };
        Ledger { replica, own: Mutex::default(), view: RwLock::new(view), keys: Mutex::default(), shared, leases }
    }

    /// Folds a stored batch of usage lines into the counters of `config`'s plans. Records
    /// that were not admitted by the limits, or whose key is no longer configured, add nothing.
    pub fn fold(&self, batch: &[u8], version: &str, config: &Config) {
        if !config.limit_plans.any {
            return;
        }
        let keys = self.key_index(version, config);
        for line in batch.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let Ok(record) = serde_json::from_slice::<Record>(line) else { continue };
            if !record.admitted {
                continue;
            }
            let key = match &record.key {
                Some(name) => match keys.get(name) {
                    Some(&i) => Some(i),
                    None => continue,
                },
                None => None,
            };
            let at = record.started_at_unix_ms.saturating_add(record.latency_ms);
            // An MCP/A2A call counts on its own plan, a model request on the key's.
            match agent::recorded(config, &record.provider, &record.model_requested) {
                Some((target, used)) => self.charge(&config.limit_plans.for_agent(key, target), used, at),
                None => {
                    let used = Amounts::model(record.usage().total_tokens(), record.cost_micro_usd);
                    self.charge(config.limit_plans.for_key(key), used, at);
                }
            }
        }
    }

    fn charge(&self, plan: &[LimitSpec], used: Amounts, at_ms: u64) {
        let mut own = self.own.lock().unwrap_or_else(PoisonError::into_inner);
        for (spec, amount) in charges(plan, used) {
            let key = (spec.counter.clone(), spec.window.bucket(at_ms));
            let slot = own.amounts.entry(key.clone()).or_insert((spec.window, 0));
            slot.1 = slot.1.saturating_add(amount);
            own.dirty.insert(key);
        }
    }

    fn key_index(&self, version: &str, config: &Config) -> Arc<HashMap<String, usize>> {
        for_version(&self.keys, version, || config.keys.iter().enumerate().map(|(i, k)| (k.name.clone(), i)).collect())
    }

    /// The amounts changed since the last write (all of them when `everything`), with their
    /// windows; buckets past their retention at `now_ms` are dropped first.
    fn take_dirty(&self, everything: bool, now_ms: u64) -> Vec<(BucketKey, Window, u64)> {
        let mut own = self.own.lock().unwrap_or_else(PoisonError::into_inner);
        own.amounts.retain(|(_, bucket), (w, _)| w.bucket(now_ms).saturating_sub(*bucket) <= 1);
        let Own { amounts, dirty } = &mut *own;
        let keys: Vec<BucketKey> = if everything { amounts.keys().cloned().collect() } else { dirty.drain().collect() };
        dirty.clear();
        keys.into_iter().filter_map(|k| amounts.get(&k).map(|&(w, a)| (k, w, a))).collect()
    }

    /// Marks amounts a failed write did not store, to be written again.
    fn mark_dirty(&self, keys: impl IntoIterator<Item = BucketKey>) {
        self.own.lock().unwrap_or_else(PoisonError::into_inner).dirty.extend(keys);
    }

    /// This replica's tallies per counter at `now_ms` (current and previous bucket).
    fn own_totals(&self, now_ms: u64) -> HashMap<String, Tally> {
        let own = self.own.lock().unwrap_or_else(PoisonError::into_inner);
        let mut totals: HashMap<String, Tally> = HashMap::new();
        for ((counter, bucket), &(window, amount)) in &own.amounts {
            add_to(totals.entry(counter.clone()).or_default(), window.bucket(now_ms), *bucket, amount);
        }
        totals
    }

    /// The feed body for this replica's filter.
    pub fn feed(&self) -> Bytes {
        self.view.read().unwrap_or_else(PoisonError::into_inner).feed.clone()
    }

    /// Whether the last read of the shared counters succeeded (always true without Redis).
    pub fn synced(&self) -> bool {
        self.view.read().unwrap_or_else(PoisonError::into_inner).synced
    }

    fn set_view(&self, view: View) {
        *self.view.write().unwrap_or_else(PoisonError::into_inner) = view;
    }

    fn mark_unsynced(&self) {
        let mut view = self.view.write().unwrap_or_else(PoisonError::into_inner);
        if !view.synced {
            return;
        }
        view.synced = false;
        if let Ok(mut feed) = serde_json::from_slice::<Feed>(&view.feed) {
            feed.synced = false;
            view.feed = Bytes::from(serde_json::to_vec(&feed).unwrap_or_default());
        }
    }

    /// Consumption of every limit of `config` (optionally one key's or one group's), at `now_ms`:
    /// the shared view when Redis answers; while it does not, the larger of the last shared
    /// view and this replica's own amounts (which keep counting), never a stale zero.
    pub fn consumption(&self, config: &Config, filter: &Filter, now_ms: u64) -> Vec<Consumption> {
        let (shared, synced) = {
            let view = self.view.read().unwrap_or_else(PoisonError::into_inner);
            (self.shared.then(|| view.totals.clone()), view.synced)
        };
        let own = (!self.shared || !synced).then(|| self.own_totals(now_ms));
        let mut seen = std::collections::HashSet::new();
        // `mcp_requests` limits are left out: most of the requests they count (`tools/list`, GET
        // streams, …) leave no usage record, which is what `used` is folded from.
        let plans = config.limit_plans.all_specs().filter(|s| s.metric != Metric::McpRequests);
        plans
            .filter(|s| filter.matches(s) && seen.insert(s.counter.as_str()))
            .map(|s| {
                let used_in = |t: &HashMap<String, Tally>| t.get(&s.counter).map_or(0, |t| t.used(s.window, now_ms));
                let used = shared.as_ref().map_or(0, used_in).max(own.as_ref().map_or(0, used_in));
                Consumption::new(s, used)
            })
            .collect()
    }
}

/// Which limits an admin query asks about.
#[derive(Debug, Default, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Filter {
    /// Only this key's own limits.
    pub key: Option<String>,
    /// Only this group's limits.
    pub group: Option<String>,
}

impl Filter {
    fn matches(&self, s: &LimitSpec) -> bool {
        use ferrogate_core::limits::Scope;
        match (&self.key, &self.group) {
            (None, None) => true,
            (Some(k), _) if s.scope == Scope::Key && &s.name == k => true,
            (_, Some(g)) if s.scope == Scope::Group && &s.name == g => true,
            _ => false,
        }
    }
}

/// One limit's consumption, as the admin API answers it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Consumption {
    /// `key`, `group`, `org`, `mcp_server` or `a2a_agent`.
    pub scope: &'static str,
    /// The key's or group's name (`""` for the org).
    pub name: String,
    /// `requests`, `tokens`, `usd` (micro-USD amounts) or `tool_calls`.
    pub metric: &'static str,
    /// `minute`, `day` or `month`.
    pub window: &'static str,
    /// The limit.
    pub limit: u64,
    /// Used in the window ending now, by every replica that reported.
    pub used: u64,
    /// What is left (0 when over).
    pub remaining: u64,
}

impl Consumption {
    fn new(s: &LimitSpec, used: u64) -> Consumption {
        Consumption {
            scope: s.scope.as_str(),
            name: s.name.clone(),
            metric: s.metric.as_str(),
            window: s.window.as_str(),
            limit: s.limit,
            used,
            remaining: s.limit.saturating_sub(used),
        }
    }
}

/// Appends the consumption gauges in Prometheus text form: `ferrogate_limit_used` and
/// `ferrogate_limit_remaining` per limit (labels scope, name, metric, window; USD amounts in
/// micro-USD), and `ferrogate_limits_store_synced` (0 while the shared counters cannot be read).
pub fn prometheus(all: &[Consumption], synced: bool, out: &mut String) {
    use std::fmt::Write;
    let _ = writeln!(
        out,
        "# HELP ferrogate_limits_store_synced 0 while the shared limit counters in Redis cannot be read, else 1.\n\
         # TYPE ferrogate_limits_store_synced gauge\nferrogate_limits_store_synced {}",
        u8::from(synced)
    );
    let help = [
        "Consumption of each configured limit in its current window (usd: micro-USD).",
        "What is left of each configured limit (0 when over; usd: micro-USD).",
    ];
    for ((name, pick), help) in [("used", 0), ("remaining", 1)].into_iter().zip(help) {
        let _ = writeln!(out, "# HELP ferrogate_limit_{name} {help}\n# TYPE ferrogate_limit_{name} gauge");
        for c in all {
            let value = if pick == 0 { c.used } else { c.remaining };
            let who = c.name.replace('\\', "\\\\").replace('"', "\\\"");
            let _ = writeln!(
                out,
                "ferrogate_limit_{name}{{scope=\"{}\",name=\"{who}\",metric=\"{}\",window=\"{}\"}} {value}",
                c.scope, c.metric, c.window
            );
        }
    }
}

/// Adds `amount` of `bucket` to a tally of the bucket `current` (ignored unless it is the
/// current or the previous one).
fn add_to(tally: &mut Tally, current: u64, bucket: u64, amount: u64) {
    tally.bucket = current;
    match current.checked_sub(bucket) {
        Some(0) => tally.current = tally.current.saturating_add(amount),
        Some(1) => tally.previous = tally.previous.saturating_add(amount),
        _ => {}
    }
}

/// The ledger for a sidecar: shared through Redis when `redis_url_env` (the configuration
/// file's `redis.url_env`, read at start) names a variable that is set (the loops run until
/// `shutdown`), else local.
pub fn start(
    redis_url_env: Option<&str>,
    replica: Option<String>,
    shutdown: tokio::sync::watch::Receiver<bool>,
) -> Arc<Ledger> {
    let replica = replica.filter(|r| !r.is_empty()).unwrap_or_else(default_replica_id);
    let url = redis_url_env.and_then(|var| {
        let url = std::env::var(var).ok().filter(|u| !u.is_empty());
        if url.is_none() {
            tracing::error!("limits: {var} is not set; limits are not shared across replicas");
        }
        url
    });
    let client = url.as_deref().and_then(|u| ::redis::Client::open(u).ok());
    let leases = client.map_or_else(lease::Leases::default, lease::Leases::new);
    let ledger = Arc::new(Ledger::with_leases(replica, url.is_some(), leases));
    if let Some(url) = url {
        tracing::info!(replica = %ledger.replica, "limits: shared across replicas through Redis");
        tokio::spawn(redis::run(ledger.clone(), url, shutdown));
    }
    ledger
}

/// A replica id unique to this process: host name, process id and start time.
pub fn default_replica_id() -> String {
    let host = std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()).unwrap_or_else(|| "host".into());
    let started = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
    format!("{host}-{}-{started}", std::process::id())
}

#[cfg(test)]
mod tests;
