//! The ledger's Redis side: one hash per counter and bucket, a field per replica.
//!
//! - Write (every [`super::FLUSH_EVERY`]): for each amount of this replica that changed, in one
//!   `MULTI` transaction, `HSET fg:limit:<counter>:<bucket> <replica> <amount>` (absolute, so a
//!   retry cannot double-count), `PEXPIRE` it for the window's retention, `ZADD
//!   fg:limits:active <expiry ms> <hash>` so readers find it, and refresh this replica's marker
//!   `fg:limits:replica:<id>`. A failed transaction leaves its amounts marked for the next try;
//!   after an outage, or when the marker is gone (Redis restarted empty), every live amount is
//!   written again.
//! - Read (every [`super::READ_EVERY`]): drop expired members of `fg:limits:active`, `HGETALL`
//!   every active hash in one pipeline, and build for each counter the other replicas' tally of
//!   the current and previous bucket (the filter's feed) and every replica's (the admin view).

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use ferrogate_core::limits::feed::Feed;
use ferrogate_core::limits::Tally;
use redis::aio::MultiplexedConnection;
use tokio::sync::watch;

use ferrogate_core::limits::window_of;

use super::{add_to, Ledger, View, FLUSH_EVERY, READ_EVERY};
use crate::services::now_ms;

/// Sorted set of the active hashes, scored by expiry (Unix ms).
const ACTIVE: &str = "fg:limits:active";
/// Prefix of the per-counter, per-bucket hashes.
const PREFIX: &str = "fg:limit:";
/// Prefix of each replica's marker: present while Redis holds that replica's amounts.
const MARKER: &str = "fg:limits:replica:";
/// The marker outlives a quiet replica by this much (then it rewrites, harmlessly).
const MARKER_TTL_MS: u64 = 600_000;
/// Longest a Redis round trip may take before it counts as down.
const TIMEOUT: Duration = Duration::from_secs(1);

type RedisResult<T> = Result<T, String>;

/// Runs the write and read loops until shutdown, reconnecting as needed.
pub async fn run(ledger: std::sync::Arc<Ledger>, url: String, mut shutdown: watch::Receiver<bool>) {
    let client = match redis::Client::open(url.as_str()) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "limits: bad Redis URL; cross-replica limits are off (fail-open)");
            return;
        }
    };
    let mut link = Link { client, conn: None, rewrite: true };
    let mut up = true;
    let mut flush = tokio::time::interval(FLUSH_EVERY);
    let mut read = tokio::time::interval(READ_EVERY);
    loop {
        let result = tokio::select! {
            _ = shutdown.changed() => {
                let _ = write(&ledger, &mut link).await;
                return;
            }
            _ = flush.tick() => write(&ledger, &mut link).await,
            _ = read.tick() => read_view(&ledger, &mut link).await,
        };
        match result {
            Ok(()) if !up => {
                tracing::info!("limits: Redis reachable again; cross-replica counters in sync");
                crate::services::incidents::record("store_up", "redis", "shared limit counters in sync again");
                up = true;
            }
            Err(e) => {
                if up {
                    tracing::warn!(error = %e, "limits: Redis unreachable; filters enforce their own counts and the last global view (fail-open unless redis.fail_closed); amounts kept for Redis");
                    crate::services::incidents::record("store_down", "redis", e.to_string());
                }
                up = false;
                // Whatever comes back may have lost our amounts: write them all then.
                link.rewrite = true;
                ledger.mark_unsynced();
            }
            Ok(()) => {}
        }
    }
}

/// The connection and what the next write must cover.
struct Link {
    client: redis::Client,
    conn: Option<MultiplexedConnection>,
    /// Write every live amount, not only the changed ones (at start, after an outage, or
    /// when this replica's marker is gone: Redis restarted empty).
    rewrite: bool,
}

/// A connection, opened when there is none.
async fn connection(link: &mut Link) -> RedisResult<MultiplexedConnection> {
    if let Some(c) = &link.conn {
        return Ok(c.clone());
    }
    let c = open(&link.client, TIMEOUT).await?;
    link.conn = Some(c.clone());
    Ok(c)
}

/// A new connection to `client`, given up after `timeout`.
pub(super) async fn open(client: &redis::Client, timeout: Duration) -> RedisResult<MultiplexedConnection> {
    tokio::time::timeout(timeout, client.get_multiplexed_async_connection())
        .await
        .map_err(|_| "connect timed out".to_string())?
        .map_err(|e| e.to_string())
}

/// Runs `pipe` with a timeout; a failure drops the connection so the next call reconnects.
async fn query<T: redis::FromRedisValue>(pipe: &redis::Pipeline, link: &mut Link) -> RedisResult<T> {
    let mut c = connection(link).await?;
    let result = tokio::time::timeout(TIMEOUT, pipe.query_async::<T>(&mut c)).await;
    match result {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => {
            link.conn = None;
            Err(e.to_string())
        }
        Err(_) => {
            link.conn = None;
            Err("timed out".to_string())
        }
    }
}

