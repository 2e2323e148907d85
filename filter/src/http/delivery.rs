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
//! | cut at its budget ([`super::cut`]) | the cut's error event | 200, cut, partial |
//!
//! Tokens: the provider's prompt count when it gave one, else a token per four bytes of the
//! request body (admission's estimate); completion tokens are the larger of the provider's
//! count and the meter's.

use ferrogate_core::error::ApiError;
use ferrogate_core::limits::cut::{self, Meter};
use ferrogate_core::limits::estimate;
use ferrogate_core::usage::{Usage, STATUS_CLIENT_CLOSED};

use super::Stream;

/// What the client (and the log) is told when the upstream ends an answer early.
const INCOMPLETE: &str = "the provider's stream ended before the answer was complete";

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
        log::warn!("#{} {INCOMPLETE} (about {} completion tokens delivered)", self.id, meter.delivered());
        if self.stream_translator.is_some() {
            return None;
        }
        let (client, _) = self.shapes?;
        let error = ApiError::from_upstream(502, INCOMPLETE.to_string());
        Some(cut::final_event(client, &error, meter.sequence().map_or(0, |s| s + 1)))
    }

    /// The status to record: the answer's own when it ran to its end; 502 when the upstream
    /// failed it (seen here, or reported by the proxy as `response.code_details`); else the
    /// client went away (499).
    pub(super) fn recorded_status(&mut self) -> u16 {
        if self.upstream_failed {
            return 502;
        }
        if self.response_complete {
            return self.status;
        }
        // Only for the rare incomplete stream: one hostcall.
        let details = proxy_wasm::hostcalls::get_property(vec!["response", "code_details"]).ok().flatten();
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
        let delivered = meter.delivered();
        // A cut counts only what passed; otherwise the provider's count may be the higher.
        let completion_tokens = if self.was_cut() { delivered } else { delivered.max(seen.completion_tokens) };
        Usage { prompt_tokens, completion_tokens, cached_tokens: seen.cached_tokens.min(prompt_tokens) }
    }
}
