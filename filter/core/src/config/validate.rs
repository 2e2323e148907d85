//! `RawConfig → Config`: checks every value and cross-reference and builds the indexes.
//!
//! Names are indexed before references are checked, so one bad entry produces one problem
//! rather than a cascade (a provider with a bad URL is still a known provider name). Any
//! problem makes the whole conversion fail; partial results are then discarded, which is why
//! raw positions can be used as indexes throughout.

use std::collections::BTreeMap;

use crate::auth::{parse_digest, DigestIndex};
use crate::keypool::{self, PoolKey};

use super::cloud::{self, CloudFields};
use super::raw::{RawConfig, RawGroup, RawKey, RawModel, RawProvider, RawTarget};
use super::syntax::{self, check_public_name, check_slug};
use super::{
    Config, ConfigError, Credential, Group, Key, Limits, Model, Problem, Provider, ProviderKind, Strategy, Target,
    Unpriced,
};

mod flow;
mod kv;
pub(super) mod lmcache;
mod sections;

/// The `limits` of an MCP server or an A2A agent (checked where the entry is).
pub(super) use sections::server_limits;
use sections::{limits, pricing, shared_limits, store};

/// Collects problems with their paths.
#[derive(Default)]
pub(super) struct Problems(pub(super) Vec<Problem>);

impl Problems {
    pub(super) fn add(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(Problem { path: path.into(), message: message.into() });
    }

    /// Records `result`'s error, if any, at `path`.
    pub(super) fn check<T>(&mut self, path: impl Into<String>, result: Result<T, String>) -> Option<T> {
        result.map_err(|e| self.add(path, e)).ok()
    }
}

/// Name → first position; later duplicates are reported at `section[i].name`.
fn index_names<'a>(section: &str, names: impl Iterator<Item = &'a str>, p: &mut Problems) -> BTreeMap<String, usize> {
    let mut index = BTreeMap::new();
    for (i, name) in names.enumerate() {
        if index.contains_key(name) {
            p.add(format!("{section}[{i}].name"), format!("duplicate name {name:?}"));
        } else {
            index.insert(name.to_string(), i);
        }
    }
    index
}

impl TryFrom<RawConfig> for Config {
    type Error = ConfigError;

    fn try_from(raw: RawConfig) -> Result<Self, ConfigError> {
        let mut p = Problems::default();
        let provider_index = index_names("providers", raw.providers.iter().map(|x| x.name.as_str()), &mut p);
        let model_index = index_names("models", raw.models.iter().map(|x| x.name.as_str()), &mut p);
        let providers: Vec<Provider> =
            raw.providers.iter().enumerate().filter_map(|(i, x)| provider(i, x, &mut p)).collect();
        let refs = Refs {
            providers: &provider_index,
            raw_providers: &raw.providers,
            models: &model_index,
            aliases: &raw.aliases,
        };
        let models: Vec<Model> =
            raw.models.iter().enumerate().filter_map(|(i, m)| model(i, m, &refs, &mut p)).collect();
        let aliases = aliases(&raw.aliases, &model_index, &mut p);
        let group_index = index_names("groups", raw.groups.iter().map(|x| x.name.as_str()), &mut p);
        let groups: Vec<Group> = raw.groups.iter().enumerate().map(|(i, g)| group(i, g, &refs, &mut p)).collect();
        let (mut keys, digest_index) = keys(&raw.keys, &group_index, &refs, &mut p);
        flow::priorities(&raw.keys, &mut keys, &groups);
        let pricing = pricing(&raw.pricing, &mut p);
        let store = store(&raw, &mut p);
        let responses = super::responses::validate(raw.responses.as_ref(), &mut p);
        super::admin::validate(raw.admin.as_ref(), &mut p);
        let mcp = mcp_section(&raw, &mut p);
        let a2a = a2a_section(&raw, &mut p);
        let egress = super::egress::validate(&raw, &mut p);
        let speaks_openai = |name: &str| providers.iter().find(|x| x.name == name).map(|x| x.kind.speaks_openai());
        let guardrails = super::guardrails::validate(&raw, &speaks_openai, &mut p);
        let is_model = |name: &str| model_index.contains_key(name);
        let cache = super::cache::validate(&raw, &is_model, &mut p);
        let org_limits = shared_limits("limits", raw.limits.as_ref(), &mut p);
        let unpriced = unpriced(raw.unpriced.as_deref(), &mut p);
        let redis_url_env = raw.redis.as_ref().map(|r| r.url_env.clone());
        if let Some(var) = &redis_url_env {
            p.check("redis.url_env", syntax::check_env_name(var));
        }
        if !p.0.is_empty() {
            return Err(ConfigError { problems: p.0 });
        }
        let mut config = Config {
            providers,
            models,
            aliases,
            groups,
            keys,
            pricing,
            store,
            redis_url_env,
            limits_fail_closed: raw.redis.as_ref().is_some_and(|r| r.fail_closed),
            responses,
            mcp,
            mcp_grants: Vec::new(),
            a2a,
            a2a_grants: Vec::new(),
            egress,
            guardrails,
            cache,
            limits: org_limits,
            unpriced,
            limit_plans: Default::default(),
            provider_index,
            model_index,
            digest_index,
            grants: Vec::new(),
        };
        // Derived indexes need the validated, cross-referenced config, so they come last.
        config.grants = crate::grants::flatten(&config);
        config.mcp_grants = mcp_grants(&config);
        config.a2a_grants = a2a_grants(&config);
        config.limit_plans = crate::limits::build_plans(&config);
        Ok(config)
    }
}

