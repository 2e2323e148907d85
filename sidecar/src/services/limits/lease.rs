//! Leases: what `POST /v1/limits/lease` grants a proxy from the shared counters in Redis
//! (the filter's side is `ferrogate_core::limits::lease`).
//!
//! Each counter's bucket has a hash `fg:lease:<counter>:<bucket>` with a field per replica: the
//! capacity granted to that replica in that bucket, less what it gave back, plus what it was
//! charged for using beyond it. One Lua script ([`SCRIPT`]) per ask applies the adjustment and
//! grants `min(asked, room)`, atomically, where the room is what the sliding window leaves:
//! `limit − used(bucket) − ⌈used(bucket before) × share still in the window⌉`, and, so the
//! bucket after (leased ahead) keeps its own window whole, `limit − used(bucket) − used(bucket
//! after)`. Months do not slide: `limit − used(bucket)`. So the grants of all replicas in any
//! window never add up to more than the limit.
//!
//! An ask with a `need` (a request waits) asks exactly that; a top-up (no need) asks the
//! counter's chunk: an eighth of the limit's share per active replica to start with, doubled
//! when top-ups come less than 1 s apart and halved when they are more than 5 s apart, never
//! more than the share (`limit / active replicas`). Active replicas are those whose heartbeat
//! in `fg:limits:replicas` is under 10 s old (written with every read of the ledger).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ferrogate_core::config::Config;
use ferrogate_core::limits::lease::{Ask, Grant, LeaseAnswer, LeaseRequest};
use ferrogate_core::limits::{LimitSpec, Window};
use redis::aio::MultiplexedConnection;

use crate::services::now_ms;

/// Prefix of the per-counter, per-bucket lease hashes.
pub const PREFIX: &str = "fg:lease:";
/// Sorted set of replica heartbeats (score: Unix ms).
pub const REPLICAS: &str = "fg:limits:replicas";
/// A replica whose heartbeat is older than this is not active.
pub const ACTIVE_MS: u64 = 10_000;
/// Longest a grant may take before the answer says the store is away.
const TIMEOUT: Duration = Duration::from_millis(500);

/// Applies an adjustment and grants what the window has room for; answers the grant and what
/// the replica now holds on the bucket.
/// KEYS: the bucket's hash, the bucket before, the bucket after.
/// ARGV: replica, amount asked, limit, share weight of the bucket before (ms still in the
/// window), bucket length (ms; 0 = no slide), retention (ms), adjustment.
pub const SCRIPT: &str = r"
local function total(key)
  local sum = 0
  for _, v in ipairs(redis.call('HVALS', key)) do sum = sum + tonumber(v) end
  return sum
end
local replica, ttl = ARGV[1], ARGV[6]
local adjust = tonumber(ARGV[7])
if adjust ~= 0 then
  local mine = tonumber(redis.call('HGET', KEYS[1], replica) or '0') + adjust
  if mine < 0 then mine = 0 end
  redis.call('HSET', KEYS[1], replica, string.format('%d', mine))
  redis.call('PEXPIRE', KEYS[1], ttl)
end
local function held()
  return tonumber(redis.call('HGET', KEYS[1], replica) or '0')
end
local want, limit, len = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[5])
if want <= 0 then return {0, held()} end
local used = total(KEYS[1])
local room = limit - used
if len > 0 then
  local share = math.ceil(total(KEYS[2]) * tonumber(ARGV[4]) / len)
  room = math.min(room - share, limit - used - total(KEYS[3]))
end
local grant = math.min(want, room)
if grant <= 0 then return {0, held()} end
local now_held = redis.call('HINCRBY', KEYS[1], replica, string.format('%d', grant))
redis.call('PEXPIRE', KEYS[1], ttl)
return {grant, now_held}
";

/// [`SCRIPT`], with its digest computed once.
static GRANT: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| redis::Script::new(SCRIPT));

/// One counter's top-up size.
#[derive(Debug, Clone, Copy, Default)]
struct Sizing {
    chunk: u64,
    last_ms: u64,
}

/// The lease side of one sidecar.
#[derive(Debug, Default)]
pub struct Leases {
    client: Option<redis::Client>,
    conn: tokio::sync::Mutex<Option<MultiplexedConnection>>,
    sizing: Mutex<HashMap<String, Sizing>>,
    specs: super::PerVersion<HashMap<String, (u64, Window)>>,
    /// Replicas with a recent heartbeat (at least 1: this one).
    active: AtomicU64,
    /// Counts for `/metrics`.
    pub stats: Stats,
}

