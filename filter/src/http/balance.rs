//! The route decision's choices, made by the model's balancer (`ferrogate_core::balance`):
//! the request's `x-session-id`, conversation and a random number, the routed model's LoRA
//! adapter (`lora_aware`, [`Routing::adapter`]), the proxy-wide in-flight
//! counts from shared data ([`crate::inflight`]) and the targets feed's health and engine load.
//! The pick is counted in flight at once and released, with its outcome reported to the
//! balancer, when the stream ends (`on_log`, client disconnects included). Prefix affinity
//! reads and writes the proxy-wide record in shared data ([`crate::prefix_table`]).

use ferrogate_core::balance::{conversation, Observed, Outcome, Request, Routing};
use ferrogate_core::config::Config;
use ferrogate_core::openai::ApiError;
use ferrogate_core::route::{route_request_with, Api, Choose, Rotation, RouteDecision};

use super::flow_wait::FlowOutcome;
use super::Stream;
use crate::metrics::KvDecision;
use crate::prefix_table::SharedPrefixTable;
use crate::routing::next_random;
use crate::{flow_gate, inflight};
use ferrogate_core::flow::{Caller, FlowControl, Gate, Owner};
use ferrogate_core::kv::{score_model, KvIndex, Score};

/// A request counted in flight on a slot of a model.
pub(crate) struct Pick {
    model: usize,
    slot: usize,
    slots: usize,
    fingerprint: u64,
    /// Shared-data key of the model's in-flight counts (`None`: one slot, not counted).
    key: Option<String>,
    queue_depth: u64,
    prompt_tokens: u64,
}

/// [`Choose`] over the VM's balancers for one request.
struct Chooser<'a> {
    routing: &'a mut Routing,
    /// Target ids earlier attempts tried: never picked again.
    tried: &'a [String],
    /// An endpoint picker's subset and fallback count.
    epp: Option<&'a super::epp::EppAsk>,
    /// The fallback endpoints found after the pick (endpoint picker only).
    found: Vec<String>,
    request: Request<'a>,
    now_ms: u64,
    counts: Vec<u32>,
    picked: Option<Pick>,
    /// The request's token ids and the VM's KV index, for `precise_cache_aware`.
    kv: (&'a [u32], &'a KvIndex),
    /// Per slot, the KV score of the request (kept to avoid allocating per pick).
    scores: Vec<u32>,
    /// How the `precise_cache_aware` pick went, when the model has that strategy.
    kv_decision: Option<KvDecision>,
    /// The request's `kv_tokenize` call failed.
    tokenize_failed: bool,
    /// Flow control: who asks, its queue entry and deadline when it waits already, each
    /// slot's room, and what the gate said when it did not let the request go.
    flow: FlowAsk,
}

/// A request's side of flow control's gate during one routing.
struct FlowAsk {
    caller: Caller,
    ticket: Option<(u64, u64)>,
    room: Vec<u32>,
    outcome: Option<FlowOutcome>,
    /// The request held an entry and the gate let it go.
    went: bool,
    /// The entry the gate put in transit for this request (its own, or one it joined with):
    /// confirmed once the request holds its target, restored if it lost it.
    transit: Option<u64>,
}

impl Chooser<'_> {
    /// Scores model `model`'s slots by the KV index into `scores`, when it routes by KV events.
    fn kv_scores(&mut self, config: &Config, model: usize, lora: Option<&str>) -> bool {
        let (tokens, index) = self.kv;
        if !config.models.get(model).is_some_and(|m| m.strategy.uses_kv_index()) {
            return false;
        }
        let score =
            if tokens.is_empty() { None } else { score_model(config, model, index, tokens, lora, &mut self.scores) };
        let decision = match score {
            Some(Score::Hit(_)) => KvDecision::Hit,
            Some(Score::Miss) => KvDecision::Miss,
            Some(Score::Neutral) => KvDecision::Neutral,
            None if self.tokenize_failed => KvDecision::TokenizeFallback,
            None => KvDecision::Neutral,
        };
        self.kv_decision = Some(decision);
        decision == KvDecision::Hit
    }
}

