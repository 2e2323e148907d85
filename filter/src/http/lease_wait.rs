//! Leased admission on the data path (`ferrogate_core::limits::lease`): a request takes its
//! amounts from this proxy's leases; when one is short, the request is routed and its headers
//! and body rewritten as usual, then held while it asks the sidecar for what it lacks
//! (`POST /v1/limits/lease`, its own call). The answer's grants go into the shared counters
//! (every VM sees them) and admission runs again: admitted, the request is forwarded; still
//! short after a grant another request took, it asks once more while within the limit's
//! `max_wait_ms`; otherwise it gets the refusal it would have had (429 with `Retry-After`, or
//! 402).
//!
//! The call is timed out [`LATE_ANSWER_MS`] past `max_wait_ms`: the store may have granted the
//! ask already, and dropping a slow answer would strand that grant and refuse a request the
//! limit had room for. With no answer even then, the request is *late* and refused as for a
//! full window while the store is reachable (the cross-replica view synced within
//! `limits_feed::STALE_MS`): it is never admitted by local counts then, which would let each
//! replica admit up to the limit. Only a store that is away (the sidecar answers
//! `synced: false`, or the view is stale) gets the documented fallback: 503 with
//! `redis.fail_closed`, else this proxy's own counts.

use std::time::Duration;

use ferrogate_core::config::Config;
use ferrogate_core::limits::lease::{self, Denied, Reply, LATE_ANSWER_MS};
use ferrogate_core::limits::{Amounts, Refusal};
use proxy_wasm::traits::HttpContext;
use proxy_wasm::types::Action;

use super::admission::Admission;
use super::Stream;
use crate::limits::SharedCounters;
use crate::{leases, sidecar_call};

/// A request waiting for a lease top-up.
pub(crate) struct LeaseWait {
    /// The lease call's token.
    pub(crate) token: u32,
    /// When the wait ends (Unix ms).
    deadline_ms: u64,
    /// What the request reserves.
    amounts: Amounts,
    /// The refusal it gets if no room comes.
    refusal: Refusal,
    /// An MCP/A2A request's body ended while it waited at its headers: it is read and checked
    /// once the request is admitted ([`Stream::agent_resumed`]).
    pub(crate) body_held: bool,
}

impl Stream {
    /// Takes the request's amounts from the leases, or starts waiting for a top-up.
    pub(super) fn admit_leased(&mut self, config: &Config, amounts: Amounts, now_ms: u64) -> Result<Admission, Action> {
        let plan = self.limit_plan(config);
        let plan = &plan[..];
        let mut out = Vec::new();
        let result = lease::admit_leased(plan, amounts, now_ms, &mut SharedCounters, self.attempt.replay, &mut out);
        leases::queue(&self.shared.lease_asks, out);
        match result {
            Ok(reservation) => {
                self.reservation = Some(reservation);
                self.leased = true;
                Ok(Admission::Now)
            }
            Err(Denied::Refused(refusal)) => Err(self.refuse(plan, &refusal)),
            Err(Denied::Short { asks, refusal, wait_ms }) => {
                if wait_ms == 0 {
                    return Err(self.refuse(plan, &refusal));
                }
                let deadline_ms = now_ms.saturating_add(wait_ms);
                let wait = LeaseWait { token: 0, deadline_ms, amounts, refusal, body_held: false };
                if self.ask_lease(asks, wait, now_ms) {
                    return Ok(Admission::Wait);
                }
                // No way to ask (the sidecar cluster cannot be called): the store is away.
                self.shared.metrics.borrow_mut().lease_away();
                if config.limits_fail_closed {
                    return Err(self.unavailable());
                }
                self.admit_local(plan, amounts, now_ms).map(|()| Admission::Now)
            }
        }
    }

    /// Sends the asks; true when the request now waits for the answer.
    fn ask_lease(&mut self, asks: Vec<lease::Ask>, mut wait: LeaseWait, now_ms: u64) -> bool {
        // The plugin is shared (an `Rc`): its sidecar settings are borrowed, not copied.
        let Some(plugin) = self.shared.plugin.clone() else { return false };
        let Some(sidecar) = plugin.sidecar.as_ref() else { return false };
        // A slow answer is still awaited a while past the wait (see the module docs).
        let timeout = Duration::from_millis(wait.deadline_ms.saturating_sub(now_ms).saturating_add(LATE_ANSWER_MS));
        let body = leases::body(asks);
        let mut headers = vec![("content-type", "application/json")];
        headers.extend(self.traceparent.as_deref().map(|t| ("traceparent", t)));
        match sidecar_call::call(sidecar, "POST", leases::PATH, &headers, Some(&body), timeout) {
            Ok(token) => {
                wait.token = token;
                self.lease_wait = Some(wait);
                true
            }
            Err(e) => {
                log::debug!("#{} lease call not sent: {e:?}", self.id);
                false
            }
        }
    }