/// `mcp_servers:` and the `mcp` grants that name them.
fn mcp_section(raw: &RawConfig, p: &mut Problems) -> super::mcp::McpServers {
    let servers = super::mcp::validate(&raw.mcp_servers, p);
    for (i, g) in raw.groups.iter().enumerate() {
        super::mcp::check_grants(&format!("groups[{i}].mcp"), &g.mcp, &servers, p);
    }
    for (i, k) in raw.keys.iter().enumerate() {
        super::mcp::check_grants(&format!("keys[{i}].mcp"), &k.mcp, &servers, p);
    }
    servers
}

/// `a2a_agents:` and the `a2a` grants that name them.
fn a2a_section(raw: &RawConfig, p: &mut Problems) -> super::a2a::A2aAgents {
    let agents = super::a2a::validate(&raw.a2a_agents, p);
    for (i, g) in raw.groups.iter().enumerate() {
        super::a2a::check_grants(&format!("groups[{i}].a2a"), &g.a2a, &agents, p);
    }
    for (i, k) in raw.keys.iter().enumerate() {
        super::a2a::check_grants(&format!("keys[{i}].a2a"), &k.a2a, &agents, p);
    }
    agents
}

/// Each key's A2A grants: its own patterns and its groups'.
fn a2a_grants(config: &Config) -> Vec<super::a2a::A2aGrants> {
    let flatten = |k: &Key| {
        let groups = k.groups.iter().filter_map(|&g| config.groups.get(g)).flat_map(|g| g.a2a.iter());
        super::a2a::A2aGrants::flatten(&config.a2a, k.a2a.iter().chain(groups))
    };
    config.keys.iter().map(flatten).collect()
}

/// Each key's MCP grants: its own patterns and its groups'.
fn mcp_grants(config: &Config) -> Vec<super::mcp::McpGrants> {
    let flatten = |k: &Key| {
        let groups = k.groups.iter().filter_map(|&g| config.groups.get(g)).flat_map(|g| g.mcp.iter());
        super::mcp::McpGrants::flatten(&config.mcp, k.mcp.iter().chain(groups))
    };
    config.keys.iter().map(flatten).collect()
}

fn unpriced(raw: Option<&str>, p: &mut Problems) -> Unpriced {
    match raw {
        None | Some("warn") => Unpriced::Warn,
        Some("ignore") => Unpriced::Ignore,
        Some("block") => Unpriced::Block,
        Some(other) => {
            p.add("unpriced", format!("unknown policy {other:?} (expected ignore, warn or block)"));
            Unpriced::Warn
        }
    }
}

