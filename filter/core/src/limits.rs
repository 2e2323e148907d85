//! Request, token and USD limits: which counters a request is checked against, reserving
//! before admission and settling after, with the counters kept wherever the caller keeps them
//! (proxy-wasm shared data in the filter, so every worker VM of a proxy counts together).
//!
//! A request is checked against its key's limits, each of its groups' limits and the
//! org-wide `limits:`; every counter must have room (so the most restrictive wins). Admission
//! reserves `1` request, the estimated prompt tokens plus the completion allowance, and their
//! price in micro-USD; when the response ends, [`Reservation::settle`] replaces the reserved
//! tokens and cost with what was used; a failover replay of an admitted request reserves its
//! tokens and cost again but not the request ([`readmit`]), so a client request counts once
//! however many upstream attempts it takes. Over a request or token limit the answer is 429 with
//! `Retry-After`; over a USD budget, 402. The window rules are in [`window`]. A key with
//! `overrun: cut` also has its streamed answers stopped at what its limits allow ([`cut`]).
//!
//! MCP and A2A requests have limits of their own, counted by the same machinery on plans of
//! their own ([`agent`]).
//!
//! Checking a model request allocates nothing: the plans are built with the configuration,
//! and counters are updated in place through [`CounterStore`] (an MCP or A2A request limited
//! by both its key and its server joins the two plans per request).

pub mod agent;
pub mod conversation;
pub mod cut;
pub mod estimate;
pub mod feed;
pub mod lease;
mod plan;
mod window;

pub use plan::{build_plans, window_of, LimitSpec, Metric, Plans, Scope};
pub use window::{Counter, Lease, Tally, Window, COUNTER_BYTES};

use crate::openai::ApiError;

/// Where counters live. `update` runs `f` on the counter under `key` and stores the result
/// atomically with respect to other updaters (the filter retries a CAS until it sticks).
pub trait CounterStore {
    /// Applies `f` to the counter at `key`; when `f` fails nothing is stored.
    fn update<E>(&mut self, key: &str, f: &mut dyn FnMut(&mut Counter) -> Result<(), E>) -> Result<(), E>;
}

/// What one request asks of its limits. A model request always takes 1 on its request
/// counters; an MCP/A2A one takes what `mcp_requests` and `tool_calls` say (its plan has no
/// model counter, a model plan none of these).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Amounts {
    /// Estimated prompt tokens plus the completion allowance.
    pub tokens: u64,
    /// Their price; `None` when the model has no price.
    pub micro_usd: Option<u64>,
    /// MCP/A2A requests (0 or 1).
    pub mcp_requests: u64,
    /// MCP `tools/call`s and A2A message sends (0 or 1).
    pub tool_calls: u64,
}

impl Amounts {
    /// What an MCP or A2A request takes when its headers arrive.
    pub const AGENT_REQUEST: Amounts = Amounts { tokens: 0, micro_usd: None, mcp_requests: 1, tool_calls: 0 };
    /// What a granted tool call takes once the body shows it.
    pub const TOOL_CALL: Amounts = Amounts { tokens: 0, micro_usd: None, mcp_requests: 0, tool_calls: 1 };

    /// What a model request takes: `tokens` and their price (`None`: the model has none).
    pub const fn model(tokens: u64, micro_usd: Option<u64>) -> Amounts {
        Amounts { tokens, micro_usd, mcp_requests: 0, tool_calls: 0 }
    }

    /// What the request takes on a counter of `metric`; `None` leaves the counter alone: a
    /// budget when the model has no price (the caller applies its policy), an MCP/A2A counter
    /// this step does not count.
    pub fn of(self, metric: Metric) -> Option<u64> {
        match metric {
            Metric::Requests => Some(1),
            Metric::Tokens => Some(self.tokens),
            Metric::MicroUsd => self.micro_usd,
            Metric::McpRequests => Some(self.mcp_requests).filter(|&n| n > 0),
            Metric::ToolCalls => Some(self.tool_calls).filter(|&n| n > 0),
        }
    }
}

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    /// The limit that had no room.
    pub spec: usize,
    /// What it counts.
    pub metric: Metric,
    /// Seconds until the request would fit (`None`: it never fits in that window).
    pub retry_after_secs: Option<u64>,
}

impl Refusal {
    /// 402 for a spent budget, 429 for a rate.
    pub fn status(&self) -> u16 {
        if self.metric == Metric::MicroUsd {
            402
        } else {
            429
        }
    }