impl Chooser<'_> {
    /// Flow control's gate for model `model`: true when the request may pick now (saturated
    /// slots are added to `excluded`); otherwise the outcome says whether it waits or is refused.
    fn flow_gate(&mut self, config: &Config, model: usize, fc: &FlowControl, excluded: &mut Vec<usize>) -> bool {
        let free = self.routing.room(config, model, &self.counts, self.now_ms, excluded, fc, &mut self.flow.room);
        for (i, &r) in self.flow.room.iter().enumerate() {
            if r == 0 && !excluded.contains(&i) {
                excluded.push(i);
            }
        }
        let Some(name) = config.models.get(model).map(|m| m.name.as_str()) else { return false };
        let limits = fc.band(self.flow.caller.band);
        let me = self.flow.ticket.map(|(seq, _)| seq);
        match flow_gate::gate(name, me, self.flow.caller, limits, free, self.now_ms) {
            Gate::Go => true,
            Gate::Went(seq) => {
                self.flow.went = me.is_some();
                self.flow.transit = Some(seq);
                true
            }
            gate => {
                self.hold(name, gate, limits.1);
                false
            }
        }
    }

    fn hold(&mut self, model: &str, gate: Gate, ttl_ms: u64) {
        let deadline_ms = self.flow.ticket.map_or(self.now_ms.saturating_add(ttl_ms), |(_, d)| d);
        self.flow.outcome = Some(FlowOutcome { model: model.to_string(), gate, deadline_ms });
    }

    /// The gate let the request go but its slot filled in between: back in its place (a
    /// newcomer queues at the end).
    fn flow_lost_race(&mut self, config: &Config, model: usize, fc: &FlowControl) {
        let Some(name) = config.models.get(model).map(|m| m.name.as_str()) else { return };
        let caller = self.flow.caller;
        let limits = fc.band(caller.band);
        let gate = match self.flow.transit.take() {
            Some(seq) => {
                flow_gate::restore(name, seq, self.now_ms);
                self.flow.went = false;
                Gate::Wait(seq)
            }
            _ => flow_gate::gate(name, None, caller, limits, 0, self.now_ms),
        };
        self.hold(name, gate, limits.1);
    }

    /// The request the gate let go holds its target, or has none to take: it stops counting
    /// against the model's room and the next in line is woken.
    fn flow_settled(&self, config: &Config, model: usize) {
        if let (Some(seq), Some(m)) = (self.flow.transit, config.models.get(model)) {
            flow_gate::confirm(&m.name, seq);
        }
    }
}

impl Chooser<'_> {
    /// An endpoint picker's fallbacks after the pick of `slot`: the balancer's next choices
    /// among the model's pool endpoints (by KV score when `scored`, then queue).
    fn find_fallbacks(&mut self, config: &Config, model: usize, slot: usize, scored: bool) {
        let n = self.epp.map_or(0, |e| e.fallbacks);
        if n == 0 {
            return;
        }
        let kv = scored.then_some(self.scores.as_slice());
        let Some(m) = config.models.get(model) else { return };
        for next in self.routing.next_choices(model, slot, kv, n) {
            let provider = m.targets.get(next.target).and_then(|t| config.providers.get(t.provider));
            let address = next.endpoint.and_then(|e| provider?.endpoints.get(e));
            self.found.extend(address.cloned());
        }
    }
}

impl Choose for Chooser<'_> {
    fn target(&mut self, config: &Config, model: usize) -> Option<(usize, Option<usize>)> {
        let Some(m) = self.routing.model(model) else {
            return Rotation(self.request.random).target(config, model);
        };
        let (fingerprint, slots) = (m.fingerprint(), m.slots().len());
        let flow = config.models.get(model)?.flow.as_ref();
        // With one slot there is nothing to compare: no shared in-flight count (three
        // shared-data calls and a key per request saved), unless flow control bounds it;
        // exclusions and parking still apply.
        let counted = slots > 1 || flow.is_some();
        let key = if counted { Some(inflight::key(&config.models.get(model)?.name)) } else { None };
        if let Some(key) = &key {
            inflight::read(key, fingerprint, &mut self.counts);
        }
        let mut excluded = Stream::excluded(self.tried, config, model, slots);
        if let Some(subset) = self.epp.and_then(|e| e.subset.as_ref()) {
            subset.exclude_slots(config, model, m.slots(), &mut excluded);
        }
        if let Some(fc) = flow {
            if !self.flow_gate(config, model, fc, &mut excluded) {
                return None;
            }
        }
        // The LoRA adapter is the routed model's (a fallback is another model), from the config.
        let mut request = Request { adapter: self.routing.adapter(config, model), ..self.request };
        let scored = self.kv_scores(config, model, request.adapter);
        if scored {
            request.kv = Some(&self.scores);
        }
        let Some(p) = self.routing.pick_excluding(config, model, &request, &self.counts, self.now_ms, &excluded) else {
            self.flow_settled(config, model);
            return None;
        };
        if let (Some(key), Some(fc)) = (&key, flow) {
            let cap = self.routing.slot_cap(config, model, p.slot);
            if !inflight::try_add(key, fingerprint, slots, p.slot, cap) {
                self.flow_lost_race(config, model, fc);
                return None;
            }
            self.flow_settled(config, model);
        } else if let Some(key) = &key {
            inflight::add(key, fingerprint, slots, p.slot, 1);
        }
        self.find_fallbacks(config, model, p.slot, scored);
        let (queue_depth, prompt_tokens) = (p.queue_depth, p.prompt_tokens);
        self.picked = Some(Pick { model, slot: p.slot, slots, fingerprint, key, queue_depth, prompt_tokens });
        Some((p.at.target, p.at.endpoint))
    }

    fn endpoint(&mut self, config: &Config, provider: usize) -> Option<usize> {
        let (now_ms, random) = (self.now_ms, self.request.random);
        let Some(subset) = self.epp.and_then(|e| e.subset.as_ref()) else {
            return self.routing.endpoint(config, provider, now_ms, random);
        };
        let endpoints = config.providers.get(provider).map_or(&[][..], |p| p.endpoints.as_slice());
        let admits = |i: usize| endpoints.get(i).is_some_and(|a| subset.admits(a));
        self.routing.endpoint_where(config, provider, now_ms, random, admits)
    }
}

