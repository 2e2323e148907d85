//! What a streamed answer delivered, whether it ended, and what is charged when it did not.
//!
//! Every successful streamed answer of an API that streams text is metered as it passes
//! ([`ferrogate_core::limits::cut::Meter`]: completion tokens delivered so far, and whether the
//! dialect's final event came). Most providers report usage only in their last event, so an
//! answer that stops early would otherwise be recorded, and settled against the limits, as
//! nothing. It is charged for what was delivered instead and its record says `partial`:
//!
//! | how it ended | client gets | record |
//! |---|---|---|
//! | the client went away | — | 499, partial |
//! | the upstream ended (or, in `serve`, failed) before its final event | a final error event in its dialect | 502, partial |
//! | the upstream failed and the proxy reset the client (Envoy) | a reset | 502, partial (from `response.code_details`) |
//! | the upstream went silent past the proxy's idle timeout | a final error event (`serve`) or a reset (Envoy) | 504, partial (from `response.code_details`) |
//! | cut at its budget ([`super::cut`]) | the cut's error event | 200, cut, partial |
//!
//! Tokens: the provider's prompt count when it gave one, else a token per four bytes of the
//! request body (admission's estimate); completion tokens as [`Meter::charged`] says: the
//! provider's count when the stream's final event passed, else the larger of it and the
//! meter's.

use ferrogate_core::error::ApiError;
use ferrogate_core::limits::cut::{self, Meter};
use ferrogate_core::limits::estimate;
use ferrogate_core::usage::{Usage, STATUS_CLIENT_CLOSED};

use super::Stream;

/// What the client (and the log) is told when the upstream ends an answer early.
const INCOMPLETE: &str = "the provider's stream ended before the answer was complete";

/// What the client (and the log) is told when the proxy ended a silent answer.
const STALLED: &str = "the provider's stream stalled: nothing arrived within the idle timeout";

/// `response.code_details` of a proxy that timed the upstream out: Envoy's connection manager
/// (`stream_idle_timeout`), its router's per-try idle timeout (also `ferrogate serve`'s) and
/// its route timeout. Such an answer is recorded as 504, any other failure as 502.
const TIMEOUT_DETAILS: [&[u8]; 3] =
    [b"stream_idle_timeout", b"upstream_per_try_idle_timeout", b"upstream_response_timeout"];

impl Stream {
    /// At the response headers: a successful streamed answer is metered (against the cut's
    /// allowance when one is armed); anything else is neither metered nor cut.
    pub(super) fn meter_answer(&mut self, streaming: bool) {
        let metered = streaming && (200..300).contains(&self.status);
        let Some((_, upstream)) = self.shapes.filter(|_| metered) else {
            self.overrun = None;
            return;
        };
        let allowance = self.overrun.as_ref().map_or(u64::MAX, |g| g.allowance.completion_tokens);
        self.meter = Some(Meter::new(upstream, allowance));
    }

    /// At the end of a metered answer's body: whether the upstream ended it without its final
    /// event (then the record says 502). Returns the final error event to append when the
    /// answer is in the client's own dialect (a translated stream ends itself).
    pub(super) fn end_of_metered(&mut self) -> Option<Vec<u8>> {
        let meter = self.meter.as_ref()?;
        if meter.finished() || self.was_cut() {
            return None;
        }
        self.upstream_failed = true;
        let status = failure_status();
        let message = if status == 504 { STALLED } else { INCOMPLETE };
        log::warn!("#{} {message} (about {} completion tokens delivered)", self.id, meter.delivered());
        if self.stream_translator.is_some() {
            return None;
        }
        let (client, _) = self.shapes?;
        let error = ApiError::from_upstream(status, message.to_string());
        Some(cut::final_event(client, &error, meter.sequence().map_or(0, |s| s + 1)))
    }

    /// The status to record: the answer's own when it ran to its end; 502 when the upstream
    /// failed it (seen here, or reported by the proxy as `response.code_details`), 504 when
    /// the proxy timed it out; else the client went away (499).
    pub(super) fn recorded_status(&mut self) -> u16 {
        if self.upstream_failed {
            return failure_status();
        }
        if self.response_complete {
            return self.status;
        }
        // Only for the rare incomplete stream: one hostcall.
        let details = code_details();
        if details.as_deref().is_some_and(|d| TIMEOUT_DETAILS.contains(&d)) {
            self.upstream_failed = true;
            return 504;
        }
        if details.is_some_and(|d| d.starts_with(b"upstream_")) {
            self.upstream_failed = true;
            return 502;
        }
        STATUS_CLIENT_CLOSED
    }

    /// Whether the answer stopped before its end: its tokens are then what was delivered.
    pub(super) fn partial(&self) -> bool {
        self.meter.is_some() && (self.was_cut() || self.upstream_failed || !self.response_complete)
    }

    /// The usage to record and settle: what the tracker `seen` for a complete answer; for a
    /// partial one, what was delivered (see the module docs).
    pub(super) fn delivered_usage(&self, seen: Usage) -> Usage {
        let Some(meter) = self.meter.as_ref().filter(|_| self.partial()) else { return seen };
        let prompt_tokens =
            if seen.prompt_tokens > 0 { seen.prompt_tokens } else { estimate::prompt_tokens(self.body_size) };
        let completion_tokens = meter.charged(seen.completion_tokens, self.was_cut());
        Usage { prompt_tokens, completion_tokens, cached_tokens: seen.cached_tokens.min(prompt_tokens) }
    }
}

/// The proxy's `response.code_details` (why the stream ended), if it gave any.
fn code_details() -> Option<Vec<u8>> {
    proxy_wasm::hostcalls::get_property(vec!["response", "code_details"]).ok().flatten()
}

/// The status of an answer the upstream did not finish: 504 when the proxy says it timed the
/// upstream out, else 502.
fn failure_status() -> u16 {
    if code_details().as_deref().is_some_and(|d| TIMEOUT_DETAILS.contains(&d)) {
        504
    } else {
        502
    }
}
