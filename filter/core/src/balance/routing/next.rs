//! The balancer's next choices after a pick: the fallback endpoints an endpoint picker lists
//! after its pick (`crate::epp`), for a gateway that retries down the list.

use super::{Routing, Slot};

impl Routing {
    /// Up to `n` slots of model `model` other than `picked`, among those the last pick of that
    /// model found eligible (call it right after [`Routing::pick_excluding`]), best first: the
    /// highest KV score when `kv` gives one per slot, then the shortest queue, then slot order.
    pub fn next_choices(&self, model: usize, picked: usize, kv: Option<&[u32]>, n: usize) -> Vec<Slot> {
        let Some(m) = self.model(model) else { return Vec::new() };
        let mut others: Vec<usize> = self.eligible.iter().copied().filter(|&i| i != picked).collect();
        let score = |i: usize| kv.and_then(|k| k.get(i)).copied().unwrap_or(0);
        let queue = |i: usize| self.loads.get(i).map_or(0, super::super::Load::queue);
        others.sort_by_key(|&i| (std::cmp::Reverse(score(i)), queue(i), i));
        others.into_iter().take(n).filter_map(|i| m.slots.get(i).copied()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::Request;
    use super::*;
    use crate::config::{Config, RawConfig};

    fn pool(strategy: &str) -> Config {
        let yaml = format!(
            "providers:\n  - {{name: p, kind: openai_compatible, base_url: 'http://a:1', endpoints: ['10.0.0.1:8000', '10.0.0.2:8000', '10.0.0.3:8000', '10.0.0.4:8000']}}\nmodels:\n  - {{name: m, strategy: {strategy}, targets: [{{provider: p, model: m}}]}}\n"
        );
        let raw: RawConfig = serde_saphyr::from_str(&yaml).expect("yaml");
        Config::try_from(raw).expect("config")
    }

    #[test]
    fn next_choices_follow_the_queue_and_leave_out_the_pick_and_the_excluded() {
        let config = pool("least_loaded");
        let mut routing = Routing::new(&config);
        let in_flight = [3, 0, 5, 1];
        let picked = routing.pick_excluding(&config, 0, &Request::default(), &in_flight, 0, &[3]).expect("pick");
        assert_eq!(picked.slot, 1, "the emptiest slot outside the exclusion");
        let next: Vec<_> = routing.next_choices(0, picked.slot, None, 5).iter().filter_map(|s| s.endpoint).collect();
        assert_eq!(next, vec![0, 2], "by queue; slot 3 was excluded, slot 1 picked");
        assert_eq!(routing.next_choices(0, picked.slot, None, 1).len(), 1);
        assert!(routing.next_choices(0, picked.slot, None, 0).is_empty());
    }

    #[test]
    fn a_kv_score_ranks_before_the_queue() {
        let config = pool("least_loaded");
        let mut routing = Routing::new(&config);
        let picked = routing.pick_excluding(&config, 0, &Request::default(), &[0, 0, 0, 0], 0, &[]).expect("pick");
        let mut scores = [0u32; 4];
        let other = (picked.slot + 2) % 4;
        scores[other] = 9;
        let next = routing.next_choices(0, picked.slot, Some(&scores), 3);
        assert_eq!(next.first().and_then(|s| s.endpoint), Some(other));
    }
}
