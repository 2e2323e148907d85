//! Flow control on the data path (`ferrogate_core::flow`, queues in [`crate::flow_gate`]): a
//! request for a model whose targets are all saturated waits, its body buffered, in the
//! model's proxy-wide queue. It is woken (`crate::flow_wake`) when a slot is released or the
//! request ahead of it took one, and on its VM's tick (which keeps its entry alive and ends a
//! wait past its time to live); then it checks its place again, and when it is let go it is
//! routed as usual and forwarded. A full band is refused with 429, a request past its time to
//! live with 503, both with `Retry-After` in the caller's dialect; a client that goes away
//! leaves the queue.

use ferrogate_core::flow::Gate;
use ferrogate_core::openai::ApiError;
use proxy_wasm::traits::HttpContext;
use proxy_wasm::types::Action;

use super::Stream;
use crate::flow_gate;

/// A request waiting in a model's queue.
pub(crate) struct FlowWait {
    /// The model's name (its queue's key).
    pub(crate) model: String,
    /// Its entry.
    pub(crate) seq: u64,
    /// When its time to live ends (Unix ms).
    pub(crate) deadline_ms: u64,
    /// When it started waiting (ns).
    pub(crate) since_ns: u64,
}

/// What the balancer's gate said about a flow-controlled model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FlowOutcome {
    /// The model's name.
    pub(crate) model: String,
    /// The gate's answer (never [`Gate::Go`] or [`Gate::Went`]).
    pub(crate) gate: Gate,
    /// The entry's deadline, for a request that starts waiting.
    pub(crate) deadline_ms: u64,
}

impl Stream {
    /// Routing stopped at a saturated model's gate: wait, or refuse.
    pub(super) fn flow_hold(&mut self, outcome: FlowOutcome) -> Action {
        match outcome.gate {
            Gate::Wait(seq) => {
                if self.flow.is_none() {
                    let since_ns = self.callback_start_ns;
                    let (model, deadline_ms) = (outcome.model, outcome.deadline_ms);
                    self.flow = Some(FlowWait { model, seq, deadline_ms, since_ns });
                    self.shared.metrics.borrow_mut().flow(FlowEvent::Queued);
                    self.shared.flow_waiters.borrow_mut().insert(self.id, self.me.clone());
                }
                if let Some(w) = self.flow.as_mut() {
                    w.seq = seq;
                }
                Action::Pause
            }
            Gate::Full => {
                self.shared.metrics.borrow_mut().flow(FlowEvent::Full);
                let e =
                    ApiError::rate_limited(format!("The queue of model {:?} is full; retry shortly.", outcome.model));
                self.reply_error_with(&e, Some(("retry-after", "1")))
            }
            Gate::Expired | Gate::Go | Gate::Went(_) => {
                self.flow_left_queue();
                self.shared.metrics.borrow_mut().flow(FlowEvent::Expired);
                let msg = format!("Waited the queue's time to live for model {:?}; retry shortly.", outcome.model);
                self.reply_error_with(&ApiError::unavailable(msg), Some(("retry-after", "1")))
            }
        }
    }

    /// Woken (`crate::flow_wake`, with this stream the effective context): route again; the
    /// gate decides whether the request goes now.
    pub(crate) fn on_flow_wake(&mut self) {
        if self.flow.is_none() {
            return;
        }
        let Some(plugin) = self.shared.plugin.clone() else { return };
        if self.timed(|s| s.finish(&plugin)) == Action::Continue {
            self.resume_http_request();
        }
    }

    /// The call this stream waits on, if any (a call it starts while woken from the root is
    /// answered to the root, which hands the answer on).
    pub(crate) fn pending_callout(&self) -> Option<u32> {
        if let Some(w) = &self.lease_wait {
            return Some(w.token);
        }
        match self.tokenize {
            Some(super::tokenize::Tokenize::Pending(token)) => Some(token),
            _ => None,
        }
    }

    /// Counts a flow-control event in the VM's metrics.
    pub(crate) fn count_flow(&mut self, event: FlowEvent) {
        self.shared.metrics.borrow_mut().flow(event);
    }

    /// The stream's context id.
    pub(crate) fn id(&self) -> u32 {
        self.id
    }

    /// The request left the queue to be served: count its wait.
    pub(super) fn flow_left_queue(&mut self) {
        if let Some(w) = self.flow.take() {
            self.shared.flow_waiters.borrow_mut().remove(self.id);
            let waited = self.callback_start_ns.saturating_sub(w.since_ns);
            self.queued_ns = self.queued_ns.saturating_add(waited);
            let model = match self.config.as_deref() {
                Some(c) => ferrogate_core::metrics::model_label(c, &self.model_requested),
                None => std::borrow::Cow::Borrowed(ferrogate_core::metrics::UNKNOWN),
            };
            self.shared.metrics.borrow_mut().queued(&model, waited / 1_000_000);
        }
    }

    /// The request ends while waiting (the client went away, or it was refused): its entry
    /// leaves the queue so it takes no one's place.
    pub(super) fn leave_queue(&mut self) {
        if let Some(w) = self.flow.take() {
            self.shared.flow_waiters.borrow_mut().remove(self.id);
            flow_gate::leave(&w.model, w.seq);
            let waited = crate::raw::now_nanos().saturating_sub(w.since_ns);
            self.queued_ns = self.queued_ns.saturating_add(waited);
        }
    }
}

/// What flow control did, for the filter's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FlowEvent {
    /// A request started waiting.
    Queued,
    /// A request was refused: its band was full.
    Full,
    /// A request was refused: it waited its time to live.
    Expired,
    /// A waiting request was woken by a released slot (a push, not its VM's tick).
    Woken,
}
