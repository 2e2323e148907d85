//! The response cache's settings: `cache_store:` (where entries live and how many) and the
//! `cache:` blocks of models, groups and keys (which requests are cached, for how long, shared
//! with whom, and the semantic options).
//!
//! Indexed here on its own: it reads the raw document (models, keys and groups in file order,
//! which is the validated order whenever the configuration is valid) and is given the model
//! names it may use for embeddings, so it never needs [`super::Config`].

use serde::{Deserialize, Serialize};

use super::validate::Problems;
use super::RawConfig;

/// Longest time an entry may live (30 days), seconds.
const MAX_TTL_SECS: u64 = 30 * 24 * 3600;
/// Slots of the in-proxy store when none is configured.
pub const DEFAULT_MAX_ENTRIES: u32 = 1_000;
/// Largest answer stored when no bound is configured, bytes.
pub const DEFAULT_MAX_ENTRY_BYTES: u32 = 256 * 1024;
/// The semantic store's entries when none is configured.
pub const DEFAULT_SEMANTIC_MAX_ENTRIES: u32 = 10_000;
/// The semantic store's bytes (answers, vectors, bookkeeping) when none is configured: 64 MiB.
pub const DEFAULT_SEMANTIC_MAX_BYTES: u64 = 64 << 20;
/// Cosine similarity a semantic candidate needs when none is configured.
pub const DEFAULT_THRESHOLD: f32 = 0.93;
/// Hard ceilings, so a typo cannot reserve the machine.
const MAX_ENTRIES: u32 = 1_000_000;
const MAX_ENTRY_BYTES: u32 = 16 * 1024 * 1024;
/// Bounds of `semantic_max_bytes`: 1 MiB to 64 GiB.
const MIN_SEMANTIC_BYTES: u64 = 1 << 20;
const MAX_SEMANTIC_BYTES: u64 = 64 << 30;

/// `cache_store:` as written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RawCacheStore {
    /// `memory` (default: in the proxy, per replica) or `redis` (shared by every replica,
    /// through the sidecar; needs `redis:`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Entries the in-proxy store holds at most (default 1,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_entries: Option<u32>,
    /// Largest answer stored, bytes (default 262,144); larger answers are not cached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_entry_bytes: Option<u32>,
    /// Entries the sidecar's semantic store holds at most (default 10,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub semantic_max_entries: Option<u32>,
    /// Bytes the sidecar's semantic store holds at most: answers, vectors and per-entry
    /// bookkeeping (default 67,108,864 = 64 MiB; 1 MiB to 64 GiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub semantic_max_bytes: Option<u64>,
}

/// A model's, group's or key's `cache:` as written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RawCache {
    /// How long an answer is served from the cache, seconds; 0 turns caching off where a
    /// broader level turned it on.
    pub ttl_secs: u64,
    /// Who shares entries: `key` (default), `group` or `global`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// Semantic matching (similar, not only identical, last user turns).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub semantic: Option<RawSemantic>,
}

/// `cache.semantic` as written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RawSemantic {
    /// A public model name serving `/v1/embeddings`.
    pub embedding_model: String,
    /// Cosine similarity a stored turn needs to be served (default 0.93).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f32>,
}

/// Where entries live.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StoreKind {
    /// In the proxy (shared data), per replica.
    #[default]
    Memory,
    /// Redis, through the sidecar, shared by every replica.
    Redis,
}

/// Who shares an entry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Scope {
    /// The key that stored it.
    #[default]
    Key,
    /// The key's first group (a key in no group: the key).
    Group,
    /// Every caller.
    Global,
}

impl Scope {
    /// The name used in configuration and records.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Key => "key",
            Scope::Group => "group",
            Scope::Global => "global",
        }
    }
}

/// Semantic matching of one policy.
#[derive(Debug, Clone, PartialEq)]
pub struct Semantic {
    /// The public model that embeds the last user turn.
    pub embedding_model: String,
    /// Least cosine similarity served.
    pub threshold: f32,
}

/// What one `cache:` block asks for (`ttl_secs > 0`; a zero TTL is kept as "off").
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// Lifetime of an entry, seconds (0: caching off at this level).
    pub ttl_secs: u64,
    /// Who shares entries.
    pub scope: Scope,
    /// Semantic options.
    pub semantic: Option<Semantic>,
}

