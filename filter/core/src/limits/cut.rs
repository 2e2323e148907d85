//! Cutting a stream that overruns its budget: a key with `limits: { overrun: cut }` has its
//! streamed answers stopped once they have delivered more completion tokens than its limits
//! leave room for, with a final error event in the caller's dialect.
//!
//! - **Allowance** ([`allowance`], at admission): the completion tokens the request reserved
//!   plus the smallest room its token limits have left after the reservation; a USD budget's
//!   room is turned into output tokens at the model's completion price. The tightest limit
//!   wins and is the one the final event names.
//! - **Delivery** ([`Meter`], while streaming): completion tokens delivered so far, estimated
//!   from the upstream's own events (see [`meter`](Meter) for the rule).
//! - **The cut**: after the first event carrying output that takes the estimate past the
//!   allowance, nothing more of the upstream's body is forwarded; the client gets
//!   [`final_event`] and the request is billed for what was delivered.
//!
//! Everything here is pure; the allowance is integer arithmetic and allocates nothing.

mod event;
mod meter;

pub use event::{cut_error, final_event};
pub use meter::{Meter, EVENT_CAP};

use super::{Amounts, CounterStore, LimitSpec, Metric};
use crate::usage::per_token_pico;

/// What a key's streamed answers do when they overrun its token or USD limits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Overrun {
    /// Run to their end; the overrun is billed (the next request is refused).
    #[default]
    Allow,
    /// Stop at the allowance with a final error event.
    Cut,
}

impl Overrun {
    /// The policy named `name` (`allow` or `cut`).
    pub fn parse(name: &str) -> Option<Overrun> {
        match name {
            "allow" => Some(Overrun::Allow),
            "cut" => Some(Overrun::Cut),
            _ => None,
        }
    }
}

/// The limit of one metric with the least room left, and that room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tightest {
    /// Index of the limit in its plan.
    pub spec: usize,
    /// What it has left (tokens, or micro-USD).
    pub room: u64,
}

/// The room a request's token and USD limits have left once it is admitted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Room {
    /// The tightest token limit, if the plan has one.
    pub tokens: Option<Tightest>,
    /// The tightest USD limit the request counts against (none for an unpriced model).
    pub micro_usd: Option<Tightest>,
}

impl Room {
    /// Reads the room left on every token and USD limit of `specs` (after the reservation of
    /// `amounts`), without changing any counter.
    pub fn read(specs: &[LimitSpec], amounts: Amounts, now_ms: u64, store: &mut impl CounterStore) -> Room {
        let mut room = Room::default();
        for (i, spec) in specs.iter().enumerate() {
            let slot = match spec.metric {
                Metric::Requests | Metric::McpRequests | Metric::ToolCalls => continue,
                Metric::Tokens => &mut room.tokens,
                Metric::MicroUsd if amounts.micro_usd.is_none() => continue,
                Metric::MicroUsd => &mut room.micro_usd,
            };
            let mut left = 0;
            // An update that fails stores nothing: a read.
            let _ = store.update::<()>(&spec.counter, &mut |c| {
                left = spec.limit.saturating_sub(c.used(spec.window, now_ms));
                Err(())
            });
            if slot.is_none_or(|t| left < t.room) {
                *slot = Some(Tightest { spec: i, room: left });
            }
        }
        room
    }
}

/// How far a stream may go: completion tokens, and the limit that sets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allowance {
    /// Completion tokens the stream may deliver.
    pub completion_tokens: u64,
    /// Index of the limit that sets it, in the request's plan.
    pub spec: usize,
    /// What that limit counts ([`Metric::Tokens`] or [`Metric::MicroUsd`]).
    pub metric: Metric,
}

/// The allowance of a stream that reserved `reserved_completion` tokens and left `room`;
/// `output_usd_per_mtok` is the model's completion price (`None`: unpriced). `None` when no
/// token or USD limit bounds it (a USD budget does not bound free output).
pub fn allowance(reserved_completion: u64, room: Room, output_usd_per_mtok: Option<f64>) -> Option<Allowance> {
    let by_tokens = room.tokens.map(|t| Allowance {
        completion_tokens: reserved_completion.saturating_add(t.room),
        spec: t.spec,
        metric: Metric::Tokens,
    });
    let by_usd = room.micro_usd.zip(output_usd_per_mtok).and_then(|(t, price)| {
        let pico = u128::from(per_token_pico(price));
        // Micro-USD are 1e6 price units: `room × 1e6 / per-token price`, rounded down.
        let tokens = (pico > 0).then(|| u128::from(t.room).saturating_mul(1_000_000) / pico)?;
        let tokens = u64::try_from(tokens).unwrap_or(u64::MAX);
        Some(Allowance {
            completion_tokens: reserved_completion.saturating_add(tokens),
            spec: t.spec,
            metric: Metric::MicroUsd,
        })
    });
    match (by_tokens, by_usd) {
        (Some(t), Some(u)) if u.completion_tokens < t.completion_tokens => Some(u),
        (Some(t), _) => Some(t),
        (None, u) => u,
    }
}

#[cfg(test)]
mod tests;
