//! `handle_response`: a buffered answer is translated back to the caller's dialect when the
//! provider speaks another, its usage read, its record written and its limits settled.
//!
//! Traefik hands the guest an answer only when it buffered it whole (`buffer_response`), which
//! this guest asks for per request: for translated answers and for non-streamed ones it must
//! account or guard (output rules, restored placeholders: [`crate::guard`]), and for Bedrock
//! streams, whose event-stream frames become server-sent events here. A stream it does not
//! translate otherwise passes through untouched and unseen: its record says `streamed` with no status
//! or tokens, and its reservation stays at the estimate. Streams are never guarded.

use std::rc::Rc;

use ferrogate_core::clouds::invoke::Reframer;
use ferrogate_core::config::{Config, ProviderKind};
use ferrogate_core::guard::body::Shape;
use ferrogate_core::headers::REQUEST_ID;
use ferrogate_core::limits::{Amounts, Reservation};
use ferrogate_core::route::{Api, RouteDecision};
use ferrogate_core::translate::stream::StreamTranslator;
use ferrogate_core::translate::{Context, Outbound, Pair};
use ferrogate_core::usage::{cost_micro_usd, upstream_dialect, Tracker, UsageDialect};

use crate::abi::{self, Kind, Level, FEATURE_BUFFER_RESPONSE};
use crate::guest::{now_ns, Guest};
use crate::keys::KeyPick;
use crate::record::{self, Names, Outcome};
use crate::request::Request;

/// A forwarded request waiting for its answer.
pub(crate) struct Pending {
    req: Request,
    config: Rc<Config>,
    provider: usize,
    upstream_model: String,
    model_requested: String,
    usage_dialect: UsageDialect,
    translation: Option<(Pair, Context)>,
    reservation: Option<Reservation>,
    streaming: bool,
    /// A Bedrock stream of Claude's events (InvokeModel): made Anthropic's SSE before it is read.
    reframe: bool,
    /// Traefik holds the answer for this guest.
    buffered: bool,
    /// The answer's shape when output guardrails apply to it.
    guard_shape: Option<Shape>,
    /// The pooled key the request went out with.
    key_pick: Option<KeyPick>,
}

impl Pending {
    /// Records what the answer needs and asks Traefik to buffer it when it must be read.
    pub(crate) fn new(
        req: Request,
        config: &Rc<Config>,
        api: Api,
        d: RouteDecision<'_>,
        (reservation, streaming): (Option<Reservation>, bool),
        key_pick: Option<KeyPick>,
    ) -> Pending {
        let accounted = reservation.is_some() || api.is_generation();
        let guard_shape =
            req.guard.as_ref().and_then(|g| g.answer_shape(&config.guardrails, api)).filter(|_| !streaming);
        let converse = d.translation.as_ref().is_some_and(|(p, _)| p.outbound == Outbound::Converse);
        let bedrock = config.providers.get(d.provider_index).is_some_and(|p| p.kind == ProviderKind::Bedrock);
        let reframe = streaming && bedrock && !converse;
        let buffered = reframe || d.translation.is_some() || (!streaming && (accounted || guard_shape.is_some()));
        if buffered {
            abi::enable(FEATURE_BUFFER_RESPONSE);
        }
        if guard_shape.is_some() {
            // A compressed answer could not be scanned: the upstream is asked for a plain one.
            abi::remove(Kind::Request, "accept-encoding");
        }
        abi::set_header(Kind::Response, REQUEST_ID, req.id.as_bytes());
        Pending {
            req,
            config: Rc::clone(config),
            provider: d.provider_index,
            upstream_model: d.upstream_model,
            model_requested: d.requested,
            usage_dialect: upstream_dialect(api, d.translation.as_ref().map(|(p, _)| p.outbound)),
            translation: d.translation,
            reservation,
            streaming,
            reframe,
            buffered,
            guard_shape,
            key_pick,
        }
    }
}