/// The validated cache settings.
#[derive(Debug, Clone, PartialEq)]
pub struct CacheSettings {
    /// Where entries live.
    pub store: StoreKind,
    /// Slots of the in-proxy store.
    pub max_entries: u32,
    /// Largest answer stored, bytes.
    pub max_entry_bytes: u32,
    /// Bound of the sidecar's semantic store, entries.
    pub semantic_max_entries: u32,
    /// Bound of the sidecar's semantic store, bytes (answers, vectors and bookkeeping).
    pub semantic_max_bytes: u64,
    /// Purges recorded by the sidecar (`POST /api/v1/cache/purge`), oldest first; they reach
    /// the filter with the snapshot (`cache_purges`), not with the configuration document.
    pub purges: Vec<Purge>,
    by_model: Vec<Option<Policy>>,
    by_group: Vec<Option<Policy>>,
    by_key: Vec<Option<Policy>>,
    any: bool,
}

impl Default for CacheSettings {
    fn default() -> Self {
        Self {
            store: StoreKind::Memory,
            max_entries: DEFAULT_MAX_ENTRIES,
            max_entry_bytes: DEFAULT_MAX_ENTRY_BYTES,
            semantic_max_entries: DEFAULT_SEMANTIC_MAX_ENTRIES,
            semantic_max_bytes: DEFAULT_SEMANTIC_MAX_BYTES,
            purges: Vec::new(),
            by_model: Vec::new(),
            by_group: Vec::new(),
            by_key: Vec::new(),
            any: false,
        }
    }
}

impl CacheSettings {
    /// True when no model, group or key turns the cache on: requests skip it entirely.
    pub fn is_empty(&self) -> bool {
        !self.any
    }

    /// The group whose entries a `group`-scoped request shares: the first of `groups` with a
    /// `cache:` block, else the first of them.
    pub fn scope_group(&self, groups: &[usize]) -> Option<usize> {
        groups.iter().copied().find(|g| at(&self.by_group, *g).is_some()).or_else(|| groups.first().copied())
    }

    /// The policy of a request to model `model` by key `key` in `groups`: the key's, else its
    /// first group's that has one, else the model's; `None` when none applies or it is off.
    pub fn for_request(&self, model: Option<usize>, key: Option<usize>, groups: &[usize]) -> Option<&Policy> {
        let policy = key
            .and_then(|k| at(&self.by_key, k))
            .or_else(|| groups.iter().find_map(|g| at(&self.by_group, *g)))
            .or_else(|| model.and_then(|m| at(&self.by_model, m)))?;
        (policy.ttl_secs > 0).then_some(policy)
    }
}

/// A purge of cached answers: every entry of the scopes and model it names that was created at
/// or before `at_ms` is to be dropped (or treated as a miss) by every store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Purge {
    /// Scopes covered (`key:<name>`, `group:<name>`, `global`); empty: every scope.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    /// The public model covered; `None`: every model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// When the purge was recorded, Unix ms.
    pub at_ms: u64,
}

impl Purge {
    /// Whether this purge covers an entry of `model` in `scope` created at `created_ms`.
    pub fn covers(&self, model: &str, scope: &str, created_ms: u64) -> bool {
        self.at_ms >= created_ms
            && self.model.as_deref().is_none_or(|m| m == model)
            && (self.scopes.is_empty() || self.scopes.iter().any(|s| s == scope))
    }
}

impl CacheSettings {
    /// True when a purge recorded at or after `created_ms` covers (model, scope).
    pub fn purged(&self, model: &str, scope: &str, created_ms: u64) -> bool {
        // At most a few hundred, usually none: a scan is cheaper than any index.
        self.purges.iter().any(|p| p.covers(model, scope, created_ms))
    }
}

fn at(list: &[Option<Policy>], i: usize) -> Option<&Policy> {
    list.get(i).and_then(Option::as_ref)
}