/// Writes this replica's changed amounts (all of them when the link says so) in one
/// transaction; on failure they stay marked for the next write.
async fn write(ledger: &Ledger, link: &mut Link) -> RedisResult<()> {
    let now = now_ms();
    let everything = link.rewrite;
    let amounts = ledger.take_dirty(everything, now);
    let marker = format!("{MARKER}{}", ledger.replica);
    if amounts.is_empty() && !everything {
        return Ok(());
    }
    let mut pipe = redis::pipe();
    pipe.atomic();
    for ((counter, bucket), window, amount) in &amounts {
        let hash = format!("{PREFIX}{counter}:{bucket}");
        let keep = window.retention_ms();
        pipe.hset(&hash, &ledger.replica, *amount).ignore();
        pipe.pexpire(&hash, i64::try_from(keep).unwrap_or(i64::MAX)).ignore();
        pipe.zadd(ACTIVE, &hash, now.saturating_add(keep)).ignore();
    }
    pipe.cmd("SET").arg(&marker).arg(1).arg("PX").arg(MARKER_TTL_MS).ignore();
    match query::<()>(&pipe, link).await {
        Ok(()) => {
            link.rewrite = false;
            Ok(())
        }
        Err(e) => {
            ledger.mark_dirty(amounts.into_iter().map(|(k, _, _)| k));
            Err(e)
        }
    }
}

async fn read_view(ledger: &Ledger, link: &mut Link) -> RedisResult<()> {
    let now = now_ms();
    let mut pipe = redis::pipe();
    pipe.cmd("ZREMRANGEBYSCORE").arg(ACTIVE).arg("-inf").arg(now).ignore();
    pipe.cmd("ZRANGEBYSCORE").arg(ACTIVE).arg(now).arg("+inf");
    pipe.exists(format!("{MARKER}{}", ledger.replica));
    // This replica's heartbeat, and how many replicas beat recently (lease sizes).
    pipe.zadd(super::lease::REPLICAS, &ledger.replica, now).ignore();
    let gone = now.saturating_sub(super::lease::ACTIVE_MS);
    pipe.cmd("ZREMRANGEBYSCORE").arg(super::lease::REPLICAS).arg("-inf").arg(gone).ignore();
    pipe.zcard(super::lease::REPLICAS);
    let (hashes, marked, active): (Vec<String>, bool, u64) = query(&pipe, link).await?;
    ledger.leases.set_active(active);
    if !marked {
        // Redis lost this replica's amounts (restarted empty, or flushed): write them again.
        link.rewrite = true;
    }
    let mut pipe = redis::pipe();
    for h in &hashes {
        pipe.hgetall(h);
    }
    let fields: Vec<HashMap<String, u64>> = if hashes.is_empty() { Vec::new() } else { query(&pipe, link).await? };
    ledger.set_view(build_view(&ledger.replica, &hashes, &fields, now, ledger.leases.enabled()));
    Ok(())
}

/// The feed and totals from the hashes read: per counter, the current and previous bucket of
/// its window at `now_ms`, summed over other replicas (feed) and over all (totals).
pub(super) fn build_view(
    replica: &str,
    hashes: &[String],
    fields: &[HashMap<String, u64>],
    now_ms: u64,
    leases: bool,
) -> View {
    let mut others: HashMap<&str, Tally> = HashMap::new();
    let mut totals: HashMap<String, Tally> = HashMap::new();
    for (hash, by_replica) in hashes.iter().zip(fields) {
        let Some((counter, bucket)) = parse_hash(hash) else { continue };
        let Some(window) = window_of(counter) else { continue };
        let current = window.bucket(now_ms);
        if current.saturating_sub(bucket) > 1 {
            continue;
        }
        let all: u64 = by_replica.values().sum();
        let theirs: u64 = by_replica.iter().filter(|(r, _)| r.as_str() != replica).map(|(_, v)| v).sum();
        add_to(others.entry(counter).or_default(), current, bucket, theirs);
        add_to(totals.entry(counter.to_string()).or_default(), current, bucket, all);
    }
    let counters = others
        .into_iter()
        .filter(|(_, t)| t.current + t.previous > 0)
        .map(|(c, t)| (c.to_string(), t.bucket, t.current, t.previous))
        .collect();
    let feed = Feed { replica: replica.to_string(), synced: true, counters, leases };
    View { feed: Bytes::from(serde_json::to_vec(&feed).unwrap_or_default()), totals, synced: true }
}

/// `fg:limit:<counter>:<bucket>` → (counter, bucket).
fn parse_hash(hash: &str) -> Option<(&str, u64)> {
    let rest = hash.strip_prefix(PREFIX)?;
    let (counter, bucket) = rest.rsplit_once(':')?;
    Some((counter, bucket.parse().ok()?))
}
