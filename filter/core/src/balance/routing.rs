//! [`Routing`]: the balancers of one configuration, with the health and engine load of the
//! targets feed folded in. Built once per configuration snapshot per VM; each request asks
//! [`Routing::pick`] for a *slot* and, for a pooled target, [`Routing::endpoint`].
//!
//! A model's slots are its balancing units: its targets, or — when it has exactly one target
//! and that target's provider has an `endpoints` pool — the pool's endpoints, so the strategy
//! (affinity, load) works per engine replica. A pooled target of a multi-target model gets its
//! endpoint from [`Routing::endpoint`]: the least engine-loaded endpoint that is not parked.
//!
//! Eligibility: a slot is skipped while the feed parks it (a pool slot: its endpoint; a target:
//! every endpoint of its provider). When every slot is parked all are eligible again (fail
//! open: a stale or wrong health view must not take a model down). Passive health
//! ([`crate::passive`], from real answers) and the slots a failing-over request already tried
//! are stricter: such slots are never picked, and a model with nothing else left yields no
//! pick, so the router moves on to its fallbacks.
//!
//! Engine figures past their age bound ([`Routing::set_freshness`]) count as unknown: neutral
//! for the strategies, saturated for flow control's thresholds. Health is not aged: its
//! cooldowns run out on their own (fail open).

use super::{hash64, Balancer, Load, Observed, PickContext, PrefixTable, SharedPrefixes, StrategyKind, TargetSpec};
use crate::config::Config;
use crate::passive::PassiveTable;
use crate::targets::{Freshness, TargetFeed};

mod age;
mod next;
mod room;

/// One balancing unit of a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// Index into the model's `targets`.
    pub target: usize,
    /// Index into the target provider's `endpoints`, for a pool slot.
    pub endpoint: Option<usize>,
}

/// Health and engine load of one endpoint, from the targets feed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EndpointHealth {
    /// Unix ms until which the endpoint is parked (0: not parked).
    pub parked_until_ms: u64,
    /// Requests in the engine's batch.
    pub running: Option<u32>,
    /// Requests queued in the engine.
    pub waiting: Option<u32>,
    /// KV-cache usage per mille.
    pub kv_permille: Option<u16>,
    /// Offload-cache occupancy per mille (LMCache).
    pub cache_permille: Option<u16>,
}

impl EndpointHealth {
    fn parked(&self, now_ms: u64) -> bool {
        now_ms < self.parked_until_ms
    }
}

/// The balancer of one model and its slots.
#[derive(Debug)]
pub struct ModelRouting {
    balancer: Balancer,
    slots: Vec<Slot>,
    fingerprint: u64,
}

impl ModelRouting {
    /// The slots, in balancer order.
    pub fn slots(&self) -> &[Slot] {
        &self.slots
    }

    /// A hash of the slot names: shared per-slot counters written under another layout (an
    /// older snapshot) carry another fingerprint and are not mixed with these.
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    /// The strategy it runs.
    pub fn kind(&self) -> StrategyKind {
        self.balancer.kind()
    }
}

/// What a request offers the balancer, besides load (see [`PickContext`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct Request<'a> {
    /// `x-session-id`.
    pub session: Option<&'a str>,
    /// The conversation text ([`conversation`]).
    pub conversation: &'a [u8],
    /// A fresh random number.
    pub random: u64,
    /// The proxy-wide prefix record for `cache_aware` (see [`super::SharedPrefixes`]).
    pub prefixes: Option<&'a dyn PrefixTable>,
    /// The LoRA adapter asked for, for `lora_aware` ([`Routing::adapter`]).
    pub adapter: Option<&'a str>,
    /// Per slot, the KV-event score of the request's blocks, for `precise_cache_aware`
    /// ([`crate::kv::KvIndex::score`]).
    pub kv: Option<&'a [u32]>,
}

/// The result of [`Routing::pick`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Picked {
    /// Index into the model's slots.
    pub slot: usize,
    /// The slot itself.
    pub at: Slot,
    /// The slot's queue before this request ([`Load::queue`]).
    pub queue_depth: u64,
    /// Estimated prompt tokens.
    pub prompt_tokens: u64,
}