impl Guest {
    /// The response phase of the request this instance forwarded.
    pub(crate) fn on_response(&mut self, _ctx: u32, is_error: bool) {
        let Some(mut p) = self.pending.take() else { return };
        if let Some(pick) = p.key_pick.filter(|_| !is_error) {
            crate::keys::observe(&mut self.keys, &p.config, pick, now_ns() / 1_000_000);
        }
        let mut outcome = if p.buffered && !is_error { p.finish_answer() } else { Outcome::default() };
        let provider = p.config.providers.get(p.provider).map_or("", |pr| pr.name.as_str());
        outcome.cost_micro_usd = cost_micro_usd(&p.config.pricing, provider, &p.upstream_model, &outcome.usage);
        (outcome.streamed, outcome.admitted) = (p.streaming, p.reservation.is_some());
        let names = Names { requested: &p.model_requested, provider, upstream: &p.upstream_model };
        let path = self.settings.as_ref().ok().and_then(|s| s.usage_file.as_deref());
        record::write(path, &p.config, &p.req, &names, &outcome);
        // An unseen stream keeps its reservation: its estimate is all that is known of it.
        if let (Some(reservation), true) = (p.reservation.take(), outcome.status != 0) {
            let plan = p.config.limit_plans.for_key(p.req.caller.key_index());
            let used = Amounts::model(outcome.usage.total_tokens(), outcome.cost_micro_usd);
            reservation.settle(plan, used, now_ns() / 1_000_000, &mut self.counters);
        }
    }
}

impl Pending {
    /// Reads the buffered answer, translates it when needed and writes it back.
    fn finish_answer(&mut self) -> Outcome {
        let mut status = abi::status();
        let body = abi::body(Kind::Response, usize::MAX).unwrap_or_default();
        let body = self.reframed(status, body);
        let first_byte_ns = Some(now_ns());
        let mut tracker = Tracker::new(self.usage_dialect, self.streaming, false);
        let _ = tracker.on_end(&body);
        abi::set_header(Kind::Response, REQUEST_ID, self.req.id.as_bytes());
        let translated = self.translation.take().map(|(pair, ctx)| self.translate_back(pair, &ctx, &mut status, &body));
        let guarded = self.guard_answer(&mut status, translated.as_deref().unwrap_or(&body));
        if let Some(out) = guarded.or(translated) {
            // Traefik's host never fixes the length of a rewritten answer.
            abi::set_header(Kind::Response, "content-length", out.len().to_string().as_bytes());
            abi::set_body(Kind::Response, &out);
        } else if self.reframe {
            abi::set_header(Kind::Response, "content-length", body.len().to_string().as_bytes());
            abi::set_body(Kind::Response, &body);
        } else if !body.is_empty() {
            // Reading a buffered body consumes it: it goes back as it was.
            abi::set_body(Kind::Response, &body);
        }
        Outcome { status, usage: tracker.finish().unwrap_or_default(), first_byte_ns, ..Outcome::default() }
    }

    /// A successful InvokeModel stream as Anthropic's server-sent events (see
    /// `ferrogate_core::clouds::invoke`); anything else as it came.
    fn reframed(&self, status: u16, body: Vec<u8>) -> Vec<u8> {
        if !self.reframe || !(200..300).contains(&status) {
            return body;
        }
        let mut reframer = Reframer::default();
        let mut out = reframer.feed(&body);
        out.extend(reframer.finish());
        abi::set_header(Kind::Response, "content-type", b"text/event-stream");
        out
    }

    /// The output guardrails over a successful answer in the caller's dialect: the answer to
    /// send instead, or the refusal in the caller's dialect (`status` becomes its).
    fn guard_answer(&mut self, status: &mut u16, answer: &[u8]) -> Option<Vec<u8>> {
        let shape = self.guard_shape.filter(|_| (200..300).contains(status))?;
        let guard = self.req.guard.as_mut()?;
        match guard.output(&self.config.guardrails, shape, answer) {
            Ok(rewritten) => rewritten,
            Err(e) => {
                *status = e.status;
                abi::set_status(e.status);
                abi::set_header(Kind::Response, "content-type", b"application/json");
                Some(e.body_in(self.req.dialect))
            }
        }
    }

    /// The provider's answer in the caller's dialect: a stream translated whole (delivered at
    /// once: Traefik's buffer held all of it), a JSON answer, or an error envelope; an answer
    /// that cannot be translated becomes a 502.
    fn translate_back(&self, pair: Pair, ctx: &Context, status: &mut u16, body: &[u8]) -> Vec<u8> {
        let created = self.req.started_ns / 1_000_000_000;
        if !(200..300).contains(status) {
            abi::set_header(Kind::Response, "content-type", b"application/json");
            return pair.error_body(*status, body);
        }
        if self.streaming {
            let mut translator = StreamTranslator::new(pair, ctx, created);
            let mut out = translator.feed(body);
            out.extend(translator.finish());
            return out;
        }
        abi::set_header(Kind::Response, "content-type", b"application/json");
        pair.response(body, ctx, created).unwrap_or_else(|e| {
            abi::log_line(Level::Warn, &format!("{} untranslatable answer from the provider: {e}", self.req.id));
            *status = 502;
            abi::set_status(502);
            pair.error_body(502, format!("the provider's answer could not be translated: {e}").as_bytes())
        })
    }
}