    /// The lease call's answer (or its timeout): apply the grants, admit or refuse.
    pub(super) fn on_lease_answer(&mut self, num_headers: usize, body_size: usize) {
        let Some(wait) = self.lease_wait.take() else { return };
        let status = sidecar_call::answer_status(num_headers);
        let body = sidecar_call::ok_body(status, body_size);
        let now_ms = crate::raw::now_nanos() / 1_000_000;
        let answer = leases::apply(status, body.as_deref(), now_ms, &self.shared);
        if self.local_status.is_some() {
            // Answered meanwhile (an MCP/A2A request refused while its body came in): the
            // grants went into the shared counters above, for the next request.
            return;
        }
        let reply = lease::classify(answer, crate::limits_feed::view(now_ms).stale);
        if self.timed(|s| s.after_lease_answer(wait, reply, now_ms)) == Action::Continue {
            self.resume_http_request();
        }
    }

    fn after_lease_answer(&mut self, wait: LeaseWait, reply: Reply, now_ms: u64) -> Action {
        let Some(config) = self.config.clone() else { return Action::Continue };
        let plan = self.limit_plan(&config);
        let plan = &plan[..];
        let answer = match reply {
            Reply::Answered(answer) => answer,
            Reply::Away => return self.store_away(&config, &wait, now_ms),
            Reply::Late => return self.late(plan, &wait.refusal),
        };
        let mut out = Vec::new();
        let result =
            lease::admit_leased(plan, wait.amounts, now_ms, &mut SharedCounters, self.attempt.replay, &mut out);
        leases::queue(&self.shared.lease_asks, out);
        let granted = answer.grants.iter().any(|g| g.granted > 0);
        match result {
            Ok(reservation) => {
                self.reservation = Some(reservation);
                self.leased = true;
                self.admitted_after_wait(&config, wait.body_held)
            }
            Err(Denied::Short { asks, .. }) if granted && now_ms < wait.deadline_ms => {
                // Another request took the grant first: ask again within the same wait.
                let refusal = wait.refusal;
                if self.ask_lease(asks, wait, now_ms) {
                    return Action::Pause;
                }
                let action = self.refuse(plan, &refusal);
                self.rejected(action)
            }
            Err(Denied::Refused(refusal)) => {
                let action = self.refuse(plan, &refusal);
                self.rejected(action)
            }
            Err(Denied::Short { .. }) => {
                let action = self.refuse(plan, &wait.refusal);
                self.rejected(action)
            }
        }
    }

    /// No answer within the wait while the store is reachable: refused as for a full window,
    /// never admitted by this proxy's own counts (which would let each replica admit the limit).
    fn late(&mut self, plan: &[ferrogate_core::limits::LimitSpec], refusal: &Refusal) -> Action {
        log::debug!("#{} no lease answer within the wait: refused", self.id);
        self.shared.metrics.borrow_mut().lease_late();
        let action = self.refuse(plan, refusal);
        self.dropped_route(action)
    }

    /// The store is away after a wait: the documented fallback, 503 with `redis.fail_closed`,
    /// else this proxy's own counts plus the last view of the others'.
    fn store_away(&mut self, config: &Config, wait: &LeaseWait, now_ms: u64) -> Action {
        self.shared.metrics.borrow_mut().lease_away();
        if config.limits_fail_closed {
            let action = self.unavailable();
            return self.dropped_route(action);
        }
        let plan = self.limit_plan(config);
        match self.admit_local(&plan, wait.amounts, now_ms) {
            Ok(()) => self.resumed(config, wait.body_held),
            Err(action) => self.dropped_route(action),
        }
    }

    /// Admitted after waiting for a grant.
    fn admitted_after_wait(&mut self, config: &Config, body_held: bool) -> Action {
        self.shared.metrics.borrow_mut().lease_wait(true);
        self.resumed(config, body_held)
    }

    /// Goes on after a wait: arm the overrun cut the routing step left for now (an MCP/A2A
    /// request goes on its own way, [`Stream::agent_resumed`]).
    fn resumed(&mut self, config: &Config, body_held: bool) -> Action {
        if self.is_agent() {
            return self.agent_resumed(body_held);
        }
        let cuts =
            config.key(self.caller).is_some_and(|k| k.limits.overrun == ferrogate_core::limits::cut::Overrun::Cut);
        if let (true, Some(routed)) = (cuts, self.routed.as_ref()) {
            let provider = config.providers.get(routed.provider).map(|p| p.name.clone()).unwrap_or_default();
            let model = routed.upstream_model.clone();
            let body = self.get_http_request_body(0, self.body_size).unwrap_or_default();
            self.arm_overrun(config, (&provider, &model), &body);
        }
        Action::Continue
    }

    /// Refused after waiting for a grant.
    fn rejected(&mut self, action: Action) -> Action {
        self.shared.metrics.borrow_mut().lease_wait(false);
        self.dropped_route(action)
    }

    /// Not forwarded after a wait: the request was routed but never goes upstream, so its
    /// record names no provider (as for any refusal).
    fn dropped_route(&mut self, action: Action) -> Action {
        self.routed = None;
        self.translation = None;
        self.shapes = None;
        self.hide_usage = false;
        action
    }
}
