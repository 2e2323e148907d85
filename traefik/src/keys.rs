//! Provider key pools in the middleware (policy in `ferrogate_core::keypool`): a provider with
//! several keys gets them round-robin over the usable ones, and a key its upstream answered 429
//! rests (401/403: is disabled) as in the proxy-wasm filter. Traefik's instances share no
//! memory, so the table of troubled keys is the instance's own: each instance learns a key's
//! trouble from its own answers.

use ferrogate_core::config::{Config, Credential};
use ferrogate_core::keypool::{self, Answer, Change, KeyTable, Pool};

use crate::abi::{self, Kind, Level};

/// The pooled key a request went out with.
#[derive(Clone, Copy)]
pub(crate) struct KeyPick {
    provider: usize,
    key: usize,
    sent_ms: u64,
}

/// A key of `provider`'s pool for the next request (`None` for a provider with one key or
/// none), from this instance's `table` and round-robin `counter`.
pub(crate) fn pick<'c>(
    table: &KeyTable,
    config: &'c Config,
    provider: usize,
    counter: u64,
    now_ms: u64,
) -> Option<(KeyPick, &'c Credential)> {
    let p = config.providers.get(provider).filter(|p| p.keys.len() > 1)?;
    let key = keypool::pick(&Pool::of(p), table, now_ms, counter)?;
    let credential = &p.keys.get(key)?.credential;
    Some((KeyPick { provider, key, sent_ms: now_ms }, credential))
}

/// The answer to a request sent with `pick`: its status and `Retry-After` recorded for the key
/// in `table`; a key that begins to rest or is disabled is logged by its fingerprint.
pub(crate) fn observe(table: &mut KeyTable, config: &Config, pick: KeyPick, now_ms: u64) {
    let Some(provider) = config.providers.get(pick.provider) else { return };
    let status = abi::status();
    let retry_after = abi::header(Kind::Response, "retry-after");
    let answer = Answer { status, retry_after: retry_after.as_deref(), sent_ms: pick.sent_ms };
    let change = table.record_answer(&Pool::of(provider), pick.key, &answer, now_ms);
    let Some(key) = provider.keys.get(pick.key) else { return };
    match change {
        Change::Disabled => abi::log_line(
            Level::Warn,
            &format!("ferrogate: provider {} key {}: disabled after a {status}", provider.name, key.fingerprint),
        ),
        Change::Cooldown => abi::log_line(
            Level::Info,
            &format!("ferrogate: provider {} key {}: rests after a 429", provider.name, key.fingerprint),
        ),
        Change::Changed | Change::Unchanged => {}
    }
}
