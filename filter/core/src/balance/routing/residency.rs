//! LoRA residency plumbing of [`Routing`]: which `lora_aware` slots sit on which engine, so the
//! targets feed's adapter reports and every adapter pick reach each balancer routing there.
//!
//! - **Which adapter.** A model routed with `lora_aware` declares its targets' upstream model
//!   id an adapter (in vLLM a LoRA adapter is addressed by its served name in `model`); the
//!   request's adapter is that id when all of the model's targets name the same one (the usual
//!   shape: one target over a pool of engine replicas). Other models name no adapter, so
//!   base-model traffic never takes a place in the residency tables.
//! - **Which engine.** A pool slot is its endpoint; a target slot is its provider's authority
//!   when the provider has no pool. A pooled target of a multi-target model spans the whole
//!   pool (its endpoint is picked later), so it gets no engine report: residency learned from
//!   its own picks only.
//! - **Shared knowledge.** Residency belongs to the engine, not to a model: a pick naming an
//!   adapter is also told to every other `lora_aware` balancer with a slot on that engine, and
//!   each engine's report goes to all of them.

use super::{ModelRouting, Routing, Slot};
use crate::balance::{Residency, StrategyKind};
use crate::config::Config;
use crate::targets::TargetFeed;

/// A `lora_aware` model's slot on one engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct EngineSlot {
    /// Index into the config's providers.
    provider: usize,
    /// Index into the provider's feed entries (pool endpoint, or 0 for its authority).
    entry: usize,
    /// Index into the config's models.
    model: usize,
    /// Index into the model's slots.
    slot: usize,
}

/// Every slot of a `lora_aware` model that sits on one engine, in model order.
pub(super) fn engine_slots(config: &Config, models: &[Option<ModelRouting>]) -> Vec<EngineSlot> {
    let mut out = Vec::new();
    for (model, m) in models.iter().enumerate() {
        let Some(m) = m.as_ref().filter(|m| m.kind() == StrategyKind::LoraAware) else { continue };
        for (slot, s) in m.slots.iter().enumerate() {
            if let Some((provider, entry)) = engine_of(config, model, s) {
                out.push(EngineSlot { provider, entry, model, slot });
            }
        }
    }
    out
}

/// The provider and feed entry of a slot, when it is one engine.
fn engine_of(config: &Config, model: usize, slot: &Slot) -> Option<(usize, usize)> {
    let provider = config.models.get(model)?.targets.get(slot.target)?.provider;
    let pooled = !config.providers.get(provider)?.endpoints.is_empty();
    match slot.endpoint {
        Some(e) => Some((provider, e)),
        None if !pooled => Some((provider, 0)),
        None => None,
    }
}

