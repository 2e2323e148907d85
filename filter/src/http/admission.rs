//! Limits at the door and at the end: a routed request reserves on every limit of its key,
//! groups and org ([`ferrogate_core::limits`]) before it is forwarded, and settles with what it
//! used when the stream ends, whatever the outcome (success, error, client gone). A failover
//! replay (`ferrogate serve`'s later attempts) reserves tokens and cost again but is not
//! counted as another request ([`ferrogate_core::limits::readmit`]).

use ferrogate_core::config::{Config, Unpriced};
use ferrogate_core::limits::{self, estimate, Amounts, LimitSpec, Metric, Refusal};
use ferrogate_core::openai::ApiError;
use ferrogate_core::route::RouteDecision;
use ferrogate_core::usage::{cost_micro_usd, Usage};
use proxy_wasm::hostcalls;
use proxy_wasm::types::Action;

use super::Stream;
use crate::limits::SharedCounters;

impl Stream {
    /// Reserves the request's amounts on its limits; on refusal answers 429 (with
    /// `Retry-After`) or 402 and returns the action to take.
    pub(super) fn admit(&mut self, config: &Config, d: &RouteDecision<'_>, body: &[u8]) -> Result<(), Action> {
        let plan = config.limit_plans.for_key(self.caller.key_index());
        if plan.is_empty() {
            return Ok(());
        }
        let now_ms = self.started_ns / 1_000_000;
        if config.limits_fail_closed && config.redis_url_env.is_some() && crate::limits_feed::is_stale(now_ms) {
            let msg = "Limits cannot be checked across replicas right now (redis.fail_closed); retry shortly.";
            return Err(self.reply_error(&ApiError::unavailable(msg)));
        }
        let amounts = amounts(config, plan, d, body);
        if amounts.micro_usd.is_none() && plan.iter().any(|s| s.metric == Metric::MicroUsd) {
            self.unpriced(config.unpriced, &d.upstream_model)?;
        }
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
                let msg = format!("The model {model:?} has no price, so a USD budget cannot be enforced for it.");
                Err(self.reply_error(&ApiError::budget_exhausted(msg)))
            }
        }
    }

    fn refuse(&mut self, plan: &[LimitSpec], refusal: &Refusal) -> Action {
        let what = plan.get(refusal.spec).map_or_else(String::new, LimitSpec::describe);
        self.shared.metrics.borrow_mut().refused(refusal.metric);
        if refusal.status() == 402 {
            return self.reply_error(&ApiError::budget_exhausted(format!("Budget exhausted: {what}.")));
        }
        let e = ApiError::rate_limited(format!("Rate limit reached: {what}."));
        let retry = refusal.retry_after_secs.map(|s| s.max(1).to_string());
        self.reply_error_with(&e, retry.as_deref().map(|r| ("retry-after", r)))
    }

    /// Replaces the reservation with what the request used (tokens and cost from its record).
    pub(super) fn settle(&mut self, config: &Config, usage: &Usage, cost: Option<u64>, now_ms: u64) {
        let Some(reservation) = self.reservation.take() else { return };
        let plan = config.limit_plans.for_key(self.caller.key_index());
        let used = Amounts { tokens: usage.total_tokens(), micro_usd: cost };
        reservation.settle(plan, used, now_ms, &mut SharedCounters);
    }
}

/// What the request reserves: tokens and their price only when a limit counts them (the
/// estimate parses the body once more).
fn amounts(config: &Config, plan: &[LimitSpec], d: &RouteDecision<'_>, body: &[u8]) -> Amounts {
    if plan.iter().all(|s| s.metric == Metric::Requests) {
        return Amounts::default();
    }
    let (prompt, completion) = estimate::estimate(body);
    let usage = Usage { prompt_tokens: prompt, completion_tokens: completion, cached_tokens: 0 };
    Amounts {
        tokens: prompt.saturating_add(completion),
        micro_usd: cost_micro_usd(&config.pricing, d.provider, &d.upstream_model, &usage),
    }
}