impl Stream {
    /// Routes the buffered request with the balancers of its configuration.
    pub(super) fn route_balanced<'c>(
        &mut self,
        config: &'c Config,
        api: Api,
        (path, content_type): (&str, Option<&[u8]>),
        body: &[u8],
    ) -> Result<RouteDecision<'c>, ApiError> {
        let random = next_random(&self.shared.rng);
        let Some(routing) = self.routing.clone() else {
            return route_request_with(config, self.caller, api, path, content_type, body, &mut Rotation(random));
        };
        let mut routing = routing.borrow_mut();
        self.load_passive(&mut routing, config);
        let request = Request {
            session: self.session.as_deref(),
            conversation: conversation(body),
            random,
            prefixes: Some(&SharedPrefixTable),
            adapter: None, // per model: see `Chooser::target`
            kv: None,      // per model too
        };
        // The running callback's time: a request routed again after waiting (a flow-control
        // queue, a tokenize call) sees health, parking and its queue as they are now.
        let now_ms = self.callback_start_ns.max(self.started_ns) / 1_000_000;
        let tried = std::mem::take(&mut self.attempt.tried);
        let index = self.shared.kv.clone();
        let index = index.borrow();
        let mut chooser = Chooser {
            routing: &mut routing,
            tried: &tried,
            epp: self.epp.as_deref(),
            found: Vec::new(),
            request,
            now_ms,
            counts: Vec::new(),
            picked: None,
            kv: (&self.token_ids, &index),
            scores: Vec::new(),
            kv_decision: None,
            tokenize_failed: self.tokenize == Some(super::tokenize::Tokenize::Failed),
            flow: FlowAsk {
                caller: self.flow_caller(config),
                ticket: self.flow.as_ref().map(|w| (w.seq, w.deadline_ms)),
                room: Vec::new(),
                outcome: None,
                went: false,
                transit: None,
            },
        };
        let result = route_request_with(config, self.caller, api, path, content_type, body, &mut chooser);
        self.pick = chooser.picked.take();
        let found = std::mem::take(&mut chooser.found);
        let (went, outcome, kv_decision) = (chooser.flow.went, chooser.flow.outcome.take(), chooser.kv_decision);
        drop(chooser);
        if let Some(decision) = kv_decision {
            self.shared.metrics.borrow_mut().kv_decision(decision);
        }
        self.attempt.tried = tried;
        if let Some(epp) = self.epp.as_mut() {
            epp.found = found;
        }
        if let (Ok(d), Some(pick)) = (&result, &self.pick) {
            self.attempt.upstream = Some((d.provider_index, d.endpoint_index));
            let (model, slot) = (pick.model, pick.slot);
            self.announce(&routing, config, model, slot, now_ms);
        }
        drop(routing);
        self.after_flow_gate(result.is_ok(), went, outcome);
        result
    }

    /// Who the request is at flow control's gate: its key's priority and index.
    fn flow_caller(&self, config: &Config) -> Caller {
        let index = self.caller.key_index();
        let band = index.and_then(|i| config.keys.get(i)).map_or(0, |k| k.priority);
        let owner = Owner { waker: self.shared.flow_waker.get(), ctx: self.id };
        Caller { band, fair: index.and_then(|i| u32::try_from(i).ok()).unwrap_or(u32::MAX), owner }
    }

    /// What routing did at a gate: the request left the queue, waits, or went elsewhere (a
    /// fallback model took it, so an entry it holds is given up).
    fn after_flow_gate(&mut self, routed: bool, went: bool, outcome: Option<FlowOutcome>) {
        if went {
            self.flow_left_queue();
        }
        match outcome {
            Some(o) if routed => {
                if let Gate::Wait(seq) = o.gate {
                    flow_gate::leave(&o.model, seq);
                }
                self.flow_left_queue();
            }
            o => self.flow_pending = o,
        }
    }

    /// At the end of the stream: the request leaves the in-flight count and the balancer
    /// learns how it went. Idempotent.
    pub(super) fn release_pick(&mut self, now_ns: u64) {
        let Some(pick) = self.pick.take() else { return };
        if let Some(key) = &pick.key {
            inflight::add(key, pick.fingerprint, pick.slots, pick.slot, -1);
            // A slot of a flow-controlled model is free: the next in line goes now, not later.
            if let Some(m) = self.config.as_deref().and_then(|c| c.models.get(pick.model)).filter(|m| m.flow.is_some())
            {
                flow_gate::wake_head(&m.name);
            }
        }
        let outcome = Outcome {
            success: self.response_complete && (200..300).contains(&self.status),
            latency_ms: now_ns.saturating_sub(self.started_ns) / 1_000_000,
            ttft_ms: self.first_byte_ns.map(|t| t.saturating_sub(self.started_ns) / 1_000_000),
            queue_depth: pick.queue_depth,
            prompt_tokens: pick.prompt_tokens,
        };
        if let Some(routing) = &self.routing {
            routing.borrow_mut().observe(pick.model, pick.slot, Observed::Finished(outcome));
        }
    }
}
