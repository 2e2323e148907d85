//! Ageing of offloaded blocks. An engine reports when its GPU cache drops a block, but LMCache
//! reports nothing when its CPU or storage backends evict: a block held in those tiers is
//! believed for `lmcache_ttl_secs` after its last store event, then taken out of the index.
//!
//! Each (block, endpoint, tier) keeps the time of its last store; a queue in store order finds
//! the ones due without a scan. A store that refreshes an entry leaves its older queue item
//! behind, skipped when it comes up (its time no longer matches); the queue is compacted when
//! such leftovers make it much longer than the entries it serves.

use std::collections::{HashMap, VecDeque};

use ferrogate_core::kv::Tier;

/// One holding: block key, endpoint, tier.
pub type Holding = (u64, u8, Tier);

/// The offloaded holdings of one provider and when each was last stored.
#[derive(Debug)]
pub struct Offloaded {
    ttl_ms: u64,
    stored_at: HashMap<Holding, u64>,
    queue: VecDeque<(u64, Holding)>,
}

impl Offloaded {
    /// Holdings are believed for `ttl_secs` after their last store.
    pub fn new(ttl_secs: u64) -> Self {
        Self { ttl_ms: ttl_secs.saturating_mul(1000), stored_at: HashMap::new(), queue: VecDeque::new() }
    }

    /// Holdings being aged.
    pub fn len(&self) -> usize {
        self.stored_at.len()
    }

    /// `holding` was stored (again) at `now_ms`; GPU holdings are not aged.
    pub fn stored(&mut self, holding: Holding, now_ms: u64) {
        if holding.2 == Tier::Gpu {
            return;
        }
        self.stored_at.insert(holding, now_ms);
        self.queue.push_back((now_ms, holding));
        if self.queue.len() > 2 * self.stored_at.len() + 64 {
            let current = &self.stored_at;
            self.queue.retain(|(at, h)| current.get(h) == Some(at));
        }
    }

    /// `holding` left the index another way (removed, evicted by the bound).
    pub fn forget(&mut self, holding: Holding) {
        self.stored_at.remove(&holding);
    }

    /// Endpoint `ep` holds nothing any more.
    pub fn forget_endpoint(&mut self, ep: u8) {
        self.stored_at.retain(|(_, e, _), _| *e != ep);
    }

    /// The holdings whose last store is `ttl` or more before `now_ms`, forgotten here: the
    /// caller takes them out of the index.
    pub fn expired(&mut self, now_ms: u64) -> Vec<Holding> {
        let mut due = Vec::new();
        while let Some(&(at, holding)) = self.queue.front() {
            if at.saturating_add(self.ttl_ms) > now_ms {
                break;
            }
            self.queue.pop_front();
            if self.stored_at.get(&holding) == Some(&at) {
                self.stored_at.remove(&holding);
                due.push(holding);
            }
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holding_expires_ttl_after_its_last_store() {
        let mut o = Offloaded::new(10);
        o.stored((1, 0, Tier::Cpu), 1_000);
        o.stored((2, 0, Tier::Storage), 2_000);
        o.stored((3, 0, Tier::Gpu), 2_000);
        assert_eq!(o.len(), 2, "GPU holdings are not aged");
        assert!(o.expired(10_999).is_empty());
        assert_eq!(o.expired(11_000), [(1, 0, Tier::Cpu)]);
        // Stored again: the older store no longer counts.
        o.stored((2, 0, Tier::Storage), 9_000);
        assert!(o.expired(15_000).is_empty());
        assert_eq!(o.expired(19_000), [(2, 0, Tier::Storage)]);
        assert_eq!(o.len(), 0);
    }

    #[test]
    fn forgotten_holdings_do_not_expire_and_the_queue_stays_bounded() {
        let mut o = Offloaded::new(1);
        o.stored((1, 0, Tier::Cpu), 0);
        o.stored((1, 1, Tier::Cpu), 0);
        o.stored((2, 1, Tier::Cpu), 0);
        o.forget((1, 0, Tier::Cpu));
        o.forget_endpoint(1);
        assert!(o.expired(5_000).is_empty());
        for t in 0..10_000 {
            o.stored((7, 2, Tier::Cpu), t);
        }
        assert!(o.queue.len() <= 2 * o.len() + 65, "{}", o.queue.len());
        assert_eq!(o.expired(20_000), [(7, 2, Tier::Cpu)]);
    }
}