/// Every model's balancer for one configuration, plus the feed's view of every endpoint.
#[derive(Debug, Default)]
pub struct Routing {
    models: Vec<Option<ModelRouting>>,
    /// Per provider: per pool endpoint, or one entry (its authority) without a pool.
    health: Vec<Vec<EndpointHealth>>,
    /// Per provider endpoint (same layout): Unix ms until which passive health parks it.
    passive: Vec<Vec<u64>>,
    /// Some passive entry was applied (an empty table must then clear them).
    passive_any: bool,
    loads: Vec<Load>,
    eligible: Vec<usize>,
    /// `lora_aware` slots per engine ([`residency`]).
    engines: Vec<residency::EngineSlot>,
    /// How current the feed's engine figures are (`None`: they do not age).
    freshness: Option<Freshness>,
}

impl Routing {
    /// Builds a balancer per model (a model whose balancer cannot be built gets none and is
    /// routed by rotation; validation makes that impossible in practice).
    pub fn new(config: &Config) -> Self {
        let models: Vec<_> = (0..config.models.len()).map(|i| model_routing(config, i)).collect();
        let sizes = config.providers.iter().map(|p| p.endpoints.len().max(1));
        let health = sizes.clone().map(|n| vec![EndpointHealth::default(); n]).collect();
        let passive = sizes.map(|n| vec![0; n]).collect();
        let engines = residency::engine_slots(config, &models);
        let (loads, eligible) = (Vec::new(), Vec::new());
        Self { models, health, passive, passive_any: false, loads, eligible, engines, freshness: None }
    }

    /// Model `i`'s routing, if it has a balancer.
    pub fn model(&self, i: usize) -> Option<&ModelRouting> {
        self.models.get(i)?.as_ref()
    }

    /// Takes health and engine load from a targets feed (unknown endpoints: healthy, no load),
    /// and hands `lora_aware` balancers their engines' adapter reports.
    pub fn apply_feed(&mut self, config: &Config, feed: &TargetFeed) {
        for (p, provider) in config.providers.iter().enumerate() {
            let Some(entries) = self.health.get_mut(p) else { continue };
            for (e, entry) in entries.iter_mut().enumerate() {
                let name = provider.endpoints.get(e).unwrap_or(&provider.authority);
                *entry = feed.get(&provider.name, name).map_or_else(EndpointHealth::default, |s| EndpointHealth {
                    parked_until_ms: if s.healthy { 0 } else { s.cooldown_until_ms.unwrap_or(0) },
                    running: s.running,
                    waiting: s.waiting,
                    kv_permille: s.kv_usage_permille,
                    cache_permille: s.cache_occupancy_permille,
                });
            }
        }
        self.apply_residency(config, feed);
    }

    /// Takes passive health: each endpoint's parked-until time from `table`.
    pub fn apply_passive(&mut self, config: &Config, table: &PassiveTable) {
        if table.entries.is_empty() && !self.passive_any {
            return; // The usual case: nothing troubled before or now.
        }
        self.passive_any = !table.entries.is_empty();
        for (p, provider) in config.providers.iter().enumerate() {
            let Some(entries) = self.passive.get_mut(p) else { continue };
            for (e, entry) in entries.iter_mut().enumerate() {
                let name = provider.endpoints.get(e).unwrap_or(&provider.authority);
                *entry = table.parked_until(&provider.name, name);
            }
        }
    }

    /// Picks a slot of model `model`; `in_flight` are the proxy-wide counts per slot (shorter
    /// or empty when unknown). `None` when the model has no balancer.
    pub fn pick(
        &mut self,
        config: &Config,
        model: usize,
        req: &Request<'_>,
        in_flight: &[u32],
        now_ms: u64,
    ) -> Option<Picked> {
        self.pick_excluding(config, model, req, in_flight, now_ms, &[])
    }

    /// [`Routing::pick`] among the slots not in `excluded` and not parked by passive health;
    /// `None` when none is left.
    pub fn pick_excluding(
        &mut self,
        config: &Config,
        model: usize,
        req: &Request<'_>,
        in_flight: &[u32],
        now_ms: u64,
        excluded: &[usize],
    ) -> Option<Picked> {
        self.eligible_slots(config, model, in_flight, now_ms, excluded)?;
        let m = self.models.get_mut(model)?.as_mut()?;
        let ctx = PickContext {
            session: req.session,
            conversation: req.conversation,
            loads: &self.loads,
            random: req.random,
            adapter: req.adapter,
            shared: req.prefixes.map(|table| SharedPrefixes { table, seed: m.fingerprint }),
            kv: req.kv,
            ..PickContext::default()
        };
        let slot = m.balancer.pick(&ctx, &self.eligible)?;
        m.balancer.observe(slot, Observed::Started);
        let queue_depth = ctx.queue(slot);
        let picked = Picked { slot, at: *m.slots.get(slot)?, queue_depth, prompt_tokens: ctx.prompt_tokens() };
        if let Some(adapter) = req.adapter {
            self.share_pick(model, slot, adapter);
        }
        Some(picked)
    }

