//! Limits at the door and at the end: a routed request reserves on every limit of its key,
//! groups and org ([`ferrogate_core::limits`]) before it is forwarded, and settles with what it
//! used when the stream ends, whatever the outcome (success, error, client gone). A failover
//! replay (`ferrogate serve`'s later attempts) reserves tokens and cost again but is not
//! counted as another request ([`ferrogate_core::limits::readmit`]).
//!
//! With limits shared through Redis and the sidecar granting leases, the reservation is taken
//! from this proxy's leases instead ([`ferrogate_core::limits::lease`]); a request whose lease
//! is short waits for a top-up ([`super::lease_wait`]). While the shared view is stale the
//! documented fallbacks hold: 503 with `redis.fail_closed`, else this proxy's own counts plus
//! the last view of the others'.

use ferrogate_core::config::{Config, Unpriced};
use ferrogate_core::limits::{self, estimate, Amounts, LimitSpec, Metric, Refusal};
use ferrogate_core::openai::ApiError;
use ferrogate_core::route::RouteDecision;
use ferrogate_core::usage::Usage;
use proxy_wasm::hostcalls;
use proxy_wasm::types::Action;

use super::Stream;
use crate::limits::SharedCounters;

/// Whether an admitted request goes on now or waits for a lease top-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Admission {
    /// Admitted (or under no limit).
    Now,
    /// Held until the sidecar answers the lease call, or the wait ends.
    Wait,
}

impl Stream {
    /// Reserves the request's amounts on its limits; on refusal answers 429 (with
    /// `Retry-After`) or 402 and returns the action to take.
    pub(super) fn admit(&mut self, config: &Config, d: &RouteDecision<'_>, body: &[u8]) -> Result<Admission, Action> {
        let plan = config.limit_plans.for_key(self.caller.key_index());
        if plan.is_empty() {
            return Ok(Admission::Now);
        }
        let now_ms = self.started_ns / 1_000_000;
        let leased = self.admission_mode(config, now_ms)?;
        let amounts = estimate::amounts(config, plan, (d.provider, &d.upstream_model), body);
        if amounts.micro_usd.is_none() && plan.iter().any(|s| s.metric == Metric::MicroUsd) {
            self.unpriced(config.unpriced, &d.upstream_model)?;
        }
        if leased {
            return self.admit_leased(config, amounts, now_ms);
        }
        self.admit_local(plan, amounts, now_ms).map(|()| Admission::Now)
    }

    /// How a request's amounts are taken: `true` from the leases (shared through Redis, the
    /// feed fresh), `false` by this proxy's own counts; the 503 when the shared counters
    /// cannot be checked and `redis.fail_closed` is set.
    pub(super) fn admission_mode(&mut self, config: &Config, now_ms: u64) -> Result<bool, Action> {
        let view = config.redis_url_env.as_ref().map(|_| crate::limits_feed::view(now_ms));
        if config.limits_fail_closed && view.is_some_and(|v| v.stale) {
            return Err(self.unavailable());
        }
        Ok(view.is_some_and(|v| v.leases && !v.stale))
    }

    /// 503: the shared counters cannot be checked and `redis.fail_closed` is set.
    pub(super) fn unavailable(&mut self) -> Action {
        let msg = "Limits cannot be checked across replicas right now (redis.fail_closed); retry shortly.";
        self.reply_error(&ApiError::unavailable(msg))
    }

    /// Admission by this proxy's own counts plus the last view of the other replicas'.
    pub(super) fn admit_local(&mut self, plan: &[LimitSpec], amounts: Amounts, now_ms: u64) -> Result<(), Action> {
        let admitted = if self.attempt.replay {
            // A failover replay: the client request was counted at its first attempt.
            limits::readmit(plan, amounts, now_ms, &mut SharedCounters)
        } else {
            limits::admit(plan, amounts, now_ms, &mut SharedCounters)
        };
        match admitted {
            Ok(reservation) => {
                self.reservation = Some(reservation);
                Ok(())
            }
            Err(refusal) => Err(self.refuse(plan, &refusal)),
        }
    }

    /// A USD budget applies but the model has no price: the configured policy decides.
    fn unpriced(&mut self, policy: Unpriced, model: &str) -> Result<(), Action> {
        match policy {
            Unpriced::Ignore => Ok(()),
            Unpriced::Warn => {
                // Once per model per proxy: the first VM to claim the key logs.
                let key = format!("ferrogate.unpriced.{model}");
                if matches!(hostcalls::get_shared_data(&key), Ok((None, _))) {
                    let _ = hostcalls::set_shared_data(&key, Some(b"1"), None);
                    log::warn!("model {model:?} has no price: USD budgets do not count it (unpriced: warn)");
                }
                Ok(())
            }
            Unpriced::Block => {
                self.shared.metrics.borrow_mut().refused(Metric::MicroUsd);
                Err(self.reply_error(&limits::unpriced_refusal(model)))
            }
        }
    }

    /// Answers a refusal: 402 for a spent budget, 429 with `retry-after` for a rate (on an
    /// MCP or A2A path a JSON-RPC error, answering the request's id once the body was read).
    pub(super) fn refuse(&mut self, plan: &[LimitSpec], refusal: &Refusal) -> Action {
        self.shared.metrics.borrow_mut().refused(refusal.metric);
        let (e, retry) = refusal.answer(plan);
        let retry = retry.as_deref().map(|r| ("retry-after", r));
        if let Some(id) = self.agent_rpc_id() {
            let body = e.jsonrpc_body(Some(&id));
            self.reason = Some(e.code.unwrap_or(e.kind));
            return self.reply_with(e.status, &body, retry);
        }
        self.reply_error_with(&e, retry)
    }

    /// Replaces the reservation with what the request used (tokens and cost from its record).
    pub(super) fn settle(&mut self, config: &Config, usage: &Usage, cost: Option<u64>, now_ms: u64) {
        let Some(reservation) = self.reservation.take() else { return };
        if self.is_agent() {
            // MCP/A2A limits count requests and calls: nothing to settle.
            return;
        }
        let plan = self.limit_plan(config);
        let used = Amounts::model(usage.total_tokens(), cost);
        if self.leased {
            let mut out = Vec::new();
            reservation.settle_leased(&plan, used, now_ms, &mut SharedCounters, &mut out);
            crate::leases::queue(&self.shared.lease_asks, out);
        } else {
            reservation.settle(&plan, used, now_ms, &mut SharedCounters);
        }
    }
}