    /// The answer to the caller: 402 naming the spent budget, or 429 naming the limit with
    /// the `retry-after` seconds (at least 1) when the request can ever fit.
    pub fn answer(&self, plan: &[LimitSpec]) -> (ApiError, Option<String>) {
        let what = plan.get(self.spec).map_or_else(String::new, LimitSpec::describe);
        if self.status() == 402 {
            return (ApiError::budget_exhausted(format!("Budget exhausted: {what}.")), None);
        }
        let retry = self.retry_after_secs.map(|s| s.max(1).to_string());
        (ApiError::rate_limited(format!("Rate limit reached: {what}.")), retry)
    }
}

/// The 402 for a model without a price under a USD budget and `unpriced: block`.
pub fn unpriced_refusal(model: &str) -> ApiError {
    ApiError::budget_exhausted(format!("The model {model:?} has no price, so a USD budget cannot be enforced for it."))
}

/// The amounts a request holds on its counters until it ends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reservation {
    /// What was reserved.
    pub amounts: Amounts,
}

/// Reserves `amounts` on every spec of `specs`, or on none: at the first counter without room
/// the ones already taken are given back and the refusal says which limit it was.
/// Specs of a budget whose model has no price are skipped (the caller applies its policy).
pub fn admit(
    specs: &[LimitSpec],
    amounts: Amounts,
    now_ms: u64,
    store: &mut impl CounterStore,
) -> Result<Reservation, Refusal> {
    admit_on(specs, amounts, now_ms, store, |_| true)
}

/// [`admit`] for a later attempt of a client request whose first attempt was admitted (a
/// failover replay): its request (and call) was counted then, so those counters are neither
/// checked nor charged again. Tokens and cost are reserved again: the abandoned attempt gave
/// its reservation back, and the final attempt settles what the request used.
pub fn readmit(
    specs: &[LimitSpec],
    amounts: Amounts,
    now_ms: u64,
    store: &mut impl CounterStore,
) -> Result<Reservation, Refusal> {
    admit_on(specs, amounts, now_ms, store, |s| !s.metric.counts_calls())
}

/// Reserves on the specs `counted` selects, all or none.
fn admit_on(
    specs: &[LimitSpec],
    amounts: Amounts,
    now_ms: u64,
    store: &mut impl CounterStore,
    counted: impl Fn(&LimitSpec) -> bool,
) -> Result<Reservation, Refusal> {
    for (i, spec) in specs.iter().enumerate().filter(|(_, s)| counted(s)) {
        let Some(amount) = amounts.of(spec.metric) else { continue };
        let taken = store.update(&spec.counter, &mut |c| c.try_add(spec.window, now_ms, amount, spec.limit));
        if let Err(wait) = taken {
            let taken = specs.get(..i).unwrap_or_default().iter().filter(|s| counted(s));
            release(taken, amounts, now_ms, store);
            let retry_after_secs = wait.map(|ms| ms.div_ceil(1000));
            return Err(Refusal { spec: i, metric: spec.metric, retry_after_secs });
        }
    }
    Ok(Reservation { amounts })
}

/// Gives back what [`admit`] took on `specs`.
fn release<'a>(
    specs: impl Iterator<Item = &'a LimitSpec>,
    amounts: Amounts,
    now_ms: u64,
    store: &mut impl CounterStore,
) {
    for spec in specs {
        let Some(amount) = amounts.of(spec.metric) else { continue };
        let delta = -i64::try_from(amount).unwrap_or(i64::MAX);
        let _ = store.update::<()>(&spec.counter, &mut |c| {
            c.adjust(spec.window, now_ms, delta);
            Ok(())
        });
    }
}

impl Reservation {
    /// Replaces the reserved tokens and cost with what the request `used` (on success, error
    /// and client disconnect alike). Requests stay counted.
    pub fn settle(&self, specs: &[LimitSpec], used: Amounts, now_ms: u64, store: &mut impl CounterStore) {
        for spec in specs {
            let (reserved, actual) = match spec.metric {
                Metric::Requests | Metric::McpRequests | Metric::ToolCalls => continue,
                Metric::Tokens => (self.amounts.tokens, used.tokens),
                Metric::MicroUsd => match self.amounts.micro_usd {
                    None => continue,
                    Some(r) => (r, used.micro_usd.unwrap_or(0)),
                },
            };
            let delta = i64::try_from(actual).unwrap_or(i64::MAX) - i64::try_from(reserved).unwrap_or(i64::MAX);
            if delta != 0 {
                let _ = store.update::<()>(&spec.counter, &mut |c| {
                    c.adjust(spec.window, now_ms, delta);
                    Ok(())
                });
            }
        }
    }
}

#[cfg(test)]
mod tests;
