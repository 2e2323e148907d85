//! Cutting a streamed answer that overruns its budget (a key with `limits: { overrun: cut }`):
//! armed at admission with the stream's allowance, metered while the answer streams
//! ([`ferrogate_core::limits::cut`]), and once the allowance is crossed: nothing more of the
//! upstream's body, the final error event in the client's dialect, and a usage record — so a
//! settlement — of what was delivered.
//!
//! The upstream itself is not reset: proxy-wasm cannot end the client's response early without
//! resetting it too (`close_stream` resets the stream, and the final event with it), so every
//! later chunk is replaced by nothing until the upstream ends, or until the client, which has
//! its error, goes away and the proxy resets the upstream.

use ferrogate_core::config::Config;
use ferrogate_core::limits::cut::{self, Allowance, Meter, Overrun, Room};
use ferrogate_core::limits::estimate;
use ferrogate_core::route::Api;
use ferrogate_core::translate::{Context, Inbound, Outbound, Pair};
use ferrogate_core::usage::price_of;

use super::Stream;
use crate::limits::SharedCounters;

/// The cut of one stream (its meter is the stream's, see [`super::delivery`]).
pub(super) struct Guard {
    pub(super) allowance: Allowance,
    cut: bool,
}

impl Stream {
    /// Arms the cut for an admitted request of a key whose policy is `cut`, when a token or
    /// USD limit bounds its answer (and the API streams text: `shapes` is set).
    pub(super) fn arm_overrun(&mut self, config: &Config, (provider, upstream_model): (&str, &str), body: &[u8]) {
        let Some(reservation) = self.reservation else { return };
        let Some(key) = config.key(self.caller).filter(|k| k.limits.overrun == Overrun::Cut) else { return };
        if self.shapes.is_none() {
            return;
        }
        let plan = config.limit_plans.for_key(self.caller.key_index());
        let room = Room::read(plan, reservation.amounts, self.started_ns / 1_000_000, &mut SharedCounters);
        let (_, completion) = estimate::estimate(body);
        let price = price_of(&config.pricing, provider, upstream_model).map(|p| p.output_per_mtok);
        let Some(allowance) = cut::allowance(completion, room, price) else { return };
        log::debug!("#{} key {}: the answer may stream {} tokens", self.id, key.name, allowance.completion_tokens);
        self.overrun = Some(Guard { allowance, cut: false });
    }

    /// Whether the answer was cut (the rest of the upstream's body is dropped).
    pub(super) fn was_cut(&self) -> bool {
        self.overrun.as_ref().is_some_and(|g| g.cut)
    }

    /// Meters a chunk of the upstream's answer: where to cut it, if it takes the answer past
    /// its allowance (not at the very end of the stream: then nothing is left to hold back).
    /// Without a cut armed the meter only counts.
    pub(super) fn metered(&mut self, chunk: &[u8], end_of_stream: bool) -> Option<usize> {
        let at = self.meter.as_mut()?.feed(chunk)?;
        (!end_of_stream || at < chunk.len()).then_some(at)
    }

    /// Ends the client's stream: `out` (what it gets of the chunk) is followed by the final
    /// error event, and the response counts as complete.
    pub(super) fn cut_stream(&mut self, out: &mut Vec<u8>) {
        // Metered on the client's bytes, the meter saw the last event the client gets.
        let output_metered = meters_output(self.translation.as_ref());
        let translated_sequence =
            self.stream_translator.as_ref().filter(|_| !output_metered).map(|t| t.next_sequence());
        let (Some((client, _)), Some(g)) = (self.shapes, self.overrun.as_mut()) else { return };
        g.cut = true;
        let delivered = self.meter.as_ref().map_or(0, Meter::delivered);
        let sequence = translated_sequence.or_else(|| self.meter.as_ref()?.sequence().map(|s| s + 1)).unwrap_or(0);
        let plan = self.config.as_deref().map(|c| c.limit_plans.for_key(self.caller.key_index()));
        let error = cut::cut_error(&g.allowance, plan.and_then(|p| p.get(g.allowance.spec)));
        out.extend(cut::final_event(client, &error, sequence));
        self.shared.metrics.borrow_mut().cut(g.allowance.metric);
        log::info!("#{} stream cut after about {delivered} completion tokens: {}", self.id, error.message);
        self.response_complete = true;
    }
}

/// The client's dialect and the dialect the meter reads of a routed request whose API streams
/// text (`None` for the others: embeddings, images, audio). The meter reads the upstream's
/// server-sent events, except Bedrock's binary ConverseStream: there it reads the translation
/// the client gets ([`meters_output`]).
pub(super) fn stream_shapes(api: Api, translation: Option<&(Pair, Context)>) -> Option<(Inbound, Inbound)> {
    let client = client_stream(api)?;
    let upstream = match translation {
        Some((pair, _)) => upstream_stream(pair.outbound).unwrap_or(client),
        None => client,
    };
    Some((client, upstream))
}

/// Whether a stream is metered (and cut) on the client's translated bytes rather than on the
/// upstream's: ConverseStream's frames are no server-sent events.
pub(super) fn meters_output(translation: Option<&(Pair, Context)>) -> bool {
    translation.is_some_and(|(pair, _)| upstream_stream(pair.outbound).is_none())
}

/// The stream dialect of an API's answers, for the APIs that stream text.
fn client_stream(api: Api) -> Option<Inbound> {
    match api {
        Api::Completions => Some(Inbound::OpenAiChat),
        _ if api.is_generation() => api.inbound(),
        _ => None,
    }
}

/// The stream dialect of a provider translated to, when it is server-sent events.
fn upstream_stream(outbound: Outbound) -> Option<Inbound> {
    match outbound {
        Outbound::OpenAiChat => Some(Inbound::OpenAiChat),
        Outbound::Anthropic => Some(Inbound::Anthropic),
        Outbound::Gemini => Some(Inbound::Gemini),
        Outbound::Converse => None,
    }
}
