//! Failover decisions: when an attempt's outcome may be retried on another target, how long to
//! wait first, and the order in which a model's fallbacks are tried.
//!
//! Pure policy, no clock: the host passes in elapsed times and gets back a [`Step`]. Which
//! targets an attempt may use is the router's part (see [`crate::balance::Routing`]): the
//! filter excludes the targets already tried, listed in [`TRIED_HEADER`], and says in
//! [`FAILOVER_HEADER`] whether an untried option remains.
//!
//! The contract between `ferrogate serve` and the filter (internal headers, stripped before
//! anything goes upstream and removed from what clients send):
//! - request, host → filter: [`ATTEMPT_HEADER`] (`2`, `3`, ...) and [`TRIED_HEADER`];
//! - released request, filter → host: [`TRIED_HEADER`] with this attempt's pick appended, and
//!   [`FAILOVER_HEADER`] `more` when another target or fallback is still untried;
//! - response, host → filter: [`ABANDONED_HEADER`] on an answer the host will not deliver
//!   because it retries (the filter counts it for passive health, writes no usage record).

use crate::config::Config;

/// At most this many upstream attempts per client request, the first included.
pub const MAX_ATTEMPTS: u32 = 3;
/// No new attempt starts once this much time has passed since the request arrived.
pub const TIME_BUDGET_MS: u64 = 30_000;
/// `Retry-After` delays the next attempt up to this long; a longer one is cut to it (the next
/// attempt goes to another target, which the first one's rate limit may not concern at all).
/// The answering endpoint itself stays parked for the whole delay ([`crate::passive`]).
pub const RETRY_AFTER_CAP_MS: u64 = 2_000;

/// Request header: the attempt number, from the host (absent on the first).
pub const ATTEMPT_HEADER: &str = "x-ferrogate-attempt";
/// Request header: the targets tried so far, comma-separated [`target_id`]s.
pub const TRIED_HEADER: &str = "x-ferrogate-tried";
/// Released request header: `more` when a retry could reach an untried option.
pub const FAILOVER_HEADER: &str = "x-ferrogate-failover";
/// Response header from the host: this answer is abandoned for a retry.
pub const ABANDONED_HEADER: &str = "x-ferrogate-abandoned";
/// Every internal header of the contract, for stripping.
pub const INTERNAL_HEADERS: [&str; 4] = [ATTEMPT_HEADER, TRIED_HEADER, FAILOVER_HEADER, ABANDONED_HEADER];

/// How an upstream attempt ended, as far as failover cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// No connection, or it was reset before a response head.
    ConnectFailure,
    /// No response head within the per-try timeout.
    Timeout,
    /// A response head with this status.
    Status(u16),
}

impl Outcome {
    /// True for what another target may answer better: connect failures, resets, timeouts,
    /// 429 and 5xx. Other 4xx describe the request itself and are never retried.
    pub fn retryable(self) -> bool {
        match self {
            Outcome::ConnectFailure | Outcome::Timeout => true,
            Outcome::Status(s) => s == 429 || (500..600).contains(&s),
        }
    }

    /// True when the outcome counts against the target's passive health (same set).
    pub fn is_failure(self) -> bool {
        self.retryable()
    }
}

/// What the host does with an attempt's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Deliver this answer to the client.
    Deliver,
    /// Start another attempt after this many milliseconds.
    Retry {
        /// Delay before the next attempt (from `Retry-After`, capped).
        delay_ms: u64,
    },
}

/// Where a client request stands when an attempt ends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    /// Attempts made so far, the one that just ended included.
    pub attempts: u32,
    /// Milliseconds since the client request arrived.
    pub elapsed_ms: u64,
    /// The filter said an untried target or fallback remains.
    pub more: bool,
    /// Nothing of the answer has reached the client yet.
    pub nothing_sent: bool,
}

/// Decides whether to retry after `outcome`; `retry_after` is the answer's header value.
pub fn decide(outcome: Outcome, progress: Progress, retry_after: Option<&[u8]>) -> Step {
    if !outcome.retryable() || !progress.more || !progress.nothing_sent || progress.attempts >= MAX_ATTEMPTS {
        return Step::Deliver;
    }
    let delay_ms = retry_after.and_then(retry_after_ms).map_or(0, |ms| ms.min(RETRY_AFTER_CAP_MS));
    if progress.elapsed_ms.saturating_add(delay_ms) >= TIME_BUDGET_MS {
        return Step::Deliver;
    }
    Step::Retry { delay_ms }
}

/// `Retry-After` as delay-seconds, in milliseconds. The HTTP-date form needs a clock and is
/// ignored (no delay).
pub fn retry_after_ms(value: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(value).ok()?.trim();
    text.parse::<u64>().ok().map(|s| s.saturating_mul(1_000))
}

/// The models a request for `model` may be served by, in order: the model, then its
/// `fallbacks` breadth first (a fallback's own fallbacks after the model's), each once.
pub fn chain(config: &Config, model: usize) -> Vec<usize> {
    let mut out = vec![model];
    let mut next = 0;
    while let Some(&m) = out.get(next) {
        next += 1;
        for &f in config.models.get(m).map_or(&[][..], |m| m.fallbacks.as_slice()) {
            if !out.contains(&f) {
                out.push(f);
            }
        }
    }
    out
}

/// The id of a model's balancing slot in [`TRIED_HEADER`]: `<model name>#<slot>`.
pub fn target_id(model_name: &str, slot: usize) -> String {
    // Pushed, not `format!`ted: formatting costs a visible share of a request in wasm.
    let slot = crate::decimal::Decimal::new(u64::try_from(slot).unwrap_or(u64::MAX));
    let mut id = String::with_capacity(model_name.len() + 1 + slot.as_bytes().len());
    id.push_str(model_name);
    id.push('#');
    id.push_str(slot.as_str());
    id
}

/// The slot of `model_name` that the [`target_id`] `id` names, if it names one of that model.
pub fn tried_slot(id: &str, model_name: &str) -> Option<usize> {
    let digits = id.strip_prefix(model_name)?.strip_prefix('#')?;
    // Only what target_id writes: `usize::from_str` would also take a leading `+`.
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The ids of a [`TRIED_HEADER`] value (empty entries skipped).
pub fn parse_tried(value: &str) -> Vec<&str> {
    value.split(',').map(str::trim).filter(|s| !s.is_empty()).collect()
}

#[cfg(test)]
mod tests;
