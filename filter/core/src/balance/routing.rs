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
//! open: a stale or wrong health view must not take a model down).

use super::{hash64, Balancer, Load, Observed, PickContext, StrategyKind, TargetSpec};
use crate::config::Config;
use crate::targets::TargetFeed;

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
    loads: Vec<Load>,
    eligible: Vec<usize>,
}

impl Routing {
    /// Builds a balancer per model (a model whose balancer cannot be built gets none and is
    /// routed by rotation; validation makes that impossible in practice).
    pub fn new(config: &Config) -> Self {
        let models = (0..config.models.len()).map(|i| model_routing(config, i)).collect();
        let health =
            config.providers.iter().map(|p| vec![EndpointHealth::default(); p.endpoints.len().max(1)]).collect();
        Self { models, health, loads: Vec::new(), eligible: Vec::new() }
    }

    /// Model `i`'s routing, if it has a balancer.
    pub fn model(&self, i: usize) -> Option<&ModelRouting> {
        self.models.get(i)?.as_ref()
    }

    /// Takes health and engine load from a targets feed (unknown endpoints: healthy, no load).
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
                });
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
        let m = self.models.get_mut(model)?.as_mut()?;
        let target_provider = |s: &Slot| config.models.get(model)?.targets.get(s.target).map(|t| t.provider);
        self.loads.clear();
        self.eligible.clear();
        for (i, slot) in m.slots.iter().enumerate() {
            let entries = target_provider(slot).and_then(|p| self.health.get(p)).map_or(&[][..], Vec::as_slice);
            let (load, parked) = slot_state(entries, slot.endpoint, now_ms);
            self.loads.push(Load { in_flight: in_flight.get(i).copied().unwrap_or(0), ..load });
            if !parked {
                self.eligible.push(i);
            }
        }
        if self.eligible.is_empty() {
            self.eligible.extend(0..m.slots.len());
        }
        let ctx = PickContext {
            session: req.session,
            conversation: req.conversation,
            loads: &self.loads,
            random: req.random,
            ..PickContext::default()
        };
        let slot = m.balancer.pick(&ctx, &self.eligible)?;
        m.balancer.observe(slot, Observed::Started);
        let queue_depth = ctx.queue(slot);
        Some(Picked { slot, at: *m.slots.get(slot)?, queue_depth, prompt_tokens: ctx.prompt_tokens() })
    }

    /// Tells model `model`'s balancer how a request on `slot` went.
    pub fn observe(&mut self, model: usize, slot: usize, event: Observed) {
        if let Some(Some(m)) = self.models.get_mut(model) {
            m.balancer.observe(slot, event);
        }
    }

    /// The pool endpoint of `provider` with the smallest engine queue among those not parked
    /// (all when every one is), ties broken by `random`; `None` without a pool.
    pub fn endpoint(&self, config: &Config, provider: usize, now_ms: u64, random: u64) -> Option<usize> {
        let n = config.providers.get(provider)?.endpoints.len();
        let entries = self.health.get(provider)?;
        let all_parked = entries.iter().all(|e| e.parked(now_ms));
        let queue = |e: &EndpointHealth| u64::from(e.running.unwrap_or(0)) + u64::from(e.waiting.unwrap_or(0));
        let start = usize::try_from(random % n.max(1) as u64).unwrap_or(0);
        (0..n)
            .map(|k| (start + k) % n)
            .filter_map(|i| entries.get(i).map(|e| (i, e)))
            .filter(|(_, e)| all_parked || !e.parked(now_ms))
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
        let kv = e.kv_permille.map(|k| f32::from(k) / 1000.0);
        load.kv_usage = match (load.kv_usage, kv) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }
    let parked = !pick.is_empty() && pick.iter().all(|e| e.parked(now_ms));
    (load, parked)
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
pub fn conversation(body: &[u8]) -> &[u8] {
    const KEYS: [&[u8]; 4] = [b"\"messages\"", b"\"contents\"", b"\"input\"", b"\"prompt\""];
    let found = KEYS.iter().filter_map(|k| body.windows(k.len()).position(|w| w == *k)).min();
    found.and_then(|at| body.get(at..)).unwrap_or(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, RawConfig};
    use crate::targets::EndpointState;

    fn config(models: &str) -> Config {
        let yaml = format!(
            "providers:\n  - {{name: a, kind: openai_compatible, base_url: 'http://a:1'}}\n  - {{name: pool, kind: openai_compatible, base_url: 'http://p:1', endpoints: ['h1:1', 'h2:1']}}\nmodels:\n{models}"
        );
        let raw: RawConfig = serde_yaml::from_str(&yaml).unwrap();
        Config::try_from(raw).unwrap()
    }

    fn parked(provider: &str, endpoint: &str) -> EndpointState {
        let (provider, endpoint) = (provider.to_string(), endpoint.to_string());
        EndpointState { provider, endpoint, healthy: false, cooldown_until_ms: Some(1_000), ..Default::default() }
    }

    #[test]
    fn a_single_pooled_target_balances_over_its_endpoints() {
        let c = config("  - {name: big, targets: [{provider: pool, model: m}]}\n  - {name: two, targets: [{provider: pool, model: m}, {provider: a, model: m}]}");
        let r = Routing::new(&c);
        let slots = |i| r.model(i).unwrap().slots().to_vec();
        let pool = [Slot { target: 0, endpoint: Some(0) }, Slot { target: 0, endpoint: Some(1) }];
        assert_eq!(slots(0), pool);
        assert_eq!(slots(1), [Slot { target: 0, endpoint: None }, Slot { target: 1, endpoint: None }]);
        assert_ne!(r.model(0).unwrap().fingerprint(), r.model(1).unwrap().fingerprint());
    }

    #[test]
    fn parked_slots_are_skipped_until_all_are_parked() {
        let c = config("  - {name: big, targets: [{provider: pool, model: m}]}");
        let mut r = Routing::new(&c);
        r.apply_feed(&c, &TargetFeed { version: 1, endpoints: vec![parked("pool", "h1:1")] });
        for random in 0..8 {
            let req = Request { random, ..Request::default() };
            assert_eq!(r.pick(&c, 0, &req, &[], 999).map(|p| p.slot), Some(1));
            assert_eq!(r.endpoint(&c, 1, 999, random), Some(1));
        }
        let both = vec![parked("pool", "h1:1"), parked("pool", "h2:1")];
        r.apply_feed(&c, &TargetFeed { version: 2, endpoints: both });
        let picks: Vec<_> =
            (0..8).filter_map(|random| r.pick(&c, 0, &Request { random, ..Request::default() }, &[], 999)).collect();
        assert!(picks.iter().any(|p| p.slot == 0) && picks.iter().any(|p| p.slot == 1), "fail open");
    }

    #[test]
    fn the_conversation_starts_at_its_key() {
        assert_eq!(conversation(br#"{"model":"x","messages":[1]}"#), br#""messages":[1]}"#);
        assert_eq!(conversation(b"{}"), b"{}");
    }
}