impl Routing {
    /// The LoRA adapter a request for model `model` asks for ([`super::Request::adapter`]):
    /// with `lora_aware`, its targets' upstream model id when they all name the same one;
    /// `None` otherwise. Borrowed from `config`, nothing allocated.
    pub fn adapter<'c>(&self, config: &'c Config, model: usize) -> Option<&'c str> {
        let m = config.models.get(model).filter(|m| m.strategy == StrategyKind::LoraAware)?;
        let (first, rest) = m.targets.split_first()?;
        rest.iter().all(|t| t.model == first.model).then_some(first.model.as_str())
    }

    /// Hands every `lora_aware` slot on an engine what the feed reports of that engine's
    /// adapters (nothing reported when the feed does not have it).
    pub(super) fn apply_residency(&mut self, config: &Config, feed: &TargetFeed) {
        for e in &self.engines {
            let Some(provider) = config.providers.get(e.provider) else { continue };
            let name = provider.endpoints.get(e.entry).unwrap_or(&provider.authority);
            let report = feed
                .get(&provider.name, name)
                .map_or_else(Residency::default, |s| Residency { adapters: &s.adapters, max_loras: s.max_loras });
            if let Some(Some(m)) = self.models.get_mut(e.model) {
                m.balancer.residency(e.slot, report);
            }
        }
    }

    /// Tells the other `lora_aware` slots on the engine of `model`'s `slot` that `adapter`
    /// was just sent there.
    pub(super) fn share_pick(&mut self, model: usize, slot: usize, adapter: &str) {
        let Some(at) = self.engines.iter().find(|e| e.model == model && e.slot == slot).copied() else { return };
        let same_engine = |e: &&EngineSlot| e.provider == at.provider && e.entry == at.entry && **e != at;
        for e in self.engines.iter().filter(same_engine) {
            if let Some(Some(m)) = self.models.get_mut(e.model) {
                m.balancer.adapter_loaded(e.slot, adapter);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::balance::{Request, Routing};
    use crate::config::{Config, RawConfig};
    use crate::targets::{EndpointState, TargetFeed};

    /// A pool of two engines (`h1:1`, `h2:1`) and a plain provider `a`.
    fn config(models: &str) -> Config {
        let yaml = format!(
            "providers:\n  - {{name: a, kind: openai_compatible, base_url: 'http://a:1'}}\n  - {{name: pool, kind: openai_compatible, base_url: 'http://p:1', endpoints: ['h1:1', 'h2:1']}}\nmodels:\n{models}"
        );
        let raw: RawConfig = serde_saphyr::from_str(&yaml).unwrap();
        Config::try_from(raw).unwrap()
    }

    const LORA: &str = "  - {name: sql, strategy: lora_aware, targets: [{provider: pool, model: sql-lora}]}\n  - {name: chat, strategy: lora_aware, targets: [{provider: pool, model: chat-lora}]}\n  - {name: base, targets: [{provider: pool, model: base}]}\n  - {name: mixed, strategy: lora_aware, targets: [{provider: a, model: x}, {provider: pool, model: y}]}";

    fn engine(endpoint: &str, adapters: &[&str]) -> EndpointState {
        EndpointState {
            provider: "pool".into(),
            endpoint: endpoint.into(),
            healthy: true,
            adapters: adapters.iter().map(|a| a.to_string()).collect(),
            max_loras: Some(1),
            ..EndpointState::default()
        }
    }

    /// The slot model `model` picks, its adapter asked for as the gateway asks.
    fn pick(r: &mut Routing, c: &Config, model: usize, random: u64, excluded: &[usize]) -> Option<usize> {
        let req = Request { adapter: r.adapter(c, model), random, ..Request::default() };
        r.pick_excluding(c, model, &req, &[], 1, excluded).map(|p| p.slot)
    }

    #[test]
    fn the_adapter_is_the_upstream_id_of_a_lora_aware_model() {
        let c = config(LORA);
        let r = Routing::new(&c);
        assert_eq!(r.adapter(&c, 0), Some("sql-lora"));
        assert_eq!(r.adapter(&c, 1), Some("chat-lora"));
        assert_eq!(r.adapter(&c, 2), None, "round_robin names no adapter");
        assert_eq!(r.adapter(&c, 3), None, "targets naming different ids: no single adapter");
        assert_eq!(r.adapter(&c, 9), None);
    }

    #[test]
    fn a_request_goes_to_the_replica_its_engine_reports_holding_the_adapter() {
        let c = config(LORA);
        for holder in [0, 1] {
            let mut r = Routing::new(&c);
            let endpoints = vec![engine("h1:1", &["chat-lora"]), engine("h2:1", &["chat-lora"])];
            let mut feed = TargetFeed { version: 1, endpoints };
            feed.endpoints[holder].adapters = vec!["sql-lora".into()];
            r.apply_feed(&c, &feed);
            for random in 0..16 {
                assert_eq!(pick(&mut r, &c, 0, random, &[]), Some(holder), "random {random}");
            }
        }
    }

    #[test]
    fn engine_reported_residency_beats_learned() {
        let c = config(LORA);
        let mut r = Routing::new(&c);
        // Learned: sql-lora went to h1 (h2 excluded), so h1 is believed to hold it.
        assert_eq!(pick(&mut r, &c, 0, 0, &[1]), Some(0));
        assert_eq!(pick(&mut r, &c, 0, 0, &[]), Some(0));
        // The engines say otherwise (another gateway moved it): the report wins.
        let feed =
            TargetFeed { version: 1, endpoints: vec![engine("h1:1", &["chat-lora"]), engine("h2:1", &["sql-lora"])] };
        r.apply_feed(&c, &feed);
        for random in 0..8 {
            assert_eq!(pick(&mut r, &c, 0, random, &[]), Some(1));
        }
    }

    #[test]
    fn a_pick_by_one_model_is_known_to_the_others_on_that_engine() {
        let c = config(LORA);
        let mut r = Routing::new(&c);
        // sql-lora to h1, then chat-lora to h1, which evicts it (one adapter slot).
        assert_eq!(pick(&mut r, &c, 0, 0, &[1]), Some(0));
        assert_eq!(pick(&mut r, &c, 1, 0, &[1]), Some(0));
        // sql's balancer knows: h1 now holds chat-lora, h2 has room, so sql-lora goes to h2,
        // and chat-lora stays on h1.
        for random in 0..8 {
            assert_eq!(pick(&mut r, &c, 0, random, &[]), Some(1), "random {random}");
            assert_eq!(pick(&mut r, &c, 1, random, &[]), Some(0), "random {random}");
        }
        // Base-model traffic (no adapter) changes nothing.
        for random in 0..4 {
            pick(&mut r, &c, 2, random, &[]);
        }
        assert_eq!(pick(&mut r, &c, 0, 0, &[]), Some(1));
    }
}