fn provider(i: usize, raw: &RawProvider, p: &mut Problems) -> Option<Provider> {
    let at = |field: &str| format!("providers[{i}].{field}");
    p.check(at("name"), check_slug(&raw.name));
    let kind = ProviderKind::parse(&raw.kind);
    if kind.is_none() {
        let expected = "openai, anthropic, gemini, openai_compatible, azure_openai, bedrock or vertex";
        p.add(at("kind"), format!("unknown kind {:?} (expected {expected})", raw.kind));
    }
    let base_url = p.check(at("base_url"), base_url(kind, raw));
    if let Some(name) = &raw.preset {
        if kind != Some(ProviderKind::OpenAiCompatible) {
            p.add(at("preset"), "presets are openai_compatible providers");
        } else if super::presets::find(name).is_none() {
            p.add(at("preset"), format!("unknown preset {name:?} (expected {})", super::presets::names()));
        }
    }
    let mut endpoints = Vec::with_capacity(raw.endpoints.len());
    for (j, e) in raw.endpoints.iter().enumerate() {
        let at = if e.kv_events.is_some() || e.kv_replay.is_some() {
            format!("providers[{i}].endpoints[{j}].address")
        } else {
            format!("providers[{i}].endpoints[{j}]")
        };
        let Some(e) = p.check(at.clone(), syntax::parse_endpoint(&e.address)) else {
            continue;
        };
        if endpoints.contains(&e) {
            p.add(at, format!("duplicate endpoint {e:?}"));
        }
        endpoints.push(e);
    }
    if let Some(name) = &raw.endpoints_dns {
        if raw.endpoints.is_empty() {
            p.check(at("endpoints_dns"), syntax::parse_endpoint(name));
        } else {
            p.add(at("endpoints_dns"), "excludes endpoints: the endpoints are what the name resolves to".to_string());
        }
    }
    if let Some(pool) = &raw.endpoints_inference_pool {
        if !raw.endpoints.is_empty() || raw.endpoints_dns.is_some() {
            let why = "excludes endpoints and endpoints_dns: the endpoints are the pool's pods";
            p.add(at("endpoints_inference_pool"), why.to_string());
        } else {
            p.check(at("endpoints_inference_pool"), syntax::parse_pool_ref(pool));
        }
    }
    let kv = kv::pool(i, raw, p);
    let lmcache = raw.lmcache.as_ref().and_then(|l| lmcache::settings(i, raw, l, p));
    let max_concurrency = flow::max_concurrency(i, raw, p);
    if let Some(var) = &raw.api_key_env {
        p.check(at("api_key_env"), syntax::check_env_name(var));
    }
    let key_cooldown_ms = key_pool_settings(i, raw, p);
    let kind = kind?;
    let fields = CloudFields {
        region: raw.region.as_deref(),
        project: raw.project.as_deref(),
        api_version: raw.api_version.as_deref(),
        credentials: raw.credentials.as_deref(),
        aws_keys: raw.aws_keys.as_deref(),
        credentials_file_env: raw.credentials_file_env.as_deref(),
    };
    let cloud = cloud::settings(i, kind, &fields, p);
    let keys = provider_keys(i, credential_header(kind, raw), raw, p);
    let credential = keys.first().map(|k| k.credential.clone());
    let base_url = base_url?;
    Some(Provider {
        name: raw.name.clone(),
        kind,
        authority: base_url.authority(),
        base_url,
        endpoints,
        api_key_env: raw.api_key_env.clone(),
        credential,
        key_generation: keypool::generation(&keys),
        keys,
        key_cooldown_ms,
        kv,
        lmcache,
        max_concurrency,
        cloud,
        signs_in: cloud::signs_in(raw),
        preset: raw.preset.as_deref().and_then(super::presets::find),
    })
}

