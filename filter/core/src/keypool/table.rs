//! [`KeyTable`]: the troubled keys of every pool, in the text form shared between VMs.

use super::{Answer, Change, Entry, KeyState, Pool, MAX_ENTRIES, MAX_REST_MS};

/// Every troubled key of every provider.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyTable {
    /// The entries, in no particular order.
    pub entries: Vec<Entry>,
}

impl KeyTable {
    /// Reads the shared form (lines `provider fingerprint since_ms rest <until_ms>` or
    /// `provider fingerprint since_ms off <generation>`); unreadable lines are skipped, and
    /// lines past [`MAX_ENTRIES`] are dropped.
    pub fn parse(bytes: &[u8]) -> KeyTable {
        let text = std::str::from_utf8(bytes).unwrap_or_default();
        KeyTable { entries: text.lines().filter_map(parse_line).take(MAX_ENTRIES).collect() }
    }

    /// The shared form.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = String::new();
        for e in &self.entries {
            let (word, value) = match e.state {
                KeyState::Resting { until_ms } => ("rest", until_ms),
                KeyState::Disabled { generation } => ("off", generation),
            };
            out.push_str(&format!("{} {} {} {word} {value}\n", e.provider, e.fingerprint, e.since_ms));
        }
        out.into_bytes()
    }

    /// Why the key `fingerprint` of `pool` is left alone at `now_ms`; `None` when it is usable
    /// (no entry, a rest that ended, or a disabling under another generation).
    pub fn state(&self, pool: &Pool<'_>, fingerprint: &str, now_ms: u64) -> Option<KeyState> {
        let e = self.entries.iter().find(|e| e.provider == pool.provider && e.fingerprint == fingerprint)?;
        e.holds(pool.generation, now_ms).then_some(e.state)
    }

    /// Records the answer to a request sent with key `key` of `pool`: a 429 rests the key, a
    /// 401/403 disables it, a 2xx to a request sent since its trouble began clears it (see the
    /// module docs). Entries that no longer hold (ended rests, disablings under another
    /// generation, keys no longer in the pool) are dropped on the way.
    pub fn record_answer(&mut self, pool: &Pool<'_>, key: usize, answer: &Answer<'_>, now_ms: u64) -> Change {
        let Some(fingerprint) = pool.keys.get(key).map(|k| k.fingerprint.as_str()) else {
            return Change::Unchanged;
        };
        let before = self.entries.len();
        self.entries.retain(|e| keep(e, pool, now_ms));
        let pruned = if self.entries.len() == before { Change::Unchanged } else { Change::Changed };
        let at = self.entries.iter().position(|e| e.provider == pool.provider && e.fingerprint == fingerprint);
        let change = match answer.status {
            429 => self.rest(pool, fingerprint, at, rest_ms(pool, answer.retry_after), now_ms),
            401 | 403 => self.disable(pool, fingerprint, at, now_ms),
            200..=299 => self.clear(at, answer.sent_ms),
            _ => Change::Unchanged,
        };
        if change == Change::Unchanged {
            pruned
        } else {
            change
        }
    }

    /// Rests the key for `rest_ms` from now, or longer if it rests longer already; a disabled
    /// key stays disabled.
    fn rest(&mut self, pool: &Pool<'_>, fingerprint: &str, at: Option<usize>, rest_ms: u64, now_ms: u64) -> Change {
        let until_ms = now_ms.saturating_add(rest_ms);
        match at.and_then(|i| self.entries.get_mut(i)) {
            Some(Entry { state: KeyState::Disabled { .. }, .. }) => Change::Unchanged,
            Some(Entry { state: KeyState::Resting { until_ms: until }, .. }) if *until >= until_ms => Change::Unchanged,
            Some(e) => {
                // Answers to requests in flight when it began: the rest is extended, not begun.
                e.state = KeyState::Resting { until_ms };
                Change::Changed
            }
            None => self.insert(pool, fingerprint, now_ms, KeyState::Resting { until_ms }, Change::Cooldown),
        }
    }

    /// Disables the key under the pool's generation (a resting one too).
    fn disable(&mut self, pool: &Pool<'_>, fingerprint: &str, at: Option<usize>, now_ms: u64) -> Change {
        let state = KeyState::Disabled { generation: pool.generation };
        match at.and_then(|i| self.entries.get_mut(i)) {
            Some(e) if e.state == state => Change::Unchanged,
            Some(e) => {
                *e = Entry { since_ms: now_ms, state, ..e.clone() };
                Change::Disabled
            }
            None => self.insert(pool, fingerprint, now_ms, state, Change::Disabled),
        }
    }

    /// A success: the key works, unless the request was sent before its trouble began.
    fn clear(&mut self, at: Option<usize>, sent_ms: u64) -> Change {
        match at {
            Some(i) if self.entries.get(i).is_some_and(|e| sent_ms >= e.since_ms) => {
                self.entries.swap_remove(i);
                Change::Changed
            }
            _ => Change::Unchanged,
        }
    }

    /// A new entry; nothing when the table is full.
    fn insert(&mut self, pool: &Pool<'_>, fingerprint: &str, now_ms: u64, state: KeyState, change: Change) -> Change {
        if self.entries.len() >= MAX_ENTRIES {
            return Change::Unchanged;
        }
        let (provider, fingerprint) = (pool.provider.to_string(), fingerprint.to_string());
        self.entries.push(Entry { provider, fingerprint, since_ms: now_ms, state });
        change
    }
}

/// How long a 429 rests its key: the `Retry-After` delay-seconds (up to [`MAX_REST_MS`]), else
/// the pool's cooldown (no header, `0`, an HTTP-date: nothing usable without a clock).
fn rest_ms(pool: &Pool<'_>, retry_after: Option<&[u8]>) -> u64 {
    match retry_after.and_then(crate::failover::retry_after_ms) {
        Some(ms) if ms > 0 => ms.min(MAX_REST_MS),
        _ => pool.cooldown_ms,
    }
}

/// Whether `e` is still worth keeping: entries of other providers while their rest runs (their
/// disablings cannot be judged here and stay), and `pool`'s own while they hold for a key it has.
fn keep(e: &Entry, pool: &Pool<'_>, now_ms: u64) -> bool {
    if e.provider != pool.provider {
        return match e.state {
            KeyState::Resting { until_ms } => now_ms < until_ms,
            KeyState::Disabled { .. } => true,
        };
    }
    e.holds(pool.generation, now_ms) && pool.keys.iter().any(|k| k.fingerprint == e.fingerprint)
}

fn parse_line(line: &str) -> Option<Entry> {
    let mut it = line.split(' ');
    let (provider, fingerprint) = (it.next()?.to_string(), it.next()?.to_string());
    let since_ms = it.next()?.parse().ok()?;
    let state = match (it.next()?, it.next()?.parse().ok()?) {
        ("rest", until_ms) => KeyState::Resting { until_ms },
        ("off", generation) => KeyState::Disabled { generation },
        _ => return None,
    };
    Some(Entry { provider, fingerprint, since_ms, state })
}
