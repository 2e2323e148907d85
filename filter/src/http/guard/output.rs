//! The answer's side of guardrails, in the client's dialect (after translation): a streamed
//! answer goes through [`SseGuard`] event by event, holding back only the policy's window of
//! text; any other successful answer is held whole (its headers too, so a refusal can still
//! change the status), scanned, restored, checked, then sent.

use ferrogate_core::config::guardrails::Guardrails;
use ferrogate_core::guard::apply::{self, Outcome, Stage};
use ferrogate_core::guard::sse::SseGuard;
use ferrogate_core::guard::stream;
use ferrogate_core::openai::ApiError;
use proxy_wasm::traits::HttpContext;
use proxy_wasm::types::Action;

use super::super::Stream;
use super::checks::{replace_texts, Pending};

/// What the answer's side holds.
#[derive(Default)]
pub(super) struct Answer {
    /// A non-streamed answer is held whole for the output rules.
    hold: bool,
    /// The answer to send once the output checks answer, and the size it replaces.
    held: Option<(Vec<u8>, usize)>,
    /// A streamed answer's guard.
    sse: Option<Box<SseGuard>>,
    /// The policies whose output rules are the stream's stages, in order.
    stage_policies: Vec<usize>,
    /// The stream's last stage restores placeholders.
    restore: bool,
    /// The stream's matches were added to the request's tallies.
    tallied: bool,
}

/// The stages of a streamed answer: each policy's output rules, then the restoring.
fn stages<'g>(g: &'g Guardrails, policies: &[usize], restore: bool) -> Vec<stream::Stage<'g>> {
    let rules = policies.iter().filter_map(|p| g.policy(*p)).map(|p| stream::Stage::Rules(&p.output));
    rules.chain(restore.then_some(stream::Stage::Restore)).collect()
}

impl Stream {
    /// At the response headers (`status` known): prepares the answer's guardrails; true when
    /// the headers must be held (a whole answer is scanned before anything is sent).
    pub(in crate::http) fn guard_answer_headers(&mut self, streaming: bool, has_length: bool) -> bool {
        let Some(config) = self.config.clone() else { return false };
        let Some(state) = self.guard.as_mut() else { return false };
        let g = &config.guardrails;
        let wanted = state.policies.iter().filter_map(|p| g.policy(*p)).any(|p| p.has_output());
        if !wanted || state.blocked.is_some() || !(200..300).contains(&self.status) {
            return false;
        }
        if streaming {
            let Some((client, _)) = self.shapes else { return false };
            let with_rules =
                state.policies.iter().copied().filter(|p| g.policy(*p).is_some_and(|x| !x.output.is_empty()));
            state.answer.stage_policies = with_rules.collect();
            state.answer.restore = state.vault.has_restorable();
            if state.answer.stage_policies.is_empty() && !state.answer.restore {
                return false;
            }
            let labels = state.answer.stage_policies.iter().filter_map(|p| g.policy(*p)).map(|p| p.name.clone());
            state.answer.sse = Some(Box::new(SseGuard::new(client, labels.collect())));
        } else {
            if self.api_kind.and_then(apply::answer_shape).is_none() {
                return false;
            }
            state.answer.hold = true;
        }
        if has_length {
            self.set_http_response_header("content-length", None);
        }
        !streaming
    }

    /// True while a whole answer is held for the output rules.
    pub(in crate::http) fn guard_holds_answer(&self) -> bool {
        self.guard.as_ref().is_some_and(|s| s.answer.hold)
    }

    /// True when a streamed answer goes through the guard.
    pub(in crate::http) fn guard_streams(&self) -> bool {
        self.guard.as_ref().is_some_and(|s| s.answer.sse.is_some())
    }

