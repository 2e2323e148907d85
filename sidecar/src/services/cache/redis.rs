//! The response cache's Redis side: every operation bounded, behind a breaker.
//!
//! A lookup sits on a request's path, so it must stay cheap when Redis is slow or gone: the
//! connection is made at most [`CONNECT_TIMEOUT`], a command waits at most [`OP_TIMEOUT`],
//! and after a failure the [`Breaker`] skips Redis for [`BREAK_FOR`] (lookups miss at once,
//! stores are refused at once). Then one call probes it again while the others keep skipping.
//! An outage is logged once (warn) and its end once (info). Admin operations (purges, counts)
//! always try, with [`BULK_TIMEOUT`] per command: they are rare and want the truth.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;

/// Longest wait for a new connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(100);
/// Longest wait for a lookup's or a store's command.
pub const OP_TIMEOUT: Duration = Duration::from_millis(100);
/// How long Redis is skipped after a failure.
pub const BREAK_FOR: Duration = Duration::from_secs(1);
/// Longest wait for one command of a purge or a count (admin API).
pub const BULK_TIMEOUT: Duration = Duration::from_secs(2);
/// Keys asked per `SCAN` step, entries deleted per `DEL`.
const BATCH: usize = 500;

/// Stores an entry and indexes it under its model and scope, on Redis's own clock (so
/// sidecars with skewed clocks agree): each index is a sorted set scored by the entry's expiry
/// (Unix ms), pruned of expired members on every store so it stays as large as what is live,
/// and kept at least as long as the entry.
/// KEYS: entry, model index, scope index. ARGV: bytes, ttl seconds, digest.
const PUT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('SET', KEYS[1], ARGV[1], 'EX', ttl)
for i = 2, 3 do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
  redis.call('ZADD', KEYS[i], now + ttl * 1000, ARGV[3])
  if redis.call('TTL', KEYS[i]) < ttl then redis.call('EXPIRE', KEYS[i], ttl) end
end
return 1
";

/// Moves an index aside (KEYS[1] → KEYS[2]) so stores made during the purge start a new one;
/// the moved copy expires in an hour should the purge be interrupted. 1 when there was one.
const DETACH: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('RENAME', KEYS[1], KEYS[2])
redis.call('EXPIRE', KEYS[2], 3600)
return 1
";

/// Why a Redis operation was not done.
#[derive(Debug, thiserror::Error)]
pub enum RedisError {
    /// The served configuration names no Redis, or its variable is unset.
    #[error("no Redis: {0}")]
    NotConfigured(String),
    /// Skipped: a recent operation failed (the breaker is open).
    #[error("Redis skipped after a recent failure")]
    Skipped,
    /// Redis refused, timed out or could not be reached.
    #[error("Redis: {0}")]
    Failed(String),
}

/// Opens after a failure for [`BREAK_FOR`]; then lets one caller probe.
#[derive(Debug)]
pub struct Breaker {
    /// Milliseconds since `base` until which Redis is skipped; 0 while closed.
    open_until: AtomicU64,
    /// Whether an outage is under way (logged once at its start and once at its end).
    down: AtomicBool,
    base: Instant,
}

impl Default for Breaker {
    fn default() -> Self {
        Breaker { open_until: AtomicU64::new(0), down: AtomicBool::new(false), base: Instant::now() }
    }
}

impl Breaker {
    fn now(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX).saturating_add(1)
    }

    /// Whether this call may use Redis: always while closed; once open, only the first call
    /// after [`BREAK_FOR`] (it probes, and the others skip for another period meanwhile).
    pub fn allow(&self) -> bool {
        let until = self.open_until.load(Ordering::Relaxed);
        if until == 0 {
            return true;
        }
        let now = self.now();
        let later = now.saturating_add(duration_ms(BREAK_FOR));
        now >= until && self.open_until.compare_exchange(until, later, Ordering::Relaxed, Ordering::Relaxed).is_ok()
    }

    /// Whether Redis is being skipped now.
    pub fn is_open(&self) -> bool {
        self.open_until.load(Ordering::Relaxed) > self.now()
    }

    fn succeeded(&self) {
        self.open_until.store(0, Ordering::Relaxed);
        if self.down.swap(false, Ordering::Relaxed) {
            tracing::info!("response cache: Redis reachable again");
        }
    }

    fn failed(&self, error: &str) {
        self.open_until.store(self.now().saturating_add(duration_ms(BREAK_FOR)), Ordering::Relaxed);
        if !self.down.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                error,
                "response cache: Redis unreachable; lookups miss and stores are refused, retrying every second"
            );
        }
    }
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The client for one URL and its connection, once made.
struct Link {
    url: String,
    client: redis::Client,
    conn: Option<MultiplexedConnection>,
}

