//! Provider key pools: a provider with several keys (`api_keys_env`) spreads its requests over
//! them, and a key the upstream refuses is left alone for a while.
//!
//! - A 429 makes its key *rest*: for the answer's `Retry-After` (delay-seconds, up to
//!   [`MAX_REST_MS`]), else for the provider's `key_cooldown_secs`. A later 2xx from a request
//!   sent to the key once it rested clears the entry early; an answer to a request sent before
//!   the rest began (still in flight when the 429 came) says nothing about the key now.
//! - A 401 or 403 *disables* its key until the provider's key list changes (a key added,
//!   removed, replaced or reordered: the pool's [`generation`]) or the proxy restarts.
//! - [`pick`] spreads requests round-robin over the usable keys. When none is usable the
//!   request still goes out, with the key whose rest ends first (or, every key disabled, any
//!   key): the gateway fails open, as it does on a stale health view, rather than answering
//!   for the upstream. A rest without `Retry-After` is the gateway's guess, and the upstream is
//!   the authority on its own limits; its answer (a 429 with its own `Retry-After`, or a 2xx
//!   that ends the rest) reaches the client as without a pool.
//!
//! The table is shared by every VM of the proxy (the filter keeps its [`KeyTable::encode`]d
//! form in one shared-data entry, CAS-updated, as [`crate::passive`] does), so one worker's
//! 429 rests the key for all. Only troubled keys have an entry, so the table is usually empty
//! and a success on a healthy key writes nothing. Keys are named by [`fingerprint`] only: the
//! table, logs and metrics never see a key.

use sha2::{Digest, Sha256};

use crate::config::{Credential, Provider};

/// Default rest of a key that answered 429 without a usable `Retry-After` (`key_cooldown_secs`).
pub const DEFAULT_COOLDOWN_SECS: u64 = 60;
/// The longest `key_cooldown_secs`.
pub const MAX_COOLDOWN_SECS: u64 = 86_400;
/// The longest rest a `Retry-After` asks for that is honoured (a quota reset can be an hour off).
pub const MAX_REST_MS: u64 = 3_600_000;
/// Most entries kept: a bound on the shared entry's size whatever the upstreams answer.
const MAX_ENTRIES: usize = 1_024;

/// One key of a provider, ready to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolKey {
    /// The header it travels in (its `Debug` hides the value).
    pub credential: Credential,
    /// What names the key anywhere it is shown: see [`fingerprint`].
    pub fingerprint: String,
}

/// `k-` and the first 8 hex digits of the key's SHA-256: stable across restarts and replicas,
/// short enough for a metric label, and 32 bits of a digest give nothing of the key away.
pub fn fingerprint(key: &str) -> String {
    let digest = Sha256::digest(key.as_bytes());
    let mut out = String::with_capacity(10);
    out.push_str("k-");
    crate::hex::encode_into(&mut out, digest.get(..4).unwrap_or_default());
    out
}

/// A number that changes whenever the pool's fingerprints (or their order) change: a key
/// disabled under one generation is usable again under another. FNV-1a, so every VM and
/// replica computes the same one.
pub fn generation(keys: &[PoolKey]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in keys.iter().flat_map(|k| k.fingerprint.bytes().chain([b'\n'])) {
        hash = (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// What an answer can do to a table with no entries: a 429 or a 401/403 (a success only ever
/// clears an entry). [`KeyTable::record_answer`] on an empty table changes it exactly then.
pub fn answer_changes_empty_table(status: u16) -> bool {
    matches!(status, 401 | 403 | 429)
}

/// A provider's pool as [`pick`] and [`KeyTable::record_answer`] see it.
#[derive(Debug, Clone, Copy)]
pub struct Pool<'a> {
    /// Provider name.
    pub provider: &'a str,
    /// Its keys, in configuration order.
    pub keys: &'a [PoolKey],
    /// [`generation`] of `keys`.
    pub generation: u64,
    /// How long a 429 without a usable `Retry-After` rests a key.
    pub cooldown_ms: u64,
}

impl<'a> Pool<'a> {
    /// The pool of a validated provider.
    pub fn of(provider: &'a Provider) -> Pool<'a> {
        Pool {
            provider: &provider.name,
            keys: &provider.keys,
            generation: provider.key_generation,
            cooldown_ms: provider.key_cooldown_ms,
        }
    }
}

/// Why a key is left alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyState {
    /// It answered 429: not picked before this Unix ms.
    Resting {
        /// Unix ms the rest ends.
        until_ms: u64,
    },
    /// It answered 401/403: not picked while its pool has this [`generation`].
    Disabled {
        /// The pool's generation when it was disabled.
        generation: u64,
    },
}

/// One troubled key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Provider name.
    pub provider: String,
    /// The key's [`fingerprint`].
    pub fingerprint: String,
    /// Unix ms the trouble began: answers to requests sent before it are ignored.
    pub since_ms: u64,
    /// Resting or disabled.
    pub state: KeyState,
}

impl Entry {
    /// Still in force at `now_ms` for a pool of `generation`.
    fn holds(&self, generation: u64, now_ms: u64) -> bool {
        match self.state {
            KeyState::Resting { until_ms } => now_ms < until_ms,
            KeyState::Disabled { generation: g } => g == generation,
        }
    }
}

/// What [`KeyTable::record_answer`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Nothing: no write needed.
    Unchanged,
    /// The table changed (a rest extended or cleared, stale entries dropped): write it back.
    Changed,
    /// A key began to rest (write it back; counted as a `cooldown` event).
    Cooldown,
    /// A key was disabled (write it back; counted as a `disabled` event).
    Disabled,
}

impl Change {
    /// The table must be written back.
    pub fn changed(self) -> bool {
        self != Change::Unchanged
    }

    /// The event a metric counts, if any.
    pub fn event(self) -> Option<&'static str> {
        match self {
            Change::Cooldown => Some("cooldown"),
            Change::Disabled => Some("disabled"),
            Change::Unchanged | Change::Changed => None,
        }
    }
}

/// One upstream answer's head, as far as the pool cares.
#[derive(Debug, Clone, Copy)]
pub struct Answer<'a> {
    /// HTTP status.
    pub status: u16,
    /// The `Retry-After` header's value.
    pub retry_after: Option<&'a [u8]>,
    /// Unix ms the request was sent with its key (when it was picked).
    pub sent_ms: u64,
}

mod table;

pub use table::KeyTable;

/// The key `pool` should use for its next request: among the usable keys, the
/// `counter % usable`-th (a counter that goes up by one per request spreads them evenly);
/// with none usable, the one whose rest ends first, else any (see the module docs).
/// `None` only for a pool without keys.
pub fn pick(pool: &Pool<'_>, table: &KeyTable, now_ms: u64, counter: u64) -> Option<usize> {
    let n = pool.keys.len();
    if n == 0 {
        return None;
    }
    let nth = |count: usize| usize::try_from(counter % count.max(1) as u64).unwrap_or(0);
    if table.entries.is_empty() {
        return Some(nth(n));
    }
    let state = |i: usize| pool.keys.get(i).and_then(|k| table.state(pool, &k.fingerprint, now_ms));
    let usable = (0..n).filter(|&i| state(i).is_none()).count();
    if usable > 0 {
        return (0..n).filter(|&i| state(i).is_none()).nth(nth(usable));
    }
    let resting = |i: usize| match state(i) {
        Some(KeyState::Resting { until_ms }) => Some((until_ms, i)),
        _ => None,
    };
    match (0..n).filter_map(resting).min() {
        Some((_, i)) => Some(i),
        None => Some(nth(n)),
    }
}

#[cfg(test)]
mod tests;
