//! The filter's side of failover and passive health (policy in `ferrogate_core::failover` and
//! `ferrogate_core::passive`).
//!
//! - Each attempt of a request is a stream of its own. Under `host_failover` (`ferrogate
//!   serve`) the host says which targets earlier attempts tried (`x-ferrogate-tried`); the
//!   balancer picks among the others, then among the fallbacks' targets, and the released
//!   headers tell the host what this attempt tried and whether a retry could reach anything
//!   untried (`x-ferrogate-failover: more`).
//! - Every routed answer counts for passive health: the table of troubled endpoints lives in
//!   shared data ([`PASSIVE_KEY`]), read once per routed request and CAS-updated only when an
//!   answer changes it (a failure, a 429/503 `Retry-After` pause, or the first success after
//!   failures).
//! - A later attempt (`x-ferrogate-attempt` > 1) reserves tokens and cost on the limits but is
//!   not counted as another request: the client request was counted at its first attempt.
//! - An attempt the host abandons for a retry writes no usage record (the client request gets
//!   one, for its final attempt) and counts in `ferrogate.failovers_total`.

use ferrogate_core::balance::Routing;
use ferrogate_core::config::Config;
use ferrogate_core::failover;
use ferrogate_core::passive::{self, PassiveTable};
use ferrogate_core::usage::Usage;
use proxy_wasm::hostcalls;
use proxy_wasm::traits::HttpContext;
use proxy_wasm::types::Status;

use super::Stream;

/// Shared-data key of the passive health table.
pub(crate) const PASSIVE_KEY: &str = "ferrogate.passive";
/// CAS attempts before an update is given up (another VM keeps writing the entry).
const CAS_TRIES: usize = 4;

/// One stream's failover state.
#[derive(Default)]
pub(crate) struct Attempt {
    /// Target ids earlier attempts of this client request tried.
    pub(super) tried: Vec<String>,
    /// Provider and pool endpoint (indices into the stream's config; no endpoint: the
    /// provider's authority) this attempt went to (set when routed), for passive health.
    pub(super) upstream: Option<(usize, Option<usize>)>,
    /// The host abandoned this attempt's answer to retry elsewhere.
    pub(super) abandoned: bool,
    /// The passive health table had no entries when this attempt was routed.
    pub(super) healthy_at_pick: bool,
    /// A later attempt of a client request (its first one was admitted by the limits): it is
    /// not counted as another request.
    pub(super) replay: bool,
    /// Attempts of this client request before this one (the host's attempt number less one;
    /// `tried` also holds this attempt once announced, so it cannot count them).
    pub(super) earlier: u32,
}

impl Stream {
    fn host_failover(&self) -> bool {
        self.shared.plugin.as_ref().is_some_and(|p| p.host_failover)
    }

    /// Takes the host's list of tried targets and attempt number (both ignored unless the host
    /// is trusted for them: `ferrogate serve` drops clients' copies, Envoy would pass them on,
    /// and a client must not skip its request count by calling itself a replay).
    pub(super) fn take_failover(&mut self, tried: Option<&str>, attempt: Option<u32>) {
        if !self.host_failover() {
            return;
        }
        if let Some(tried) = tried {
            self.attempt.tried = failover::parse_tried(tried).into_iter().map(str::to_string).collect();
        }
        self.attempt.replay = attempt.is_some_and(|n| n > 1);
        self.attempt.earlier = attempt.map_or(0, |n| n.saturating_sub(1));
    }

    /// The slots of `config.models[model]` earlier attempts tried (empty on a first attempt).
    pub(super) fn excluded(tried: &[String], config: &Config, model: usize, slots: usize) -> Vec<usize> {
        let Some(m) = config.models.get(model).filter(|_| !tried.is_empty()) else { return Vec::new() };
        let mut slots: Vec<usize> =
            tried.iter().filter_map(|id| failover::tried_slot(id, &m.name)).filter(|&s| s < slots).collect();
        slots.sort_unstable();
        slots.dedup();
        slots
    }

