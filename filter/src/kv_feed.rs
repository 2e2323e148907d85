//! The KV feed from the sidecar (`GET /v1/kv`, [`ferrogate_core::kv::feed`]): each worker VM
//! keeps its own copy of the engines' block index ([`KvIndex`]) and brings it up to date on
//! every tick by asking for the changes since its generation, so a pick reads memory of its
//! own VM and never waits on a call. An event reaches every VM's index within one tick after
//! the sidecar received it: while the configuration has a pool that publishes KV events, the
//! root ticks every [`INTERVAL_MS`] (a conversation's next turn often follows its previous
//! one within a few hundred milliseconds; an unchanged index costs a 304). Without such a pool
//! nothing is polled and the tick keeps its period.

use std::cell::RefCell;
use std::time::Duration;

use ferrogate_core::config::Config;
use ferrogate_core::kv::{KvFeed, KvIndex};
use ferrogate_core::plugin::SidecarSettings;

use crate::sidecar_call;

const CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// The tick period while a pool publishes KV events.
pub(crate) const INTERVAL_MS: u64 = 100;

/// One VM's side of the feed.
#[derive(Debug, Default)]
pub(crate) struct KvPoll {
    in_flight: Option<u32>,
    failures: sidecar_call::Failures,
}

/// Whether `config` has a pool whose endpoints publish KV events.
pub(crate) fn wanted(config: &Config) -> bool {
    config.providers.iter().any(|p| p.kv.as_ref().is_some_and(|kv| kv.sources.iter().any(Option::is_some)))
}

impl KvPoll {
    /// Once per tick: ask for the changes since the VM's generation.
    pub(crate) fn on_tick(&mut self, sidecar: &SidecarSettings, index: &RefCell<KvIndex>) {
        if self.in_flight.is_some() {
            return;
        }
        let path = match index.borrow().position() {
            Some((epoch, since)) => format!("/v1/kv?epoch={epoch}&since={since}"),
            None => "/v1/kv".to_string(),
        };
        match sidecar_call::call(sidecar, "GET", &path, &[], None, CALL_TIMEOUT) {
            Ok(token) => self.in_flight = Some(token),
            Err(e) => self.failed(&format!("cannot call cluster {:?}: {e:?}", sidecar.cluster)),
        }
    }

    /// Whether `token` is this feed's call in flight.
    pub(crate) fn is_waiting_for(&self, token: u32) -> bool {
        self.in_flight == Some(token)
    }

    /// Handles an answer.
    pub(crate) fn on_response(&mut self, status: Option<u16>, body: Option<Vec<u8>>, index: &RefCell<KvIndex>) {
        self.in_flight = None;
        match (status, body) {
            (Some(304), _) => self.failures.reset(),
            (Some(200), Some(body)) => match KvFeed::decode(&body) {
                Ok(feed) => {
                    self.failures.reset();
                    index.borrow_mut().apply(&feed);
                }
                Err(e) => self.failed(&format!("unreadable answer: {e}")),
            },
            (other, _) => self.failed(&format!("sidecar answered {other:?}")),
        }
    }

    fn failed(&mut self, what: &str) {
        self.failures.record("KV feed", what, "; keeping the last index");
    }
}
