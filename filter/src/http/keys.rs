//! The filter's side of provider key pools (policy in `ferrogate_core::keypool`).
//!
//! - Routing: a request to a provider with more than one key takes its key from the pool
//!   ([`keypool::pick`], round-robin by this VM's counter) over the shared table of troubled
//!   keys ([`KEYS_KEY`], read once). The header carries that key instead of the decision's
//!   (the provider's first key), and the stream remembers which key it was and when it went.
//! - Answer: its status and `Retry-After` are recorded for that key, CAS-updated like passive
//!   health, written only when the table changes (with an empty table at the pick, only a
//!   429, 401 or 403 reads it again). A key that begins to rest or is disabled counts in
//!   `ferrogate.provider_key_events_total` and is logged, named by its fingerprint only.
//! - A pooled key's 429 is the key's, not the endpoint's: passive health does not count it,
//!   or one key's rate limit would park the provider for every key.

use std::sync::atomic::{AtomicU64, Ordering};

use ferrogate_core::config::{Config, Credential};
use ferrogate_core::keypool::{self, Answer, Change, KeyTable, Pool};
use ferrogate_core::route::RouteDecision;
use proxy_wasm::hostcalls;
use proxy_wasm::traits::HttpContext;
use proxy_wasm::types::Status;

use super::Stream;

/// Shared-data key of the table of troubled pooled keys.
pub(crate) const KEYS_KEY: &str = "ferrogate.keys";
/// CAS attempts before an update is given up (another VM keeps writing the entry).
const CAS_TRIES: usize = 4;

/// This VM's count of pooled requests, for the round-robin. A VM runs on one thread; the
/// atomic is only what a `static` needs.
static ROTATION: AtomicU64 = AtomicU64::new(0);

/// The pooled key a request went out with.
#[derive(Clone, Copy)]
pub(crate) struct KeyPick {
    /// Index into the stream's config's providers.
    provider: usize,
    /// Index into that provider's keys.
    key: usize,
    /// Unix ms of the pick (the request leaves right after).
    sent_ms: u64,
    /// The table had no entries at the pick.
    table_empty: bool,
}

impl Stream {
    /// Sets the upstream credential header: a key of the provider's pool when it has several,
    /// else the decision's.
    pub(super) fn set_credential(&mut self, d: &RouteDecision<'_>) {
        let config = self.config.clone();
        let pooled = config.as_deref().and_then(|c| self.pick_key(c, d.provider_index));
        if let Some(cred) = pooled.or(d.credential) {
            self.set_http_request_header(cred.name, Some(&cred.value));
        }
    }

    /// Picks a key of `provider`'s pool and remembers it; `None` for a provider with one key
    /// or none.
    fn pick_key<'c>(&mut self, config: &'c Config, provider: usize) -> Option<&'c Credential> {
        let p = config.providers.get(provider).filter(|p| p.keys.len() > 1)?;
        let bytes = hostcalls::get_shared_data(KEYS_KEY).ok().and_then(|(b, _)| b).unwrap_or_default();
        let table = KeyTable::parse(&bytes);
        // The routing callback's start is now enough for rests counted in seconds.
        let now_ms = self.callback_start_ns / 1_000_000;
        let counter = ROTATION.fetch_add(1, Ordering::Relaxed);
        let key = keypool::pick(&Pool::of(p), &table, now_ms, counter)?;
        self.key_pick = Some(KeyPick { provider, key, sent_ms: now_ms, table_empty: table.entries.is_empty() });
        p.keys.get(key).map(|k| &k.credential)
    }

    /// An upstream answer's head: its pooled key learns from it, then passive health
    /// (`Stream::observe_answer`), which a pooled key's 429 does not concern.
    pub(super) fn observe_answers(&mut self, status: u16, retry_after: Option<&[u8]>, abandoned: bool) {
        self.observe_key_answer(status, retry_after);
        let upstream = self.attempt.upstream;
        if status == 429 && self.key_pick.is_some() {
            // Without an upstream, passive health records nothing (the abandoned flag is kept).
            self.attempt.upstream = None;
        }
        self.observe_answer(status, retry_after, abandoned);
        self.attempt.upstream = upstream;
    }

    fn observe_key_answer(&mut self, status: u16, retry_after: Option<&[u8]>) {
        // The filter's own answer (a refusal after routing) says nothing about the key.
        let Some(pick) = self.key_pick.filter(|_| self.local_status.is_none()) else { return };
        if pick.table_empty && !keypool::answer_changes_empty_table(status) {
            return;
        }
        let Some(config) = self.config.clone() else { return };
        let Some(provider) = config.providers.get(pick.provider) else { return };
        let answer = Answer { status, retry_after, sent_ms: pick.sent_ms };
        let now_ms = self.callback_start_ns / 1_000_000;
        let change = record(&Pool::of(provider), pick.key, &answer, now_ms);
        let (Some(event), Some(key)) = (change.event(), provider.keys.get(pick.key)) else { return };
        self.shared.metrics.borrow_mut().key_event(&provider.name, &key.fingerprint, event);
        if change == Change::Disabled {
            log::warn!(
                "provider {} key {}: disabled after a {status}; it is used again once the provider's keys change",
                provider.name,
                key.fingerprint
            );
        } else {
            log::info!("provider {} key {}: rests after a 429", provider.name, key.fingerprint);
        }
    }
}

/// Records `answer` in the shared table; what changed, once written (`Unchanged` when the
/// write was given up).
fn record(pool: &Pool<'_>, key: usize, answer: &Answer<'_>, now_ms: u64) -> Change {
    for _ in 0..CAS_TRIES {
        let Ok((bytes, cas)) = hostcalls::get_shared_data(KEYS_KEY) else { return Change::Unchanged };
        let mut table = KeyTable::parse(bytes.as_deref().unwrap_or_default());
        let change = table.record_answer(pool, key, answer, now_ms);
        if !change.changed() {
            return change;
        }
        match hostcalls::set_shared_data(KEYS_KEY, Some(&table.encode()), cas) {
            Err(Status::CasMismatch) => continue,
            Err(e) => {
                log::debug!("key pool state not shared: {e:?}");
                return Change::Unchanged;
            }
            Ok(()) => return change,
        }
    }
    Change::Unchanged
}