/// Checks `cache_store:` and every `cache:` block; `is_model` says whether a public model of
/// that name exists (for `semantic.embedding_model`).
pub(super) fn validate(raw: &RawConfig, is_model: &dyn Fn(&str) -> bool, p: &mut Problems) -> CacheSettings {
    let mut out = store(raw, p);
    let mut block = |path: String, c: Option<&RawCache>| c.and_then(|c| policy(&path, c, is_model, p));
    out.by_model =
        raw.models.iter().enumerate().map(|(i, m)| block(format!("models[{i}].cache"), m.cache.as_ref())).collect();
    out.by_group =
        raw.groups.iter().enumerate().map(|(i, g)| block(format!("groups[{i}].cache"), g.cache.as_ref())).collect();
    out.by_key =
        raw.keys.iter().enumerate().map(|(i, k)| block(format!("keys[{i}].cache"), k.cache.as_ref())).collect();
    out.any = [&out.by_model, &out.by_group, &out.by_key].iter().any(|l| l.iter().flatten().any(|x| x.ttl_secs > 0));
    out
}

fn store(raw: &RawConfig, p: &mut Problems) -> CacheSettings {
    let mut out = CacheSettings::default();
    let Some(s) = &raw.cache_store else { return out };
    out.store = match s.kind.as_deref() {
        None | Some("memory") => StoreKind::Memory,
        Some("redis") => {
            if raw.redis.is_none() {
                p.add("cache_store.kind".to_string(), "`redis` needs the `redis:` block".to_string());
            }
            StoreKind::Redis
        }
        Some(other) => {
            p.add("cache_store.kind".to_string(), format!("unknown store {other:?} (memory, redis)"));
            StoreKind::Memory
        }
    };
    out.max_entries = bounded(p, "max_entries", s.max_entries, (1, MAX_ENTRIES), DEFAULT_MAX_ENTRIES);
    out.max_entry_bytes =
        bounded(p, "max_entry_bytes", s.max_entry_bytes, (1, MAX_ENTRY_BYTES), DEFAULT_MAX_ENTRY_BYTES);
    out.semantic_max_entries =
        bounded(p, "semantic_max_entries", s.semantic_max_entries, (1, MAX_ENTRIES), DEFAULT_SEMANTIC_MAX_ENTRIES);
    out.semantic_max_bytes = bounded(
        p,
        "semantic_max_bytes",
        s.semantic_max_bytes,
        (MIN_SEMANTIC_BYTES, MAX_SEMANTIC_BYTES),
        DEFAULT_SEMANTIC_MAX_BYTES,
    );
    out
}

/// `cache_store.<field>` within `min..=max` (a problem and `default` when not), or `default`.
fn bounded<T: Copy + PartialOrd + std::fmt::Display>(
    p: &mut Problems,
    field: &str,
    value: Option<T>,
    (min, max): (T, T),
    default: T,
) -> T {
    match value {
        Some(v) if v < min => {
            p.add(format!("cache_store.{field}"), format!("must be at least {min}"));
            default
        }
        Some(v) if v > max => {
            p.add(format!("cache_store.{field}"), format!("at most {max}"));
            default
        }
        Some(v) => v,
        None => default,
    }
}

fn policy(path: &str, c: &RawCache, is_model: &dyn Fn(&str) -> bool, p: &mut Problems) -> Option<Policy> {
    let before = p.0.len();
    if c.ttl_secs > MAX_TTL_SECS {
        p.add(format!("{path}.ttl_secs"), format!("at most {MAX_TTL_SECS} (30 days)"));
    }
    let scope = match c.scope.as_deref() {
        None | Some("key") => Scope::Key,
        Some("group") => Scope::Group,
        Some("global") => Scope::Global,
        Some(other) => {
            p.add(format!("{path}.scope"), format!("unknown scope {other:?} (key, group, global)"));
            Scope::Key
        }
    };
    let semantic = c.semantic.as_ref().map(|s| semantic(&format!("{path}.semantic"), s, is_model, p));
    (p.0.len() == before).then_some(Policy { ttl_secs: c.ttl_secs, scope, semantic })
}

fn semantic(path: &str, s: &RawSemantic, is_model: &dyn Fn(&str) -> bool, p: &mut Problems) -> Semantic {
    if !is_model(&s.embedding_model) {
        p.add(format!("{path}.embedding_model"), format!("no model named {:?}", s.embedding_model));
    }
    let threshold = s.threshold.unwrap_or(DEFAULT_THRESHOLD);
    if !(threshold > 0.0 && threshold <= 1.0) {
        p.add(format!("{path}.threshold"), "must be in (0, 1]".to_string());
    }
    Semantic { embedding_model: s.embedding_model.clone(), threshold }
}

#[cfg(test)]
#[path = "cache_tests.rs"]
mod tests;
