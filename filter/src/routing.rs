//! The VM's balancers: one [`Routing`] per configuration in use, built when the VM installs a
//! configuration (inline at `on_configure`, a snapshot on the tick that adopts it) and kept
//! until the next; requests take it with their configuration. A configuration equal to the
//! one in use (the first snapshot after the inline configuration, a re-published one) keeps
//! the balancers, so what they learned (prefixes, sessions, latencies, LoRA residency) is not
//! thrown away for nothing. The latest targets feed, and how current its engine figures are,
//! are applied to each new one and to the current one when they change.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use ferrogate_core::balance::Routing;
use ferrogate_core::config::Config;
use ferrogate_core::targets::{Freshness, TargetFeed};

/// The [`Routing`] of the configuration it was built for.
#[derive(Default)]
pub(crate) struct RoutingCell {
    /// The configuration the balancers were built for.
    owner: Option<Rc<Config>>,
    routing: Option<Rc<RefCell<Routing>>>,
    feed: Option<TargetFeed>,
    freshness: Option<Freshness>,
}

impl RoutingCell {
    /// The balancers of `config`, rebuilt first when they were built for another one that
    /// differs from it (comparing happens only when the configuration changed).
    pub(crate) fn for_config(&mut self, config: &Rc<Config>) -> Rc<RefCell<Routing>> {
        // The contents are compared only when the allocation differs: once per new snapshot.
        let unchanged = self.owner.as_ref().is_some_and(|owner| Rc::ptr_eq(owner, config) || **owner == **config);
        match &self.routing {
            Some(r) if unchanged => {
                let r = r.clone();
                self.owner = Some(config.clone());
                r
            }
            _ => {
                let mut routing = Routing::new(config);
                if let Some(feed) = &self.feed {
                    routing.apply_feed(config, feed);
                }
                routing.set_freshness(self.freshness);
                let routing = Rc::new(RefCell::new(routing));
                self.owner = Some(config.clone());
                self.routing = Some(routing.clone());
                routing
            }
        }
    }

    /// Installs a new targets feed into the current balancers and remembers it for later ones.
    pub(crate) fn set_feed(&mut self, feed: TargetFeed) {
        if let (Some(config), Some(routing)) = (&self.owner, &self.routing) {
            routing.borrow_mut().apply_feed(config, &feed);
        }
        self.feed = Some(feed);
    }

    /// Sets how current the feed's engine figures are, in the current balancers and later ones.
    pub(crate) fn set_freshness(&mut self, freshness: Freshness) {
        if let Some(routing) = &self.routing {
            routing.borrow_mut().set_freshness(Some(freshness));
        }
        self.freshness = Some(freshness);
    }
}

/// The next number of the VM's xorshift64* generator, seeded from the clock on first use.
pub(crate) fn next_random(state: &Cell<u64>) -> u64 {
    let mut x = state.get();
    if x == 0 {
        // Odd and non-zero; VMs started in the same nanosecond still differ by their stream ids.
        x = crate::raw::now_nanos() | 1;
    }
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    state.set(x);
    x.wrapping_mul(0x2545_f491_4f6c_dd1d)
}
