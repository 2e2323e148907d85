//! Which models a key may use, flattened once per configuration, and request authorization.
//!
//! A key's grants are its own `models` plus those of each of its groups, as patterns:
//!
//! | pattern | covers |
//! |---|---|
//! | `*` | everything |
//! | a public model | the model, every alias of it, and its fallback chain (transitively) |
//! | an alias | the same as its model |
//! | `provider/*` | pinned requests `provider/<any id>` for that provider only |
//! | `provider/model` | exactly that pinned request |
//!
//! Why fallbacks are covered: the gateway itself fails over to them, so a key that may use
//! `chat` must not get a 403 halfway through `chat`'s failover to `gpt`; with one set of model
//! indexes this also lets the key name `gpt` directly. `provider/*` deliberately does *not*
//! cover public models served by that provider: grants on providers are about pinned access,
//! and a public model's targets can change without anyone re-reading the key's grants.
//! A key with no patterns may use nothing (403 on every model).
//!
//! [`Config::authorize`] checks the name exists *before* checking grants, so an unknown model
//! is 404 for everyone and 403 only ever confirms what a 404 would not deny.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::auth::Caller;
use crate::config::{Config, Key, Resolved};
use crate::error::ApiError;

/// A key's flattened grants (built at configuration time; lookups never allocate).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants {
    /// `*`: everything.
    pub all: bool,
    /// Public models (indexes into [`Config::models`]), fallback chains included.
    pub models: BTreeSet<usize>,
    /// Providers granted with `provider/*` (indexes into [`Config::providers`]).
    pub providers: BTreeSet<usize>,
    /// Exact `provider/model` grants, as written.
    pub pinned: BTreeSet<String>,
}

impl Grants {
    /// True when the grants cover `resolved`, which `requested` resolved to.
    pub fn allows(&self, resolved: Resolved<'_>, requested: &str) -> bool {
        if self.all {
            return true;
        }
        match resolved {
            Resolved::Model(i) => self.models.contains(&i),
            Resolved::Pinned { provider, .. } => self.providers.contains(&provider) || self.pinned.contains(requested),
        }
    }

    /// True when nothing at all is granted.
    pub fn is_empty(&self) -> bool {
        !self.all && self.models.is_empty() && self.providers.is_empty() && self.pinned.is_empty()
    }

    /// Adds one validated pattern. Unknown names cannot occur (validation rejects them) and
    /// are ignored rather than trusted.
    fn add(&mut self, config: &Config, pattern: &str) {
        if pattern == "*" {
            self.all = true;
        } else if let Some(Resolved::Model(i)) = config.resolve(pattern) {
            self.add_with_fallbacks(config, i);
        } else if let Some((provider, id)) = pattern.split_once('/') {
            match (config.provider_index(provider), id) {
                (Some(p), "*") => {
                    self.providers.insert(p);
                }
                (Some(_), _) => {
                    self.pinned.insert(pattern.to_string());
                }
                (None, _) => {}
            }
        }
    }

    /// Adds model `i` and everything reachable through fallbacks. Fallback cycles between
    /// different models are legal config, so already-granted models are not revisited.
    fn add_with_fallbacks(&mut self, config: &Config, i: usize) {
        let mut pending = vec![i];
        while let Some(m) = pending.pop() {
            if self.models.insert(m) {
                if let Some(model) = config.models.get(m) {
                    pending.extend(model.fallbacks.iter().copied());
                }
            }
        }
    }
}

/// One [`Grants`] per key of a validated configuration, in key order. Keys with the same
/// patterns and groups share one flattened set: in large fleets most keys differ only in their
/// secret (a team's keys carry just the team's group), so a 10,000-key snapshot flattens a
/// few hundred sets instead of 10,000 — the bulk of a snapshot swap otherwise.
pub(crate) fn flatten(config: &Config) -> Vec<Arc<Grants>> {
    let mut shared: BTreeMap<(&[String], &[usize]), Arc<Grants>> = BTreeMap::new();
    let mut out = Vec::with_capacity(config.keys.len());
    for k in &config.keys {
        let entry = shared.entry((k.models.as_slice(), k.groups.as_slice()));
        out.push(Arc::clone(entry.or_insert_with(|| Arc::new(key_grants(config, k)))));
    }
    out
}

fn key_grants(config: &Config, key: &Key) -> Grants {
    let groups = key.groups.iter().filter_map(|&g| config.groups.get(g));
    let patterns = key.models.iter().chain(groups.flat_map(|g| g.models.iter()));
    let mut grants = Grants::default();
    for pattern in patterns {
        grants.add(config, pattern);
    }
    grants
}

impl Config {
    /// The flattened grants of key `index`.
    pub fn grants(&self, index: usize) -> Option<&Grants> {
        self.grants.get(index).map(|g| &**g)
    }

    /// True when `caller` may use `resolved` (which `requested` resolved to).
    ///
    /// [`Caller::Open`] is honoured only while the configuration has no keys at all, so a
    /// stale or forged `Open` never bypasses a keyed configuration.
    pub fn may_use(&self, caller: Caller, resolved: Resolved<'_>, requested: &str) -> bool {
        match caller {
            Caller::Open => self.keys.is_empty(),
            Caller::Key(i) => self.grants.get(i).is_some_and(|g| g.allows(resolved, requested)),
        }
    }

    /// Resolves a requested `"model"` and checks the caller may use it.
    ///
    /// Unknown (not a model, an alias, or `provider/<non-empty id>` of a known provider;
    /// includes the empty string) → 404 `model_not_found`, decided before grants are looked
    /// at; known but not granted → 403 `permission_error`/`model_not_allowed`.
    pub fn authorize<'r>(&self, caller: Caller, requested: &'r str) -> Result<Resolved<'r>, ApiError> {
        let resolved = self.resolve(requested).ok_or_else(|| ApiError::model_not_found(requested))?;
        if self.may_use(caller, resolved, requested) {
            Ok(resolved)
        } else {
            Err(ApiError::model_not_allowed(requested))
        }
    }
}

#[cfg(test)]
mod tests;