/// The provider's `base_url`: as written, else what its kind and region or preset imply.
fn base_url(kind: Option<ProviderKind>, raw: &RawProvider) -> Result<syntax::BaseUrl, String> {
    if !raw.base_url.is_empty() {
        return syntax::parse_base_url(&raw.base_url);
    }
    let derived = match (kind, &raw.preset) {
        (Some(ProviderKind::OpenAiCompatible), Some(preset)) => super::presets::base_url(preset).map(str::to_string),
        (Some(kind), _) => cloud::default_base_url(kind, raw.region.as_deref()),
        (None, _) => None,
    };
    derived.map_or_else(|| Err("a base_url is required for this provider".to_string()), |u| syntax::parse_base_url(&u))
}

/// The header a provider's key travels in: its kind's, except that an Azure OpenAI provider
/// signing in with Entra ID sends the token as a bearer.
fn credential_header(kind: ProviderKind, raw: &RawProvider) -> &'static str {
    match kind {
        ProviderKind::AzureOpenAi if raw.credentials.is_some() => "authorization",
        kind => kind.credential_header(),
    }
}

/// Builds the credential header; rejects values that would corrupt the header (never echoes
/// the key itself into the problem message).
fn credential(name: &'static str, key: &str) -> Result<Credential, String> {
    if key.is_empty() || key.bytes().any(|b| b.is_ascii_control() || b == b' ') {
        return Err("key is empty or contains spaces or control characters".into());
    }
    let value = if name == "authorization" { format!("Bearer {key}") } else { key.to_string() };
    Ok(Credential { name, value })
}

/// Checks `api_keys_env` (variable names, each once; excludes `api_key_env` and
/// `credentials`) and `key_cooldown_secs`; returns the cooldown in ms.
fn key_pool_settings(i: usize, raw: &RawProvider, p: &mut Problems) -> u64 {
    let at = |field: &str| format!("providers[{i}].{field}");
    if !raw.api_keys_env.is_empty() && raw.api_key_env.is_some() {
        p.add(at("api_keys_env"), "excludes api_key_env: name one key there, or every key of the pool here");
    }
    if !raw.api_keys_env.is_empty() && raw.credentials.is_some() {
        p.add(at("api_keys_env"), "excludes credentials: the sidecar signs in for this provider");
    }
    for (j, var) in raw.api_keys_env.iter().enumerate() {
        let at = format!("providers[{i}].api_keys_env[{j}]");
        if raw.api_keys_env.get(..j).is_some_and(|before| before.contains(var)) {
            p.add(at, format!("duplicate variable {var:?}"));
        } else {
            p.check(at, syntax::check_env_name(var));
        }
    }
    let secs = raw.key_cooldown_secs.unwrap_or(keypool::DEFAULT_COOLDOWN_SECS);
    if !(1..=keypool::MAX_COOLDOWN_SECS).contains(&secs) {
        p.add(at("key_cooldown_secs"), format!("must be between 1 and {}", keypool::MAX_COOLDOWN_SECS));
    }
    secs.saturating_mul(1_000)
}

/// The provider's keys: its `api_key`, or its pool of `api_keys` (excludes `api_key`), each
/// with its fingerprint. A key two variables hold is one key: it is kept once.
fn provider_keys(i: usize, header: &'static str, raw: &RawProvider, p: &mut Problems) -> Vec<PoolKey> {
    if raw.api_key.is_some() && !raw.api_keys.is_empty() {
        p.add(format!("providers[{i}].api_keys"), "excludes api_key");
    }
    let single = raw.api_key.iter().map(|key| (format!("providers[{i}].api_key"), key));
    let pool = raw.api_keys.iter().enumerate().map(|(j, key)| (format!("providers[{i}].api_keys[{j}]"), key));
    let mut keys: Vec<PoolKey> = Vec::with_capacity(raw.api_keys.len().max(1));
    for (at, key) in single.chain(pool) {
        let Some(credential) = p.check(at, credential(header, key)) else { continue };
        if keys.iter().all(|k| k.credential != credential) {
            keys.push(PoolKey { fingerprint: keypool::fingerprint(key), credential });
        }
    }
    keys
}