    /// A chunk of a streamed answer in the client's dialect: the bytes to send instead.
    pub(in crate::http) fn guard_stream(&mut self, chunk: &[u8], end_of_stream: bool) -> Vec<u8> {
        let Some(config) = self.config.clone() else { return chunk.to_vec() };
        let Some(state) = self.guard.as_mut() else { return chunk.to_vec() };
        let g = &config.guardrails;
        let stages = stages(g, &state.answer.stage_policies, state.answer.restore);
        let Some(sse) = state.answer.sse.as_mut() else { return chunk.to_vec() };
        let mut out = sse.feed(&stages, &mut state.vault, chunk);
        if end_of_stream {
            out.extend(sse.finish(&stages, &mut state.vault));
        }
        if let (Some((stage, rule)), None) = (sse.blocked(), &state.blocked) {
            let policy = state.answer.stage_policies.get(stage).copied().unwrap_or(usize::MAX);
            let name = g.policy(policy).and_then(|p| p.output.rules().get(rule)).map_or("", |r| r.name.as_str());
            state.blocked = Some(super::label(g, policy, name));
            self.reason = Some("guardrail_blocked");
        }
        if (end_of_stream || sse.blocked().is_some()) && !state.answer.tallied {
            // A blocked stream drops what follows, but its guard stays to drop it.
            state.answer.tallied = true;
            let tallies: Vec<_> = sse.tallies().to_vec();
            for (stage, tally) in tallies.iter().enumerate() {
                let Some(policy) = state.answer.stage_policies.get(stage) else { continue };
                let mine = state.tallies.of(*policy, Stage::Output);
                for (i, n) in tally.counts.iter().enumerate() {
                    mine.add_n(i, *n);
                }
            }
        }
        out
    }

    /// The whole answer in the client's dialect (`body_size`: the bytes it replaces): output
    /// rules, restore, then the output checks (the answer waits for them).
    pub(in crate::http) fn guard_answer(&mut self, bytes: Vec<u8>, body_size: usize) -> Action {
        let (Some(config), Some(shape)) = (self.config.clone(), self.api_kind.and_then(apply::answer_shape)) else {
            return self.send_answer(&bytes, body_size);
        };
        let Some(state) = self.guard.as_mut() else { return self.send_answer(&bytes, body_size) };
        state.answer.hold = false;
        let g = &config.guardrails;
        let outcome =
            apply::body(g, &state.policies, Stage::Output, shape, &bytes, &mut state.vault, &mut state.tallies);
        let bytes = match outcome {
            Outcome::Refused(r) => {
                let rule = super::label(g, r.policy, &r.rule);
                state.blocked = Some(rule.clone());
                let error = ApiError::guardrail_blocked(&rule, "output", None);
                return self.answer_refused(&error, body_size);
            }
            Outcome::Rewritten(b) => b,
            Outcome::Unchanged => bytes,
        };
        let bytes = apply::restore(shape, &bytes, &state.vault).unwrap_or(bytes);
        if self.start_checks(&config, Stage::Output, shape, &bytes) {
            if let Some(state) = self.guard.as_mut() {
                state.answer.held = Some((bytes, body_size));
            }
            return Action::Pause;
        }
        let pending = self.guard.as_mut().map(|s| std::mem::take(&mut s.pending)).unwrap_or_default();
        self.answer_after_checks(pending, bytes, body_size)
    }

    /// The output checks answered while the answer waited: send it (or the refusal).
    pub(super) fn release_answer(&mut self, pending: Pending) {
        let Some((bytes, size)) = self.guard.as_mut().and_then(|s| s.answer.held.take()) else { return };
        let _ = self.answer_after_checks(pending, bytes, size);
        self.resume_http_response();
    }

    fn answer_after_checks(&mut self, pending: Pending, bytes: Vec<u8>, body_size: usize) -> Action {
        if let Some(error) = &pending.refusal {
            return self.answer_refused(error, body_size);
        }
        let shape = self.api_kind.and_then(apply::answer_shape);
        let rewritten = match (pending.rewrite_texts(), shape) {
            (Some(texts), Some(shape)) => replace_texts(shape, &bytes, texts),
            _ => None,
        };
        self.send_answer(rewritten.as_deref().unwrap_or(&bytes), body_size)
    }

    /// Replaces the held answer with `error` in the client's dialect.
    fn answer_refused(&mut self, error: &ApiError, body_size: usize) -> Action {
        self.reason = Some(error.code.unwrap_or(error.kind));
        self.status = error.status;
        self.set_http_response_header(":status", Some(&error.status.to_string()));
        let body = error.body_in(self.dialect);
        self.set_http_response_body(0, body_size, &body);
        Action::Continue
    }

    fn send_answer(&mut self, bytes: &[u8], body_size: usize) -> Action {
        self.capture_bytes(bytes);
        self.set_http_response_body(0, body_size, bytes);
        Action::Continue
    }
}