/// What the lease endpoint did, for `/metrics`.
#[derive(Debug, Default)]
pub struct Stats {
    /// Asks of waiting requests.
    pub waits: AtomicU64,
    /// Top-ups asked ahead of need.
    pub topups: AtomicU64,
    /// Asks answered with less than asked (the window is full).
    pub short: AtomicU64,
    /// Amount granted, over every counter.
    pub granted: AtomicU64,
    /// Amount given back (unused at a bucket's end, or granted too late).
    pub returned: AtomicU64,
    /// Amount charged beyond leases.
    pub charged: AtomicU64,
    /// Calls that could not reach Redis.
    pub failed: AtomicU64,
}

impl Leases {
    /// Leases taken from the Redis at `client`.
    pub fn new(client: redis::Client) -> Leases {
        Leases { client: Some(client), active: AtomicU64::new(1), ..Leases::default() }
    }

    /// Whether grants come from a shared store (else the filter counts on its own).
    pub fn enabled(&self) -> bool {
        self.client.is_some()
    }

    /// Records how many replicas are active.
    pub fn set_active(&self, n: u64) {
        self.active.store(n.max(1), Ordering::Relaxed);
    }

    /// Replicas active, as of the last heartbeat read.
    pub fn active(&self) -> u64 {
        self.active.load(Ordering::Relaxed).max(1)
    }

    /// Appends the lease series in Prometheus text form (only when leases are on):
    /// `ferrogate_lease_asks_total{kind="wait|topup"}`, `ferrogate_lease_short_total` (asks
    /// answered with less than asked), `ferrogate_lease_amount_total{kind="granted|returned|charged"}`
    /// (requests, tokens or micro-USD, summed over counters), `ferrogate_lease_failures_total`
    /// and `ferrogate_lease_active_replicas`.
    pub fn prometheus(&self, out: &mut String) {
        use std::fmt::Write;
        if !self.enabled() {
            return;
        }
        let s = &self.stats;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let _ = writeln!(out, "# HELP ferrogate_lease_asks_total Lease asks answered, by kind (a waiting request, a top-up ahead of need).\n# TYPE ferrogate_lease_asks_total counter");
        let _ = writeln!(out, "ferrogate_lease_asks_total{{kind=\"wait\"}} {}", get(&s.waits));
        let _ = writeln!(out, "ferrogate_lease_asks_total{{kind=\"topup\"}} {}", get(&s.topups));
        let _ = writeln!(out, "# HELP ferrogate_lease_short_total Asks granted less than asked: the window was full.\n# TYPE ferrogate_lease_short_total counter\nferrogate_lease_short_total {}", get(&s.short));
        let _ = writeln!(out, "# HELP ferrogate_lease_amount_total Amounts granted, given back and charged beyond leases (requests, tokens or micro-USD).\n# TYPE ferrogate_lease_amount_total counter");
        for (kind, a) in [("granted", &s.granted), ("returned", &s.returned), ("charged", &s.charged)] {
            let _ = writeln!(out, "ferrogate_lease_amount_total{{kind=\"{kind}\"}} {}", get(a));
        }
        let _ = writeln!(out, "# HELP ferrogate_lease_failures_total Lease calls that could not reach Redis.\n# TYPE ferrogate_lease_failures_total counter\nferrogate_lease_failures_total {}", get(&s.failed));
        let _ = writeln!(out, "# HELP ferrogate_lease_active_replicas Replicas with a heartbeat in the last 10 s.\n# TYPE ferrogate_lease_active_replicas gauge\nferrogate_lease_active_replicas {}", self.active());
    }

    /// Answers one `POST /v1/limits/lease` for `replica`.
    pub async fn grant(&self, replica: &str, request: &LeaseRequest, version: &str, config: &Config) -> LeaseAnswer {
        if self.client.is_none() {
            return LeaseAnswer { synced: false, grants: Vec::new() };
        }
        let specs = self.spec_index(version, config);
        let now = now_ms();
        let mut grants = Vec::new();
        for ask in &request.asks {
            let Some(&(limit, window)) = specs.get(&ask.counter) else { continue };
            let want = self.want(ask, limit, now);
            match self.run(replica, ask, want, limit, window, now).await {
                Ok((granted, held)) => {
                    self.count(ask, want, granted);
                    if ask.adjust == 0 || ask.need > 0 {
                        grants.push(Grant { counter: ask.counter.clone(), bucket: ask.bucket, granted, held });
                    }
                }
                Err(e) => {
                    self.stats.failed.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(error = %e, counter = %ask.counter, "limits: lease not granted");
                    return LeaseAnswer { synced: false, grants: Vec::new() };
                }
            }
        }
        LeaseAnswer { synced: true, grants }
    }