/// Name tables used to check references.
struct Refs<'a> {
    providers: &'a BTreeMap<String, usize>,
    /// The providers as written (what a strategy needs of its pool).
    raw_providers: &'a [RawProvider],
    models: &'a BTreeMap<String, usize>,
    aliases: &'a BTreeMap<String, String>,
}

fn model(i: usize, raw: &RawModel, refs: &Refs<'_>, p: &mut Problems) -> Option<Model> {
    p.check(format!("models[{i}].name"), check_public_name(&raw.name));
    if raw.targets.is_empty() {
        p.add(format!("models[{i}].targets"), "a model needs at least one target");
    }
    let targets = raw.targets.iter().enumerate().filter_map(|(j, t)| target(i, j, t, refs, p)).collect();
    let strategy = match raw.strategy.as_deref() {
        None => Some(Strategy::RoundRobin),
        Some(s) => s.parse::<Strategy>().ok().or_else(|| {
            let known: Vec<&str> = Strategy::ALL.iter().map(|k| k.as_str()).collect();
            p.add(format!("models[{i}].strategy"), format!("unknown strategy {s:?} (one of {})", known.join(", ")));
            None
        }),
    };
    let fallbacks = fallbacks(i, raw, refs, p);
    if let Some(kind) = strategy.filter(|s| s.uses_kv_index()) {
        kv::check_precise(i, kind, raw, refs, p);
    }
    let flow = flow::model(i, raw, refs, p);
    Some(Model { name: raw.name.clone(), targets, strategy: strategy?, fallbacks, flow })
}

fn target(i: usize, j: usize, t: &RawTarget, refs: &Refs<'_>, p: &mut Problems) -> Option<Target> {
    let at = |field: &str| format!("models[{i}].targets[{j}].{field}");
    let provider = refs.providers.get(&t.provider).copied();
    if provider.is_none() {
        p.add(at("provider"), format!("unknown provider {:?}", t.provider));
    }
    if t.model.is_empty() {
        p.add(at("model"), "must not be empty");
    } else if let Some(why) = crate::route::unsafe_in_path(&t.model) {
        // Ids go into upstream paths as they are (Gemini's `/v1beta/models/{id}:...`).
        p.add(at("model"), format!("{:?} {why}", t.model));
    }
    let weight = t.weight.unwrap_or(1);
    if weight == 0 {
        p.add(at("weight"), "must be at least 1");
    }
    Some(Target { provider: provider?, model: t.model.clone(), weight })
}

fn fallbacks(i: usize, raw: &RawModel, refs: &Refs<'_>, p: &mut Problems) -> Vec<usize> {
    let mut out = Vec::with_capacity(raw.fallbacks.len());
    for (j, f) in raw.fallbacks.iter().enumerate() {
        let at = format!("models[{i}].fallbacks[{j}]");
        match refs.models.get(f) {
            Some(&k) if k == i || *f == raw.name => p.add(at, "a model cannot fall back to itself"),
            Some(&k) => out.push(k),
            None => p.add(at, format!("unknown model {f:?}")),
        }
    }
    out
}

fn aliases(
    raw: &BTreeMap<String, String>,
    models: &BTreeMap<String, usize>,
    p: &mut Problems,
) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for (alias, target) in raw {
        let at = format!("aliases.{alias}");
        p.check(at.clone(), check_public_name(alias));
        if models.contains_key(alias) {
            p.add(at, format!("alias {alias:?} has the same name as a model"));
        } else if let Some(&i) = models.get(target) {
            out.insert(alias.clone(), i);
        } else {
            p.add(at, format!("unknown model {target:?} (aliases must point at a model)"));
        }
    }
    out
}

/// Checks a grant pattern: `*`, `provider/*`, `provider/model`, a model or an alias.
fn check_grant(pattern: &str, refs: &Refs<'_>) -> Result<(), String> {
    if pattern == "*" || refs.models.contains_key(pattern) || refs.aliases.contains_key(pattern) {
        return Ok(());
    }
    match pattern.split_once('/') {
        Some((prov, rest)) if !rest.is_empty() => match refs.providers.contains_key(prov) {
            true => Ok(()),
            false => Err(format!("unknown provider {prov:?} in {pattern:?}")),
        },
        _ => Err(format!("unknown model {pattern:?}")),
    }
}

