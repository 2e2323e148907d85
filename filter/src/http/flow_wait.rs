//! Flow control on the data path (`ferrogate_core::flow`, queues in [`crate::flow_gate`]): a
//! request for a model whose targets are all saturated waits, its body buffered, in the
//! model's proxy-wide queue. Proxy-wasm can only wake a paused request through a callback of
//! its own, so the request keeps a short timer running: a call to the sidecar's
//! `GET /v1/flow/wait?ms=10`, answered after 10 ms. On each answer it checks its place
//! again (which also keeps its entry alive); when it is let go, it is routed as usual and
//! forwarded. A full band is refused with 429, a request past its time to live with 503, both
//! with `Retry-After` in the caller's dialect; a client that goes away leaves the queue.

use std::time::Duration;

use ferrogate_core::flow::Gate;
use ferrogate_core::openai::ApiError;
use proxy_wasm::traits::HttpContext;
use proxy_wasm::types::Action;

use super::Stream;
use crate::{flow_gate, sidecar_call};

/// The sidecar's timer: a waiting request checks its place every 10 ms.
const TIMER_PATH: &str = "/v1/flow/wait?ms=10";

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
    /// The timer call in flight.
    pub(crate) timer: Option<u32>,
}

/// What the balancer's gate said about a flow-controlled model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FlowOutcome {
    /// The model's name.
    pub(crate) model: String,
    /// The gate's answer (never [`Gate::Go`]).
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
                    self.flow = Some(FlowWait { model, seq, deadline_ms, since_ns, timer: None });
                    self.shared.metrics.borrow_mut().flow(FlowEvent::Queued);
                }
                if let Some(w) = self.flow.as_mut() {
                    w.seq = seq;
                }
                if self.start_flow_timer() {
                    return Action::Pause;
                }
                self.leave_queue();
                self.reply_error(&ApiError::unavailable("The model is saturated and requests cannot be queued here."))
            }
            Gate::Full => {
                self.shared.metrics.borrow_mut().flow(FlowEvent::Full);
                let e =
                    ApiError::rate_limited(format!("The queue of model {:?} is full; retry shortly.", outcome.model));
                self.reply_error_with(&e, Some(("retry-after", "1")))
            }
            Gate::Expired | Gate::Go => {
                self.flow_left_queue();
                self.shared.metrics.borrow_mut().flow(FlowEvent::Expired);
                let msg = format!("Waited the queue's time to live for model {:?}; retry shortly.", outcome.model);
                self.reply_error_with(&ApiError::unavailable(msg), Some(("retry-after", "1")))
            }
        }
    }

    fn start_flow_timer(&mut self) -> bool {
        // The plugin is shared (an `Rc`): its sidecar settings are borrowed, not copied.
        let Some(plugin) = self.shared.plugin.clone() else { return false };
        let Some(sidecar) = plugin.sidecar.as_ref() else { return false };
        let timeout = Duration::from_millis(1_000);
        match sidecar_call::call(sidecar, "GET", TIMER_PATH, &[], None, timeout) {
            Ok(token) => {
                if let Some(w) = self.flow.as_mut() {
                    w.timer = Some(token);
                }
                true
            }
            Err(e) => {
                log::debug!("#{} flow-control timer not started: {e:?}", self.id);
                false
            }
        }
    }

    /// Whether `token` is this request's timer.
    pub(super) fn is_flow_timer(&self, token: u32) -> bool {
        self.flow.as_ref().is_some_and(|w| w.timer == Some(token))
    }

    /// The timer went off: route again (the gate decides whether the request goes now).
    pub(super) fn on_flow_timer(&mut self) {
        if let Some(w) = self.flow.as_mut() {
            w.timer = None;
        }
        let Some(plugin) = self.shared.plugin.clone() else { return };
        if self.timed(|s| s.finish(&plugin)) == Action::Continue {
            self.resume_http_request();
        }
    }

    /// The request left the queue to be served: count its wait.
    pub(super) fn flow_left_queue(&mut self) {
        if let Some(w) = self.flow.take() {
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
}