    /// Fills `loads` and `eligible` for model `model`; `None` when no slot may be used.
    fn eligible_slots(
        &mut self,
        config: &Config,
        model: usize,
        in_flight: &[u32],
        now_ms: u64,
        excluded: &[usize],
    ) -> Option<()> {
        let m = self.models.get(model)?.as_ref()?;
        let target_provider = |s: &Slot| config.models.get(model)?.targets.get(s.target).map(|t| t.provider);
        self.loads.clear();
        self.eligible.clear();
        let mut usable = 0;
        let current = self.figures_current(now_ms);
        for (i, slot) in m.slots.iter().enumerate() {
            let p = target_provider(slot);
            let entries = p.and_then(|p| self.health.get(p)).map_or(&[][..], Vec::as_slice);
            let (mut load, parked) = slot_state(entries, slot.endpoint, now_ms);
            if !current {
                load = Load::default(); // Stale figures say nothing: read them as unknown.
            }
            self.loads.push(Load { in_flight: in_flight.get(i).copied().unwrap_or(0), ..load });
            if excluded.contains(&i) || self.passively_parked(p, slot.endpoint, now_ms) {
                continue;
            }
            usable += 1;
            if !parked {
                self.eligible.push(i);
            }
        }
        if self.eligible.is_empty() && usable > 0 {
            // Fail open on the feed's view only: passive parking and tried slots stay out.
            for (i, slot) in m.slots.iter().enumerate() {
                if !excluded.contains(&i) && !self.passively_parked(target_provider(slot), slot.endpoint, now_ms) {
                    self.eligible.push(i);
                }
            }
        }
        (!self.eligible.is_empty()).then_some(())
    }

    fn passively_parked(&self, provider: Option<usize>, endpoint: Option<usize>, now_ms: u64) -> bool {
        let passive = provider.and_then(|p| self.passive.get(p)).map_or(&[][..], Vec::as_slice);
        passive_parked(passive, endpoint, now_ms)
    }

    /// True when model `model` has a slot outside `excluded` that passive health does not park.
    pub fn has_untried(&self, config: &Config, model: usize, excluded: &[usize], now_ms: u64) -> bool {
        let Some(m) = self.model(model) else { return false };
        m.slots.iter().enumerate().any(|(i, slot)| {
            let p = config.models.get(model).and_then(|m| m.targets.get(slot.target)).map(|t| t.provider);
            !excluded.contains(&i) && !self.passively_parked(p, slot.endpoint, now_ms)
        })
    }

    /// Tells model `model`'s balancer how a request on `slot` went.
    pub fn observe(&mut self, model: usize, slot: usize, event: Observed) {
        if let Some(Some(m)) = self.models.get_mut(model) {
            m.balancer.observe(slot, event);
        }
    }

    /// The pool endpoint of `provider` with the smallest engine queue among those not parked
    /// (all when every one is), ties broken by `random` (stale figures tie them all); `None`
    /// without a pool.
    pub fn endpoint(&self, config: &Config, provider: usize, now_ms: u64, random: u64) -> Option<usize> {
        self.endpoint_where(config, provider, now_ms, random, |_| true)
    }

    /// [`Routing::endpoint`] among the endpoints `allowed` admits (`None` when it admits none).
    pub fn endpoint_where(
        &self,
        config: &Config,
        provider: usize,
        now_ms: u64,
        random: u64,
        allowed: impl Fn(usize) -> bool,
    ) -> Option<usize> {
        let n = config.providers.get(provider)?.endpoints.len();
        let entries = self.health.get(provider)?;
        let passive = self.passive.get(provider).map_or(&[][..], Vec::as_slice);
        let out = |i: usize| passive.get(i).is_some_and(|&until| now_ms < until);
        let all_parked =
            entries.iter().enumerate().filter(|(i, _)| allowed(*i)).all(|(i, e)| e.parked(now_ms) || out(i));
        let current = self.figures_current(now_ms);
        // Stale figures make every endpoint alike: the random start decides.
        let queue = |e: &EndpointHealth| {
            u64::from(current) * (u64::from(e.running.unwrap_or(0)) + u64::from(e.waiting.unwrap_or(0)))
        };
        let start = usize::try_from(random % n.max(1) as u64).unwrap_or(0);
        (0..n)
            .map(|k| (start + k) % n)
            .filter(|&i| allowed(i))
            .filter_map(|i| entries.get(i).map(|e| (i, e)))
            .filter(|(i, e)| all_parked || !(e.parked(now_ms) || out(*i)))
            .min_by_key(|(_, e)| queue(e))
            .map(|(i, _)| i)
    }
}