    /// After the pick of `model`'s `slot`: when a retry could reach anything untried, the
    /// released headers say so (`x-ferrogate-failover: more`) and carry the tried list with this
    /// attempt in it (host failover only). Without anything left — one target, no fallbacks,
    /// the usual case — the host never retries, so nothing is written and nothing allocated.
    pub(super) fn announce(&mut self, routing: &Routing, config: &Config, model: usize, slot: usize, now_ms: u64) {
        if !self.host_failover() {
            return;
        }
        let Some(name) = config.models.get(model).map(|m| m.name.as_str()) else { return };
        // The host strips clients' copies; a replay's own number must not go upstream.
        if self.attempt.replay {
            self.set_http_request_header(failover::ATTEMPT_HEADER, None);
        }
        let single = config.models.get(model).is_some_and(|m| m.fallbacks.is_empty())
            && routing.model(model).is_some_and(|r| r.slots().len() <= 1);
        if single {
            return;
        }
        self.attempt.tried.push(failover::target_id(name, slot));
        let more = failover::chain(config, model).into_iter().any(|m| {
            let slots = routing.model(m).map_or(0, |r| r.slots().len());
            routing.has_untried(config, m, &Self::excluded(&self.attempt.tried, config, m, slots), now_ms)
        });
        if more {
            self.set_http_request_header(failover::TRIED_HEADER, Some(&self.attempt.tried.join(",")));
            self.set_http_request_header(failover::FAILOVER_HEADER, Some("more"));
        }
    }

    /// Brings the balancers up to date with the shared passive health table; remembers
    /// whether it was empty (see [`Stream::observe_answer`]).
    pub(super) fn load_passive(&mut self, routing: &mut Routing, config: &Config) {
        let bytes = hostcalls::get_shared_data(PASSIVE_KEY).ok().and_then(|(b, _)| b).unwrap_or_default();
        let table = PassiveTable::parse(&bytes);
        self.attempt.healthy_at_pick = table.entries.is_empty();
        routing.apply_passive(config, &table);
    }

    /// An upstream answer's head: passive health learns from it (its status, and the
    /// `Retry-After` of a 429/503, which parks the endpoint for that long); `abandoned` marks
    /// an answer the host replaced by a retry.
    pub(super) fn observe_answer(&mut self, status: u16, retry_after: Option<&[u8]>, abandoned: bool) {
        self.attempt.abandoned = abandoned && self.host_failover();
        let Some((provider, endpoint)) = self.attempt.upstream.filter(|_| self.routed.is_some()) else {
            return;
        };
        // With no entries when the request was routed (the usual state), an answer that cannot
        // change an empty table is not read against it again: one shared-data read and parse
        // less per request. (An entry another VM added meanwhile is cleared by the next
        // success seen with it.)
        if self.attempt.healthy_at_pick && !passive::answer_changes_empty_table(status, retry_after) {
            return;
        }
        let Some(provider) = self.config.as_deref().and_then(|c| c.providers.get(provider)) else { return };
        let endpoint = endpoint.and_then(|e| provider.endpoints.get(e)).unwrap_or(&provider.authority);
        let provider = provider.name.as_str();
        // The response-header callback's start is now enough for a health table in ms.
        let now_ms = self.callback_start_ns / 1_000_000;
        for _ in 0..CAS_TRIES {
            let Ok((bytes, cas)) = hostcalls::get_shared_data(PASSIVE_KEY) else { return };
            let mut table = PassiveTable::parse(bytes.as_deref().unwrap_or_default());
            if !table.record_answer(provider, endpoint, status, retry_after, now_ms) {
                return;
            }
            match hostcalls::set_shared_data(PASSIVE_KEY, Some(&table.encode()), cas) {
                Err(Status::CasMismatch) => continue,
                Err(e) => log::debug!("passive health not shared: {e:?}"),
                Ok(()) => {}
            }
            return;
        }
    }

    /// `on_log` of an abandoned attempt: no usage record, its reservation released, counted
    /// as a retry. False for any other stream.
    pub(super) fn end_abandoned(&mut self, now_ns: u64) -> bool {
        if !self.attempt.abandoned {
            return false;
        }
        let provider = self.provider_name();
        if !provider.is_empty() {
            self.shared.metrics.borrow_mut().attempt(provider, true);
        }
        if let Some(config) = self.config.clone() {
            self.settle(&config, &Usage::default(), Some(0), now_ns / 1_000_000);
        }
        true
    }
}