/// Entries and indexes in Redis, under one key prefix.
pub struct RedisCache {
    prefix: String,
    link: tokio::sync::Mutex<Option<Link>>,
    /// Shared by every operation of this sidecar.
    pub breaker: Breaker,
    put: redis::Script,
    detach: redis::Script,
}

impl std::fmt::Debug for RedisCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisCache").field("prefix", &self.prefix).field("breaker", &self.breaker).finish()
    }
}

/// Whether a call goes through the breaker (request path) or always tries (admin).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Lookups and stores: skipped while the breaker is open, [`OP_TIMEOUT`] per command.
    Hot,
    /// Purges and counts: always tried, [`BULK_TIMEOUT`] per command.
    Admin,
}

impl RedisCache {
    /// Keys under `prefix` (`ferrogate:cache:` in service; tests use one of their own).
    pub fn new(prefix: &str) -> RedisCache {
        RedisCache {
            prefix: prefix.to_string(),
            link: tokio::sync::Mutex::new(None),
            breaker: Breaker::default(),
            put: redis::Script::new(PUT),
            detach: redis::Script::new(DETACH),
        }
    }

    /// The entry key of `digest`.
    pub fn entry_key(&self, digest: &str) -> String {
        format!("{}e:{digest}", self.prefix)
    }

    /// The index of a model's entries (its name in hex: any name is a safe key).
    pub fn model_index(&self, model: &str) -> String {
        format!("{}m:{}", self.prefix, hex::encode(model))
    }

    /// The index of a scope's entries (`key:<name>`, `group:<name>`, `global`, in hex).
    pub fn scope_index(&self, scope: &str) -> String {
        format!("{}s:{}", self.prefix, hex::encode(scope))
    }

    /// The stored bytes of `digest`, `None` when absent.
    ///
    /// # Errors
    /// Redis is skipped, unreachable or slow.
    pub async fn get(&self, url: &str, digest: &str) -> Result<Option<Vec<u8>>, RedisError> {
        let mut cmd = redis::cmd("GET");
        cmd.arg(self.entry_key(digest));
        self.run(url, Mode::Hot, |mut c| async move { cmd.query_async(&mut c).await }).await
    }

    /// Stores `bytes` under `digest` for `ttl_secs`, indexed under `model` and `scope`.
    ///
    /// # Errors
    /// Redis is skipped, unreachable or slow.
    pub async fn put(
        &self,
        url: &str,
        digest: &str,
        bytes: &[u8],
        ttl_secs: u64,
        (model, scope): (&str, &str),
    ) -> Result<(), RedisError> {
        let mut invocation = self.put.prepare_invoke();
        invocation.key(self.entry_key(digest)).key(self.model_index(model)).key(self.scope_index(scope));
        invocation.arg(bytes).arg(ttl_secs).arg(digest);
        let run = |mut c: MultiplexedConnection| async move { invocation.invoke_async::<i64>(&mut c).await };
        self.run(url, Mode::Hot, run).await.map(|_| ())
    }

    /// Deletes every entry the indexes name (and the indexes); the entries deleted.
    ///
    /// # Errors
    /// Redis is unreachable or slow (what was deleted before stays deleted).
    pub async fn purge_indexes(&self, url: &str, indexes: &[String]) -> Result<u64, RedisError> {
        let mut deleted = 0;
        for index in indexes {
            let aside = format!("{}purging:{:016x}", self.prefix, rand::random::<u64>());
            let mut invocation = self.detach.prepare_invoke();
            invocation.key(index).key(&aside);
            let run = |mut c: MultiplexedConnection| async move { invocation.invoke_async::<i64>(&mut c).await };
            if self.run(url, Mode::Admin, run).await? == 1 {
                deleted += self.drain(url, &aside).await?;
            }
        }
        Ok(deleted)
    }

    /// Pops the digests of a detached index in batches and deletes their entries.
    async fn drain(&self, url: &str, aside: &str) -> Result<u64, RedisError> {
        let mut deleted = 0;
        loop {
            let mut pop = redis::cmd("ZPOPMIN");
            pop.arg(aside).arg(BATCH);
            let popped: Vec<(String, f64)> =
                self.run(url, Mode::Admin, |mut c| async move { pop.query_async(&mut c).await }).await?;
            if popped.is_empty() {
                return Ok(deleted);
            }
            let keys: Vec<String> = popped.iter().map(|(digest, _)| self.entry_key(digest)).collect();
            deleted += self.delete(url, keys).await?;
        }
    }