/// Engine load and parked state of a slot: its endpoint's, or over its provider's endpoints
/// (parked only when all are; queues summed, the fullest KV cache).
fn slot_state(entries: &[EndpointHealth], endpoint: Option<usize>, now_ms: u64) -> (Load, bool) {
    let pick = match endpoint {
        Some(e) => entries.get(e..=e).unwrap_or_default(),
        None => entries,
    };
    let mut load = Load::default();
    for e in pick {
        load.running = sum(load.running, e.running);
        load.waiting = sum(load.waiting, e.waiting);
        let fullest = |a: Option<f32>, b: Option<u16>| match (a, b.map(|k| f32::from(k) / 1000.0)) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        load.kv_usage = fullest(load.kv_usage, e.kv_permille);
        load.cache_occupancy = fullest(load.cache_occupancy, e.cache_permille);
    }
    let parked = !pick.is_empty() && pick.iter().all(|e| e.parked(now_ms));
    (load, parked)
}

/// Passive health parks a slot: its endpoint, or every endpoint of its provider.
fn passive_parked(passive: &[u64], endpoint: Option<usize>, now_ms: u64) -> bool {
    let pick = match endpoint {
        Some(e) => passive.get(e..=e).unwrap_or_default(),
        None => passive,
    };
    !pick.is_empty() && pick.iter().all(|&until| now_ms < until)
}

fn sum(a: Option<u32>, b: Option<u32>) -> Option<u32> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.saturating_add(b)),
        (a, b) => a.or(b),
    }
}

/// Slots and balancer of model `i`.
fn model_routing(config: &Config, i: usize) -> Option<ModelRouting> {
    let model = config.models.get(i)?;
    let mut slots = Vec::new();
    let mut specs = Vec::new();
    let pool = match model.targets.as_slice() {
        [only] => config.providers.get(only.provider).filter(|p| !p.endpoints.is_empty()),
        _ => None,
    };
    for (j, t) in model.targets.iter().enumerate() {
        let provider = config.providers.get(t.provider)?;
        match pool {
            Some(p) => {
                for (e, ep) in p.endpoints.iter().enumerate() {
                    slots.push(Slot { target: j, endpoint: Some(e) });
                    specs.push(TargetSpec::new(format!("{}/{}@{ep}", provider.name, t.model), t.weight));
                }
            }
            None => {
                slots.push(Slot { target: j, endpoint: None });
                specs.push(TargetSpec::new(format!("{}/{}#{j}", provider.name, t.model), t.weight));
            }
        }
    }
    let fingerprint = specs.iter().fold(hash64(0, model.name.as_bytes()), |h, s| hash64(h, s.name.as_bytes()));
    let balancer = Balancer::new(model.strategy, &specs).ok()?;
    Some(ModelRouting { balancer, slots, fingerprint })
}

/// The part of a request body prefix strategies should compare: from the first conversation
/// key (`"messages"`, `"contents"`, `"input"`, `"prompt"`) on, so the envelope (`model`,
/// sampling parameters) does not make every request share a prefix; the whole body otherwise.
///
/// One forward pass over the quotes, stopping at the first key: the conversation key is
/// usually among the first bytes, and a body without one costs a single scan (searching each
/// key over the whole body cost about 2 µs per request in the guest).
pub fn conversation(body: &[u8]) -> &[u8] {
    const KEYS: [&[u8]; 4] = [b"messages\"", b"contents\"", b"input\"", b"prompt\""];
    let mut at = 0;
    while let Some(q) = body.get(at..).and_then(|rest| crate::bytes::find_byte(rest, b'"')) {
        let quote = at + q;
        let after = body.get(quote + 1..).unwrap_or_default();
        // The first letters tell the keys apart: one compare for most quotes.
        let candidate = match after.first() {
            Some(b'm') => KEYS[0],
            Some(b'c') => KEYS[1],
            Some(b'i') => KEYS[2],
            Some(b'p') => KEYS[3],
            _ => b"",
        };
        if !candidate.is_empty() && after.get(..candidate.len()).is_some_and(|a| crate::bytes::eq(a, candidate)) {
            return body.get(quote..).unwrap_or(body);
        }
        at = quote + 1;
    }
    body
}

mod residency;

#[cfg(test)]
mod tests;