    fn count(&self, ask: &Ask, want: u64, granted: u64) {
        let s = &self.stats;
        if ask.need > 0 {
            s.waits.fetch_add(1, Ordering::Relaxed);
        } else if ask.adjust == 0 {
            s.topups.fetch_add(1, Ordering::Relaxed);
        }
        if granted < want {
            s.short.fetch_add(1, Ordering::Relaxed);
        }
        s.granted.fetch_add(granted, Ordering::Relaxed);
        let moved = ask.adjust.unsigned_abs();
        if ask.adjust < 0 {
            s.returned.fetch_add(moved, Ordering::Relaxed);
        } else {
            s.charged.fetch_add(moved, Ordering::Relaxed);
        }
    }

    /// What to ask the store for: a waiting request's need, a top-up's chunk, or nothing for
    /// a pure adjustment.
    fn want(&self, ask: &Ask, limit: u64, now: u64) -> u64 {
        if ask.need > 0 {
            return ask.need;
        }
        if ask.adjust != 0 {
            return 0;
        }
        let share = limit.div_ceil(self.active()).max(1);
        let base = (share / 8).max(1);
        let mut sizing = self.sizing.lock().unwrap_or_else(PoisonError::into_inner);
        // The counter's name already says its window.
        let s = sizing.entry(ask.counter.clone()).or_default();
        let gap = now.saturating_sub(s.last_ms);
        s.chunk = match s.chunk {
            0 => base,
            c if gap < 1_000 => c.saturating_mul(2),
            c if gap > 5_000 => c / 2,
            c => c,
        }
        .clamp(base, share);
        s.last_ms = now;
        s.chunk
    }

    /// Runs [`SCRIPT`] for one ask.
    async fn run(
        &self,
        replica: &str,
        ask: &Ask,
        want: u64,
        limit: u64,
        window: Window,
        now: u64,
    ) -> Result<(u64, u64), String> {
        let len = window.bucket_ms();
        let current = window.bucket(now);
        // The weight of the bucket before, at the earliest instant of the asked bucket still
        // ahead: now for the current bucket, its start for a later one (the whole of it).
        let weight = if ask.bucket <= current { window.ms_to_bucket_end(now).min(len) } else { len };
        let key = |b: u64| format!("{PREFIX}{}:{b}", ask.counter);
        let mut call = GRANT.key(key(ask.bucket));
        call.key(key(ask.bucket.saturating_sub(1))).key(key(ask.bucket.saturating_add(1)));
        call.arg(replica).arg(want).arg(limit).arg(weight).arg(len);
        call.arg(window.retention_ms()).arg(ask.adjust);
        let mut conn = self.connection().await?;
        let result = tokio::time::timeout(TIMEOUT, call.invoke_async::<(u64, u64)>(&mut conn)).await;
        match result {
            Ok(Ok(granted)) => Ok(granted),
            Ok(Err(e)) => {
                *self.conn.lock().await = None;
                Err(e.to_string())
            }
            Err(_) => {
                *self.conn.lock().await = None;
                Err("timed out".into())
            }
        }
    }

    async fn connection(&self) -> Result<MultiplexedConnection, String> {
        let mut slot = self.conn.lock().await;
        if let Some(c) = slot.as_ref() {
            return Ok(c.clone());
        }
        let client = self.client.as_ref().ok_or("no Redis")?;
        let c = super::redis::open(client, TIMEOUT).await?;
        *slot = Some(c.clone());
        Ok(c)
    }

    fn spec_index(&self, version: &str, config: &Config) -> Arc<HashMap<String, (u64, Window)>> {
        super::for_version(&self.specs, version, || {
            // Model and MCP/A2A limits alike: a counter's name says which.
            let all = config.limit_plans.all_specs();
            all.map(|s: &LimitSpec| (s.counter.clone(), (s.limit, s.window))).collect()
        })
    }
}

#[cfg(test)]
#[path = "lease_tests.rs"]
mod tests;
