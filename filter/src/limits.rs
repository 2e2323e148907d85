//! Limit counters in proxy-wasm shared data, so every worker VM of the proxy counts together.
//!
//! Each update reads the counter with its CAS token, applies the change and writes it back
//! under that token, retrying when another VM got there first: exact under concurrency. A
//! counter that does not exist yet is created with a CAS token no entry can have (Envoy
//! creates an absent key whatever the token, and refuses a present key whose token differs),
//! so two VMs creating it at once cannot both succeed. If the host keeps refusing, the update
//! gives up after [`MAX_TRIES`] and the request goes through (fail-open, logged).

use ferrogate_core::limits::{Counter, CounterStore};
use proxy_wasm::hostcalls;
use proxy_wasm::types::Status;

/// CAS retries before giving up on one counter.
const MAX_TRIES: usize = 64;
/// A CAS token for "this key must not exist yet" (Envoy's tokens count up from 1).
const ABSENT: u32 = u32::MAX;

/// The proxy's shared data, as a [`CounterStore`].
pub(crate) struct SharedCounters;

impl CounterStore for SharedCounters {
    fn update<E>(&mut self, key: &str, f: &mut dyn FnMut(&mut Counter) -> Result<(), E>) -> Result<(), E> {
        for _ in 0..MAX_TRIES {
            let (bytes, cas) = hostcalls::get_shared_data(key).unwrap_or_default();
            let mut counter = Counter::decode(bytes.as_deref().unwrap_or_default());
            f(&mut counter)?;
            let token = if bytes.is_some() { cas } else { Some(ABSENT) };
            match hostcalls::set_shared_data(key, Some(&counter.encode()), token) {
                Ok(()) => return Ok(()),
                Err(Status::CasMismatch) => continue,
                Err(e) => {
                    log::warn!("limit counter {key} not updated: {e:?}");
                    return Ok(());
                }
            }
        }
        log::warn!("limit counter {key}: {MAX_TRIES} concurrent updates in a row; this request is not counted");
        Ok(())
    }
}
