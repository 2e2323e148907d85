//! The age of the feed's engine figures: the filter says when the sidecar last confirmed them
//! and how long they may be used; past that they count as unknown (see [`Freshness`]).

use super::Routing;
use crate::targets::Freshness;

impl Routing {
    /// Sets how current the targets feed's engine figures are (`None`: they do not age). From
    /// `freshness.confirmed_ms + max_age_ms` on, every target's running, waiting, KV and cache
    /// figures read as unknown: load-aware strategies then score the targets alike (as for a
    /// target never scraped), and flow control's engine thresholds count them as crossed, so
    /// figures frozen by a dead sidecar cannot let traffic through. Health is not aged.
    pub fn set_freshness(&mut self, freshness: Option<Freshness>) {
        self.freshness = freshness;
    }

    /// Whether the engine figures may be used at `now_ms`.
    pub(super) fn figures_current(&self, now_ms: u64) -> bool {
        !self.freshness.is_some_and(|f| f.stale(now_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Request, Routing};
    use crate::config::{Config, RawConfig};
    use crate::targets::{EndpointState, Freshness, TargetFeed};

    /// A pool of two engines; `big` balances over them least loaded, `two` has the pool as one
    /// of two targets (its endpoint comes from [`Routing::endpoint`]).
    fn config(flow: &str) -> Config {
        config_with(flow, "")
    }

    /// [`config`] with `pool` (more keys of the pool provider).
    fn config_with(flow: &str, pool: &str) -> Config {
        let yaml = format!(
            "providers:\n  - {{name: a, kind: openai_compatible, base_url: 'http://a:1'}}\n  \
             - {{name: pool, kind: openai_compatible, base_url: 'http://p:1', endpoints: ['h1:1', 'h2:1']{pool}}}\n\
             models:\n  - {{name: big, strategy: least_loaded, targets: [{{provider: pool, model: m}}]{flow}}}\n  \
             - {{name: two, targets: [{{provider: pool, model: m}}, {{provider: a, model: m}}]}}\n"
        );
        let raw: RawConfig = serde_saphyr::from_str(&yaml).unwrap();
        Config::try_from(raw).unwrap()
    }

    fn engine(endpoint: &str, running: u32, waiting: u32, kv: u16) -> EndpointState {
        let (provider, endpoint) = ("pool".to_string(), endpoint.to_string());
        let (running, waiting, kv_usage_permille) = (Some(running), Some(waiting), Some(kv));
        EndpointState { provider, endpoint, healthy: true, running, waiting, kv_usage_permille, ..Default::default() }
    }

    /// The feed said both engines were idle when it was last confirmed at 10 s; 5 s bound.
    fn idle_pool(c: &Config) -> Routing {
        let mut r = Routing::new(c);
        let idle = vec![engine("h1:1", 0, 0, 100), engine("h2:1", 0, 0, 100)];
        r.apply_feed(c, &TargetFeed { version: 1, endpoints: idle });
        r.set_freshness(Some(Freshness { confirmed_ms: 10_000, max_age_ms: 5_000 }));
        r
    }

    #[test]
    fn stale_figures_cross_every_engine_threshold() {
        for threshold in ["max_running: 4", "max_waiting: 4", "max_kv_usage: 0.9"] {
            let c = config(&format!(", flow_control: {{{threshold}}}"));
            let fc = c.models[0].flow.clone().unwrap();
            let mut r = idle_pool(&c);
            let mut room = Vec::new();
            let total = r.room(&c, 0, &[], 15_000, &[], &fc, &mut room);
            assert_eq!((total, room.as_slice()), (2 * u64::from(u32::MAX), &[u32::MAX; 2][..]), "{threshold}: fresh");
            let total = r.room(&c, 0, &[], 15_001, &[], &fc, &mut room);
            assert_eq!((total, room.as_slice()), (0, &[0; 2][..]), "{threshold}: stale figures are no room");
            // The sidecar answers again: the same figures count again.
            r.set_freshness(Some(Freshness { confirmed_ms: 15_500, max_age_ms: 5_000 }));
            assert_eq!(r.room(&c, 0, &[], 16_000, &[], &fc, &mut room), 2 * u64::from(u32::MAX), "{threshold}");
        }
        // Bounded by max_concurrency alone, the figures are not needed: stale ones change nothing.
        let c = config_with(", flow_control: {}", ", max_concurrency: 3");
        let (fc, mut room) = (c.models[0].flow.clone().unwrap(), Vec::new());
        let mut r = idle_pool(&c);
        assert_eq!(r.room(&c, 0, &[1, 0], 60_000, &[], &fc, &mut room), 5);
        assert_eq!(room, [2, 3]);
    }

    #[test]
    fn stale_figures_score_like_no_figures() {
        let c = config("");
        let busy = TargetFeed { version: 1, endpoints: vec![engine("h1:1", 9, 3, 900), engine("h2:1", 0, 0, 0)] };
        let mut r = Routing::new(&c);
        r.apply_feed(&c, &busy);
        r.set_freshness(Some(Freshness { confirmed_ms: 10_000, max_age_ms: 5_000 }));
        let mut blind = Routing::new(&c); // never had a feed: no figures at all
        for random in 0..16 {
            let req = Request { random, ..Request::default() };
            let fresh = r.pick(&c, 0, &req, &[], 15_000).unwrap();
            assert_eq!((fresh.slot, fresh.queue_depth), (1, 0), "fresh figures steer to the idle engine");
            assert_eq!(r.endpoint(&c, 1, 15_000, random), Some(1));
            let stale = r.pick(&c, 0, &req, &[], 15_001);
            assert_eq!(stale, blind.pick(&c, 0, &req, &[], 15_001), "stale scores as unknown");
            assert_eq!(r.endpoint(&c, 1, 15_001, random), blind.endpoint(&c, 1, 15_001, random));
        }
        let stale: Vec<_> = (0..16).filter_map(|random| r.endpoint(&c, 1, 15_001, random)).collect();
        assert!(stale.contains(&0) && stale.contains(&1), "no engine is favoured on stale figures");
    }

    #[test]
    fn health_is_not_aged() {
        let c = config("");
        let down = EndpointState { healthy: false, cooldown_until_ms: Some(60_000), ..engine("h1:1", 0, 0, 0) };
        let mut r = Routing::new(&c);
        r.apply_feed(&c, &TargetFeed { version: 1, endpoints: vec![down, engine("h2:1", 5, 5, 500)] });
        r.set_freshness(Some(Freshness { confirmed_ms: 10_000, max_age_ms: 5_000 }));
        for random in 0..8 {
            let req = Request { random, ..Request::default() };
            assert_eq!(r.pick(&c, 0, &req, &[], 30_000).map(|p| p.slot), Some(1), "parked while its cooldown runs");
            assert_eq!(r.endpoint(&c, 1, 30_000, random), Some(1));
        }
        let picks: Vec<_> = (0..16).filter_map(|random| r.endpoint(&c, 1, 60_000, random)).collect();
        assert!(picks.contains(&0), "the cooldown ran out: fail open as before");
    }
}