fn grants(path: &str, raw: &[String], refs: &Refs<'_>, p: &mut Problems) -> Vec<String> {
    for (j, g) in raw.iter().enumerate() {
        p.check(format!("{path}[{j}]"), check_grant(g, refs));
    }
    raw.to_vec()
}

fn group(i: usize, raw: &RawGroup, refs: &Refs<'_>, p: &mut Problems) -> Group {
    p.check(format!("groups[{i}].name"), check_slug(&raw.name));
    Group {
        name: raw.name.clone(),
        models: grants(&format!("groups[{i}].models"), &raw.models, refs, p),
        limits: shared_limits(&format!("groups[{i}].limits"), raw.limits.as_ref(), p),
        priority: raw.priority,
        mcp: raw.mcp.clone(),
        a2a: raw.a2a.clone(),
    }
}

/// The keys, and their digest index (built here: the duplicate check needs it anyway, and
/// hashing decoded digests is far cheaper than ordering 71-character strings).
fn keys(
    raw: &[RawKey],
    group_index: &BTreeMap<String, usize>,
    refs: &Refs<'_>,
    p: &mut Problems,
) -> (Vec<Key>, DigestIndex) {
    index_names("keys", raw.iter().map(|k| k.name.as_str()), p);
    let mut digests = DigestIndex::default();
    digests.reserve(raw.len());
    let keys = raw.iter().enumerate().map(|(i, k)| key(i, k, group_index, refs, &mut digests, p)).collect();
    (keys, digests)
}

fn key(
    i: usize,
    k: &RawKey,
    group_index: &BTreeMap<String, usize>,
    refs: &Refs<'_>,
    digests: &mut DigestIndex,
    p: &mut Problems,
) -> Key {
    // Not `p.check`: its path would be formatted for each of 10,000 keys.
    if let Err(e) = check_slug(&k.name) {
        p.add(format!("keys[{i}].name"), e);
    }
    match syntax::check_digest(&k.digest).map(|()| parse_digest(&k.digest)) {
        Ok(Some(digest)) if digests.contains_key(&digest) => {
            p.add(format!("keys[{i}].digest"), "duplicate digest (two keys with the same secret)");
        }
        Ok(digest) => digests.extend(digest.map(|d| (d, i))),
        Err(e) => p.add(format!("keys[{i}].digest"), e),
    }
    let (groups, group_names) = key_groups(i, k, group_index, p);
    let expires_at =
        k.expires_at.as_deref().and_then(|t| p.check(format!("keys[{i}].expires_at"), syntax::parse_rfc3339(t)));
    // Paths are formatted only where there is something to check: 10,000-key snapshots.
    let models = match k.models.is_empty() {
        true => Vec::new(),
        false => grants(&format!("keys[{i}].models"), &k.models, refs, p),
    };
    let limits = match &k.limits {
        None => Limits::default(),
        Some(l) => limits(&format!("keys[{i}].limits"), Some(l), p),
    };
    // The priority is resolved once every group is known (`flow::priorities`).
    let (name, digest, mcp, a2a) = (k.name.clone(), k.digest.clone(), k.mcp.clone(), k.a2a.clone());
    Key { name, digest, groups, group_names, models, expires_at, limits, priority: 0, mcp, a2a }
}

/// The positions and names of the groups key `i` names; an unknown one is a problem.
fn key_groups(
    i: usize,
    k: &RawKey,
    group_index: &BTreeMap<String, usize>,
    p: &mut Problems,
) -> (Vec<usize>, Vec<String>) {
    let mut groups = Vec::with_capacity(k.groups.len());
    let mut group_names = Vec::with_capacity(k.groups.len());
    for (j, g) in k.groups.iter().enumerate() {
        match group_index.get(g) {
            Some(&found) => {
                groups.push(found);
                group_names.push(g.clone());
            }
            None => p.add(format!("keys[{i}].groups[{j}]"), format!("unknown group {g:?}")),
        }
    }
    (groups, group_names)
}
