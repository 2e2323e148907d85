//! `handle_response`: a buffered answer is translated back to the caller's dialect when the
//! provider speaks another, its usage read, its record written and its limits settled.
//!
//! Traefik hands the guest an answer only when it buffered it whole (`buffer_response`), which
//! this guest asks for per request: for translated answers and for non-streamed ones it must
//! account. A stream it does not translate passes through untouched and unseen: its record says
//! `streamed` with no status or tokens, and its reservation stays at the estimate.

use std::rc::Rc;

use ferrogate_core::config::Config;
use ferrogate_core::headers::REQUEST_ID;
use ferrogate_core::limits::{Amounts, Reservation};
use ferrogate_core::route::{Api, RouteDecision};
use ferrogate_core::translate::stream::StreamTranslator;
use ferrogate_core::translate::{Context, Pair};
use ferrogate_core::usage::{cost_micro_usd, upstream_dialect, RecordView, Tracker, Usage, UsageDialect};

use crate::abi::{self, Kind, Level, FEATURE_BUFFER_RESPONSE};
use crate::guest::{now_ns, Guest};
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
    /// Traefik holds the answer for this guest.
    buffered: bool,
}

impl Pending {
    /// Records what the answer needs and asks Traefik to buffer it when it must be read.
    pub(crate) fn new(
        req: Request,
        config: &Rc<Config>,
        api: Api,
        d: RouteDecision<'_>,
        (reservation, streaming): (Option<Reservation>, bool),
    ) -> Pending {
        let accounted = reservation.is_some() || api.is_generation();
        let buffered = d.translation.is_some() || (!streaming && accounted);
        if buffered {
            abi::enable(FEATURE_BUFFER_RESPONSE);
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
            buffered,
        }
    }
}

impl Guest {
    /// The response phase of the request this instance forwarded.
    pub(crate) fn on_response(&mut self, _ctx: u32, is_error: bool) {
        let Some(mut p) = self.pending.take() else { return };
        let (status, usage, first_byte_ns) = if p.buffered && !is_error { p.finish_answer() } else { (0, None, None) };
        let usage = usage.unwrap_or_default();
        let now = now_ns();
        let provider = p.config.providers.get(p.provider).map_or("", |pr| pr.name.as_str());
        let cost = cost_micro_usd(&p.config.pricing, provider, &p.upstream_model, &usage);
        if let Some(path) = self.settings.as_ref().ok().and_then(|s| s.usage_file.as_deref()) {
            let key = p.config.key(p.req.caller);
            let mut record = RecordView {
                request_id: &p.req.id,
                key: key.map(|k| k.name.as_str()),
                groups: key.map(|k| k.group_names.as_slice()).unwrap_or_default(),
                model_requested: &p.model_requested,
                provider,
                upstream_model: &p.upstream_model,
                status,
                latency_ms: now.saturating_sub(p.req.started_ns) / 1_000_000,
                ttft_ms: first_byte_ns.map(|t: u64| t.saturating_sub(p.req.started_ns) / 1_000_000),
                started_at_unix_ms: p.req.started_ns / 1_000_000,
                streamed: p.streaming,
                admitted: p.reservation.is_some(),
                ..RecordView::default()
            };
            record.set_usage(&usage);
            record.cost_micro_usd = cost;
            crate::usage_file::append(path, &record);
        }
        if let (Some(reservation), true) = (p.reservation.take(), status != 0) {
            let plan = p.config.limit_plans.for_key(p.req.caller.key_index());
            let used = Amounts { tokens: usage.total_tokens(), micro_usd: cost };
            reservation.settle(plan, used, now / 1_000_000, &mut self.counters);
        }
    }
}

impl Pending {
    /// Reads the buffered answer, translates it when needed and writes it back; returns its
    /// status, usage and when it was read.
    fn finish_answer(&mut self) -> (u16, Option<Usage>, Option<u64>) {
        let mut status = abi::status();
        let body = abi::body(Kind::Response, usize::MAX).unwrap_or_default();
        let read_ns = now_ns();
        let mut tracker = Tracker::new(self.usage_dialect, self.streaming, false);
        let _ = tracker.on_end(&body);
        abi::set_header(Kind::Response, REQUEST_ID, self.req.id.as_bytes());
        if let Some((pair, ctx)) = self.translation.take() {
            let ok = (200..300).contains(&status);
            let out = if ok && self.streaming {
                // Delivered at once: Traefik's buffer held the whole stream.
                let mut translator = StreamTranslator::new(pair, &ctx, self.req.started_ns / 1_000_000_000);
                let mut out = translator.feed(&body);
                out.extend(translator.finish());
                out
            } else if ok {
                pair.response(&body, &ctx, self.req.started_ns / 1_000_000_000).unwrap_or_else(|e| {
                    abi::log_line(
                        Level::Warn,
                        &format!("{} untranslatable answer from the provider: {e}", self.req.id),
                    );
                    status = 502;
                    abi::set_status(502);
                    pair.error_body(502, format!("the provider's answer could not be translated: {e}").as_bytes())
                })
            } else {
                pair.error_body(status, &body)
            };
            if !(ok && self.streaming) {
                abi::set_header(Kind::Response, "content-type", b"application/json");
            }
            // Traefik's host never fixes the length of a rewritten answer.
            abi::set_header(Kind::Response, "content-length", out.len().to_string().as_bytes());
            abi::set_body(Kind::Response, &out);
        } else if !body.is_empty() {
            // Reading a buffered body consumes it: it goes back as it was.
            abi::set_body(Kind::Response, &body);
        }
        (status, tracker.finish(), Some(read_ns))
    }
}
