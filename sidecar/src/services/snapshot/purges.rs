//! Response-cache purges carried by the snapshot: recorded here, bounded to [`MAX_PURGES`],
//! and published with the last configuration under a new version (see [`super`]).

use ferrogate_core::config::cache::Purge;

use super::{lock, Snapshots, MAX_PURGES};

impl Snapshots {
    /// Records a purge of the response cache and publishes the last configuration again with
    /// it (a new version); a purge of everything (no scope, no model) drops the older ones.
    /// Whether a configuration was there to publish (else the purge waits for the first one).
    pub fn add_purge(&self, purge: Purge) -> bool {
        self.set_purges(|all| {
            if purge.scopes.is_empty() && purge.model.is_none() {
                all.clear();
            }
            all.push(purge);
        })
    }

    /// The purges recorded, oldest first.
    pub fn purges(&self) -> Vec<Purge> {
        lock(&self.purges).clone()
    }

    /// Takes purges recorded elsewhere (another sidecar, the database after a restart): each
    /// one not held yet joins in time order, as [`Snapshots::add_purge`] would have added it;
    /// whether that changed the purges (then the configuration is published again).
    pub fn merge_purges(&self, purges: &[Purge]) -> bool {
        let (before, mut merged) = {
            let held = lock(&self.purges);
            (held.clone(), held.clone())
        };
        merged.extend(purges.iter().filter(|p| !before.contains(p)).cloned());
        merged.sort_by_key(|p| p.at_ms);
        let everything = merged.iter().rposition(|p| p.scopes.is_empty() && p.model.is_none());
        merged.drain(..everything.unwrap_or(0));
        let over = merged.len().saturating_sub(MAX_PURGES);
        merged.drain(..over);
        if merged == before {
            return false;
        }
        self.set_purges(|all| *all = merged);
        true
    }

    /// Changes the purges (then bounded to [`MAX_PURGES`]) and publishes again.
    fn set_purges(&self, change: impl FnOnce(&mut Vec<Purge>)) -> bool {
        {
            let mut all = lock(&self.purges);
            change(&mut all);
            let over = all.len().saturating_sub(MAX_PURGES);
            all.drain(..over);
        }
        let raw = lock(&self.last_raw).clone();
        let Some(raw) = raw else { return false };
        if let Err(e) = self.publish(raw) {
            tracing::warn!(error = %e, "the configuration does not build again; the purge waits for the next one");
        }
        true
    }
}