    async fn delete(&self, url: &str, keys: Vec<String>) -> Result<u64, RedisError> {
        if keys.is_empty() {
            return Ok(0);
        }
        let mut del = redis::cmd("DEL");
        del.arg(keys);
        self.run(url, Mode::Admin, |mut c| async move { del.query_async(&mut c).await }).await
    }

    /// Deletes every key under the prefix (`SCAN` + `DEL`); the entries among them.
    ///
    /// # Errors
    /// Redis is unreachable or slow (what was deleted before stays deleted).
    pub async fn purge_all(&self, url: &str) -> Result<u64, RedisError> {
        let entry = format!("{}e:", self.prefix);
        let mut cursor = 0u64;
        let mut deleted = 0;
        loop {
            let (next, keys) = self.scan(url, cursor, &format!("{}*", self.prefix)).await?;
            let (entries, others): (Vec<String>, Vec<String>) = keys.into_iter().partition(|k| k.starts_with(&entry));
            deleted += self.delete(url, entries).await?;
            self.delete(url, others).await?;
            if next == 0 {
                return Ok(deleted);
            }
            cursor = next;
        }
    }

    /// Entries in Redis, counted with `SCAN`; at most `cap` (then `false`: the count stopped).
    ///
    /// # Errors
    /// Redis is unreachable or slow.
    pub async fn count(&self, url: &str, cap: u64) -> Result<(u64, bool), RedisError> {
        let pattern = format!("{}e:*", self.prefix);
        let (mut cursor, mut count) = (0u64, 0u64);
        loop {
            let (next, keys) = self.scan(url, cursor, &pattern).await?;
            count += keys.len() as u64;
            if next == 0 {
                return Ok((count, true));
            }
            if count >= cap {
                return Ok((count, false));
            }
            cursor = next;
        }
    }

    async fn scan(&self, url: &str, cursor: u64, pattern: &str) -> Result<(u64, Vec<String>), RedisError> {
        let mut scan = redis::cmd("SCAN");
        scan.arg(cursor).arg("MATCH").arg(pattern).arg("COUNT").arg(BATCH);
        self.run(url, Mode::Admin, |mut c| async move { scan.query_async(&mut c).await }).await
    }

    /// Runs `op` on a connection within the mode's time bound, through the breaker for
    /// [`Mode::Hot`]; a failure drops the connection (the next call reconnects) and opens the
    /// breaker, a success closes it.
    async fn run<T, F, Fut>(&self, url: &str, mode: Mode, op: F) -> Result<T, RedisError>
    where
        F: FnOnce(MultiplexedConnection) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        if mode == Mode::Hot && !self.breaker.allow() {
            return Err(RedisError::Skipped);
        }
        let timeout = if mode == Mode::Hot { OP_TIMEOUT } else { BULK_TIMEOUT };
        let result = match self.connection(url).await {
            Ok(c) => match tokio::time::timeout(timeout, op(c)).await {
                Ok(Ok(v)) => Ok(v),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err(format!("no answer within {} ms", timeout.as_millis())),
            },
            Err(e) => Err(e),
        };
        match result {
            Ok(v) => {
                self.breaker.succeeded();
                Ok(v)
            }
            Err(e) => {
                self.drop_connection().await;
                self.breaker.failed(&e);
                Err(RedisError::Failed(e))
            }
        }
    }

    /// The connection to `url`, made (within [`CONNECT_TIMEOUT`]) when there is none or the
    /// URL changed.
    async fn connection(&self, url: &str) -> Result<MultiplexedConnection, String> {
        let mut link = self.link.lock().await;
        if link.as_ref().is_none_or(|l| l.url != url) {
            let client = redis::Client::open(url).map_err(|e| format!("bad Redis URL: {e}"))?;
            *link = Some(Link { url: url.to_string(), client, conn: None });
        }
        let Some(link) = link.as_mut() else { return Err("no Redis link".to_string()) };
        if let Some(c) = &link.conn {
            return Ok(c.clone());
        }
        let opened = tokio::time::timeout(CONNECT_TIMEOUT, link.client.get_multiplexed_async_connection()).await;
        let conn = match opened {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return Err(e.to_string()),
            Err(_) => return Err(format!("no connection within {} ms", CONNECT_TIMEOUT.as_millis())),
        };
        link.conn = Some(conn.clone());
        Ok(conn)
    }

    async fn drop_connection(&self) {
        if let Some(link) = self.link.lock().await.as_mut() {
            link.conn = None;
        }
    }
}
