//! Rows ⇄ the configuration document: reading every table into a [`RawConfig`] (ordered by
//! name, so the same rows always give the same snapshot version) and applying one [`Change`].

use std::collections::BTreeSet;

use deadpool_postgres::GenericClient;
use ferrogate_core::config::a2a::RawA2aAgent;
use ferrogate_core::config::cache::RawCache;
use ferrogate_core::config::guardrails::RawGuardrail;
use ferrogate_core::config::mcp::RawMcpServer;
use ferrogate_core::config::{
    Problem, RawConfig, RawEndpoint, RawGroup, RawKey, RawLimits, RawModel, RawPrice, RawProvider, RawTarget,
};
use serde_json::Value;

use super::StoreError;

mod agents;
mod guardrails;
mod provider_settings;

/// A section of the configuration, i.e. a resource collection of the admin API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Section {
    /// `providers`
    Providers,
    /// `models`
    Models,
    /// `aliases`
    Aliases,
    /// `groups`
    Groups,
    /// `keys`
    Keys,
    /// `pricing`
    Pricing,
    /// `mcp_servers`
    McpServers,
    /// `a2a_agents`
    A2aAgents,
    /// `guardrails`
    Guardrails,
}

impl Section {
    /// Every section, in document order.
    pub const ALL: [Section; 9] = [
        Section::Providers,
        Section::Models,
        Section::Aliases,
        Section::Groups,
        Section::Keys,
        Section::Pricing,
        Section::McpServers,
        Section::A2aAgents,
        Section::Guardrails,
    ];

    /// Its name in the document and in the admin API's paths.
    pub fn as_str(self) -> &'static str {
        match self {
            Section::Providers => "providers",
            Section::Models => "models",
            Section::Aliases => "aliases",
            Section::Groups => "groups",
            Section::Keys => "keys",
            Section::Pricing => "pricing",
            Section::McpServers => "mcp_servers",
            Section::A2aAgents => "a2a_agents",
            Section::Guardrails => "guardrails",
        }
    }
}

/// One row, in the shape the config file gives it.
#[derive(Debug, Clone, PartialEq)]
pub enum Resource {
    /// A provider (its `api_key`, when given, is sealed before it is stored).
    Provider(RawProvider),
    /// A model and its targets.
    Model(RawModel),
    /// An alias of a model.
    Alias {
        /// Alias name.
        name: String,
        /// The model it names.
        model: String,
    },
    /// A group of keys.
    Group(RawGroup),
    /// A key (digest only).
    Key(RawKey),
    /// Prices of one upstream model.
    Price {
        /// Upstream model id (or `provider/model`).
        model: String,
        /// Its prices.
        price: RawPrice,
    },
    /// An MCP server (its `api_key`, when given, is sealed before it is stored).
    McpServer(RawMcpServer),
    /// An A2A agent (its `api_key`, when given, is sealed before it is stored).
    A2aAgent(RawA2aAgent),
    /// A guardrail policy.
    Guardrail(RawGuardrail),
}

impl Resource {
    fn row(&self) -> (Section, String) {
        match self {
            Resource::Provider(p) => (Section::Providers, p.name.clone()),
            Resource::Model(m) => (Section::Models, m.name.clone()),
            Resource::Alias { name, .. } => (Section::Aliases, name.clone()),
            Resource::Group(g) => (Section::Groups, g.name.clone()),
            Resource::Key(k) => (Section::Keys, k.name.clone()),
            Resource::Price { model, .. } => (Section::Pricing, model.clone()),
            Resource::McpServer(s) => (Section::McpServers, s.name.clone()),
            Resource::A2aAgent(a) => (Section::A2aAgents, a.name.clone()),
            Resource::Guardrail(g) => (Section::Guardrails, g.name.clone()),
        }
    }
}

/// One write.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// Insert; an existing row of that name is a conflict.
    Create(Resource),
    /// Insert or replace.
    Replace(Resource),
    /// Remove a row by name.
    Delete(Section, String),
}

impl Change {
    /// The row written.
    pub fn row(&self) -> (Section, String) {
        match self {
            Change::Create(r) | Change::Replace(r) => r.row(),
            Change::Delete(s, n) => (*s, n.clone()),
        }
    }

    /// `section/name`, for messages.
    pub fn target(&self) -> String {
        let (s, n) = self.row();
        format!("{}/{n}", s.as_str())
    }

    /// Whether the change leaves a row behind (create or replace).
    pub fn is_put(&self) -> bool {
        !matches!(self, Change::Delete(..))
    }

    /// The change with a row's plaintext credential replaced by `seal(row, key)`, where `row`
    /// is `section/name` (providers, MCP servers and A2A agents hold one).
    pub(super) fn seal_with(
        self,
        seal: impl Fn(&str, &str) -> Result<String, StoreError>,
    ) -> Result<Change, StoreError> {
        let sealed = |resource: Resource| -> Result<Resource, StoreError> {
            let (section, name) = resource.row();
            let mut resource = resource;
            if let Some(key) = credential(&mut resource) {
                if let Some(plain) = key.take() {
                    *key = Some(seal(&format!("{}/{name}", section.as_str()), &plain)?);
                }
            }
            Ok(resource)
        };
        Ok(match self {
            Change::Create(r) => Change::Create(sealed(r)?),
            Change::Replace(r) => Change::Replace(sealed(r)?),
            other => other,
        })
    }
}

/// The credential a row holds, if its section has one.
fn credential(resource: &mut Resource) -> Option<&mut Option<String>> {
    match resource {
        Resource::Provider(p) => Some(&mut p.api_key),
        Resource::McpServer(s) => Some(&mut s.api_key),
        Resource::A2aAgent(a) => Some(&mut a.api_key),
        _ => None,
    }
}

/// Every credential of `raw` with its row (`section/name`), sealed as stored or opened.
pub(super) fn credentials(raw: &mut RawConfig) -> impl Iterator<Item = (String, &mut Option<String>)> {
    let providers = raw.providers.iter_mut().map(|p| (format!("providers/{}", p.name), &mut p.api_key));
    let servers = raw.mcp_servers.iter_mut().map(|s| (format!("mcp_servers/{}", s.name), &mut s.api_key));
    let agents = raw.a2a_agents.iter_mut().map(|a| (format!("a2a_agents/{}", a.name), &mut a.api_key));
    providers.chain(servers).chain(agents)
}

/// Every row of `raw` as a replace (seeding a database from a file).
pub(super) fn changes_of(raw: &RawConfig) -> Vec<Change> {
    let mut out: Vec<Change> = Vec::new();
    out.extend(raw.providers.iter().cloned().map(|p| Change::Replace(Resource::Provider(p))));
    out.extend(raw.models.iter().cloned().map(|m| Change::Replace(Resource::Model(m))));
    out.extend(raw.aliases.iter().map(|(n, m)| Change::Replace(Resource::Alias { name: n.clone(), model: m.clone() })));
    out.extend(raw.groups.iter().cloned().map(|g| Change::Replace(Resource::Group(g))));
    out.extend(raw.keys.iter().cloned().map(|k| Change::Replace(Resource::Key(k))));
    out.extend(
        raw.pricing.iter().map(|(m, p)| Change::Replace(Resource::Price { model: m.clone(), price: p.clone() })),
    );
    out.extend(raw.mcp_servers.iter().cloned().map(|s| Change::Replace(Resource::McpServer(s))));
    out.extend(raw.a2a_agents.iter().cloned().map(|a| Change::Replace(Resource::A2aAgent(a))));
    out.extend(raw.guardrails.iter().cloned().map(|g| Change::Replace(Resource::Guardrail(g))));
    out
}

/// Reads the whole configuration (provider keys still sealed, in `api_key`).
pub(super) async fn read(c: &impl GenericClient) -> Result<RawConfig, StoreError> {
    let mut raw = RawConfig::default();
    for r in c
        .query(
            "SELECT name, kind, base_url, endpoints, api_key_env, api_key_sealed, kv, max_concurrency, endpoints_dns, settings FROM fg_providers ORDER BY name",
            &[],
        )
        .await?
    {
        let addresses: Vec<String> = r.get(3);
        let provider = RawProvider {
            name: r.get(0),
            kind: r.get(1),
            base_url: r.get(2),
            endpoints: addresses.iter().map(|a| RawEndpoint::from(a.as_str())).collect(),
            api_key_env: r.get(4),
            api_key: r.get(5),
            max_concurrency: r.get::<_, Option<i32>>(7).and_then(|n| u32::try_from(n).ok()),
            endpoints_dns: r.get(8),
            ..RawProvider::default()
        };
        raw.providers.push(provider_settings::apply(with_kv(provider, r.get(6)), r.get(9)));
    }
    let targets = c
        .query("SELECT model, provider, upstream_model, weight FROM fg_model_targets ORDER BY model, position", &[])
        .await?;
    let models = "SELECT name, strategy, fallbacks, flow_control, guardrails, cache FROM fg_models ORDER BY name";
    for r in c.query(models, &[]).await? {
        let name: String = r.get(0);
        let targets = targets.iter().filter(|t| t.get::<_, String>(0) == name).map(|t| RawTarget {
            provider: t.get(1),
            model: t.get(2),
            weight: t.get::<_, Option<i32>>(3).and_then(|w| u32::try_from(w).ok()),
        });
        let flow_control = r.get::<_, Option<Value>>(3).and_then(|v| serde_json::from_value(v).ok());
        raw.models.push(RawModel {
            targets: targets.collect(),
            name,
            strategy: r.get(1),
            fallbacks: r.get(2),
            flow_control,
            guardrails: r.get(4),
            cache: cache(r.get(5)),
        });
    }
    for r in c.query("SELECT name, model FROM fg_aliases ORDER BY name", &[]).await? {
        raw.aliases.insert(r.get(0), r.get(1));
    }
    let groups = "SELECT name, models, limits, priority, mcp, a2a, guardrails, cache FROM fg_groups ORDER BY name";
    for r in c.query(groups, &[]).await? {
        raw.groups.push(RawGroup {
            name: r.get(0),
            models: r.get(1),
            limits: limits(r.get(2)),
            priority: r.get(3),
            mcp: r.get(4),
            a2a: r.get(5),
            guardrails: r.get(6),
            cache: cache(r.get(7)),
        });
    }
    let keys = "SELECT name, digest, groups, models, expires_at, limits, priority, mcp, a2a, guardrails, cache \
                FROM fg_keys ORDER BY name";
    for r in c.query(keys, &[]).await? {
        raw.keys.push(RawKey {
            name: r.get(0),
            digest: r.get(1),
            groups: r.get(2),
            models: r.get(3),
            expires_at: r.get(4),
            limits: limits(r.get(5)),
            priority: r.get(6),
            mcp: r.get(7),
            a2a: r.get(8),
            guardrails: r.get(9),
            cache: cache(r.get(10)),
        });
    }
    for r in c
        .query(
            "SELECT model, input_per_mtok, output_per_mtok, cached_input_per_mtok FROM fg_pricing ORDER BY model",
            &[],
        )
        .await?
    {
        let price = RawPrice { input_per_mtok: r.get(1), output_per_mtok: r.get(2), cached_input_per_mtok: r.get(3) };
        raw.pricing.insert(r.get(0), price);
    }
    agents::read(c, &mut raw).await?;
    guardrails::read(c, &mut raw).await?;
    Ok(raw)
}

fn limits(v: Option<Value>) -> Option<RawLimits> {
    v.and_then(|v| serde_json::from_value(v).ok())
}

fn limits_json(l: Option<&RawLimits>) -> Option<Value> {
    l.and_then(|l| serde_json::to_value(l).ok())
}

/// A `cache` column as the row's `cache:` block (`NULL`, or a block this build cannot read:
/// none, so the row still serves, uncached).
fn cache(v: Option<Value>) -> Option<RawCache> {
    v.and_then(|v| serde_json::from_value(v).ok())
}

/// A row's `cache:` block as its `cache` column holds it.
fn cache_json(c: Option<&RawCache>) -> Option<Value> {
    c.and_then(|c| serde_json::to_value(c).ok())
}

/// Applies `change`; false when a replace or delete found no row to act on (deletes only).
pub(super) async fn apply(c: &impl GenericClient, change: &Change) -> Result<bool, StoreError> {
    let (resource, create) = match change {
        Change::Delete(section, name) => {
            let sql = format!("DELETE FROM fg_{} WHERE {} = $1", section.as_str(), key_column(*section));
            return Ok(c.execute(sql.as_str(), &[name]).await? > 0);
        }
        Change::Create(r) => (r, true),
        Change::Replace(r) => (r, false),
    };
    let (section, name) = resource.row();
    let existing = format!("DELETE FROM fg_{} WHERE {} = $1", section.as_str(), key_column(section));
    let removed = c.execute(existing.as_str(), &[&name]).await?;
    if create && removed > 0 {
        return Err(StoreError::Conflict(format!("{}/{name} already exists", section.as_str())));
    }
    insert(c, resource).await.map_err(|e| match e.code() {
        Some(code) if *code == tokio_postgres::error::SqlState::UNIQUE_VIOLATION => StoreError::Conflict(format!(
            "{}/{name}: {}",
            section.as_str(),
            e.as_db_error().map_or("duplicate", |d| d.message())
        )),
        _ => StoreError::Db(e),
    })?;
    Ok(true)
}

fn key_column(section: Section) -> &'static str {
    if section == Section::Pricing {
        "model"
    } else {
        "name"
    }
}

async fn insert(c: &impl GenericClient, resource: &Resource) -> Result<(), tokio_postgres::Error> {
    match resource {
        Resource::Provider(p) => {
            c.execute(
                "INSERT INTO fg_providers (name, kind, base_url, endpoints, api_key_env, api_key_sealed, kv, max_concurrency, endpoints_dns, settings) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
                &[
                    &p.name,
                    &p.kind,
                    &p.base_url,
                    &addresses(p),
                    &p.api_key_env,
                    &p.api_key,
                    &kv_column(p),
                    &p.max_concurrency.map(|n| i32::try_from(n).unwrap_or(i32::MAX)),
                    &p.endpoints_dns,
                    &provider_settings::column(p),
                ],
            )
            .await?;
        }
        Resource::Model(m) => {
            c.execute(
                "INSERT INTO fg_models (name, strategy, fallbacks, flow_control, guardrails, cache) VALUES ($1, $2, $3, $4, $5, $6)",
                &[
                    &m.name,
                    &m.strategy,
                    &m.fallbacks,
                    &m.flow_control.as_ref().and_then(|f| serde_json::to_value(f).ok()),
                    &m.guardrails,
                    &cache_json(m.cache.as_ref()),
                ],
            )
            .await?;
            for (i, t) in m.targets.iter().enumerate() {
                let position = i32::try_from(i).unwrap_or(i32::MAX);
                let weight = t.weight.map(|w| i32::try_from(w).unwrap_or(i32::MAX));
                c.execute(
                    "INSERT INTO fg_model_targets (model, position, provider, upstream_model, weight) VALUES ($1, $2, $3, $4, $5)",
                    &[&m.name, &position, &t.provider, &t.model, &weight],
                )
                .await?;
            }
        }
        Resource::Alias { name, model } => {
            c.execute("INSERT INTO fg_aliases (name, model) VALUES ($1, $2)", &[name, model]).await?;
        }
        Resource::Group(g) => {
            let limits = limits_json(g.limits.as_ref());
            c.execute(
                "INSERT INTO fg_groups (name, models, limits, priority, mcp, a2a, guardrails, cache) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                &[&g.name, &g.models, &limits, &g.priority, &g.mcp, &g.a2a, &g.guardrails, &cache_json(g.cache.as_ref())],
            )
            .await?;
        }
        Resource::Key(k) => {
            let limits = limits_json(k.limits.as_ref());
            c.execute(
                "INSERT INTO fg_keys (name, digest, groups, models, expires_at, limits, priority, mcp, a2a, guardrails, cache) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
                &[
                    &k.name,
                    &k.digest,
                    &k.groups,
                    &k.models,
                    &k.expires_at,
                    &limits,
                    &k.priority,
                    &k.mcp,
                    &k.a2a,
                    &k.guardrails,
                    &cache_json(k.cache.as_ref()),
                ],
            )
            .await?;
        }
        Resource::Price { model, price } => {
            c.execute(
                "INSERT INTO fg_pricing (model, input_per_mtok, output_per_mtok, cached_input_per_mtok) VALUES ($1, $2, $3, $4)",
                &[model, &price.input_per_mtok, &price.output_per_mtok, &price.cached_input_per_mtok],
            )
            .await?;
        }
        Resource::McpServer(s) => agents::insert_mcp(c, s).await?,
        Resource::A2aAgent(a) => agents::insert_a2a(c, a).await?,
        Resource::Guardrail(g) => guardrails::insert(c, g).await?,
    }
    Ok(())
}

/// Every row of `raw` by section and name.
pub(super) fn names(raw: &RawConfig) -> BTreeSet<(Section, String)> {
    let mut out = BTreeSet::new();
    out.extend(raw.providers.iter().map(|p| (Section::Providers, p.name.clone())));
    out.extend(raw.models.iter().map(|m| (Section::Models, m.name.clone())));
    out.extend(raw.aliases.keys().map(|a| (Section::Aliases, a.clone())));
    out.extend(raw.groups.iter().map(|g| (Section::Groups, g.name.clone())));
    out.extend(raw.keys.iter().map(|k| (Section::Keys, k.name.clone())));
    out.extend(raw.pricing.keys().map(|m| (Section::Pricing, m.clone())));
    out.extend(raw.mcp_servers.iter().map(|s| (Section::McpServers, s.name.clone())));
    out.extend(raw.a2a_agents.iter().map(|a| (Section::A2aAgents, a.name.clone())));
    out.extend(raw.guardrails.iter().map(|g| (Section::Guardrails, g.name.clone())));
    out
}

/// The problems whose path is inside `row` of `raw` (all of them when none is).
pub(super) fn problems_of(problems: &[Problem], raw: &RawConfig, row: &(Section, String)) -> Vec<Problem> {
    let (section, name) = row;
    let index = match section {
        Section::Providers => raw.providers.iter().position(|p| &p.name == name),
        Section::Models => raw.models.iter().position(|m| &m.name == name),
        Section::Groups => raw.groups.iter().position(|g| &g.name == name),
        Section::Keys => raw.keys.iter().position(|k| &k.name == name),
        Section::McpServers => raw.mcp_servers.iter().position(|s| &s.name == name),
        Section::A2aAgents => raw.a2a_agents.iter().position(|a| &a.name == name),
        Section::Guardrails => raw.guardrails.iter().position(|g| &g.name == name),
        Section::Aliases | Section::Pricing => None,
    };
    let prefix = index.map_or_else(|| format!("{}.{name}", section.as_str()), |i| format!("{}[{i}]", section.as_str()));
    let inside = |p: &&Problem| {
        p.path
            .strip_prefix(&prefix)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('.') || rest.starts_with('['))
    };
    let own: Vec<Problem> = problems.iter().filter(inside).cloned().collect();
    if own.is_empty() {
        problems.to_vec()
    } else {
        own
    }
}

/// One section as the admin API lists it: the config file's shape, credentials never
/// included (`api_key_set` says whether one is stored).
pub(crate) fn section_json(raw: &RawConfig, section: Section) -> Value {
    let to = |v: Result<Value, serde_json::Error>| v.unwrap_or(Value::Null);
    match section {
        Section::Providers => without_keys(raw.providers.iter().map(|p| {
            // Keys, pooled keys and minted cloud keys never leave in an answer: only whether any is set.
            let set = p.api_key.is_some() || !p.api_keys.is_empty() || p.aws_keys.is_some();
            (RawProvider { api_key: None, api_keys: Vec::new(), aws_keys: None, ..p.clone() }, set)
        })),
        Section::McpServers => without_keys(
            raw.mcp_servers.iter().map(|s| (RawMcpServer { api_key: None, ..s.clone() }, s.api_key.is_some())),
        ),
        Section::A2aAgents => without_keys(
            raw.a2a_agents.iter().map(|a| (RawA2aAgent { api_key: None, ..a.clone() }, a.api_key.is_some())),
        ),
        Section::Models => to(serde_json::to_value(&raw.models)),
        Section::Aliases => to(serde_json::to_value(&raw.aliases)),
        Section::Groups => to(serde_json::to_value(&raw.groups)),
        Section::Keys => to(serde_json::to_value(&raw.keys)),
        Section::Pricing => to(serde_json::to_value(&raw.pricing)),
        Section::Guardrails => to(serde_json::to_value(&raw.guardrails)),
    }
}

/// Rows without their credential, each with `api_key_set` saying whether one is stored.
fn without_keys<T: serde::Serialize>(rows: impl Iterator<Item = (T, bool)>) -> Value {
    let row = |(entry, set): (T, bool)| {
        let mut v = serde_json::to_value(entry).unwrap_or(Value::Null);
        if let Some(o) = v.as_object_mut() {
            o.insert("api_key_set".into(), set.into());
        }
        v
    };
    Value::Array(rows.map(row).collect())
}

/// The provider's KV-cache settings as the `kv` column holds them (`None`: none set).
fn kv_column(p: &RawProvider) -> Option<serde_json::Value> {
    let objects = p.endpoints.iter().any(|e| e.kv_events.is_some() || e.kv_replay.is_some());
    let settings = p.kv_block_size.is_some()
        || p.kv_topic.is_some()
        || p.kv_max_blocks.is_some()
        || p.kv_tokenize.is_some()
        || p.kv_tier_weights.is_some()
        || p.lmcache_ttl_secs.is_some()
        || p.kv_events_port.is_some()
        || p.kv_replay_port.is_some();
    if !objects && !settings {
        return None;
    }
    let kv = RawProvider {
        endpoints: p.endpoints.clone(),
        kv_block_size: p.kv_block_size,
        kv_topic: p.kv_topic.clone(),
        kv_max_blocks: p.kv_max_blocks,
        kv_tokenize: p.kv_tokenize,
        kv_tier_weights: p.kv_tier_weights,
        lmcache_ttl_secs: p.lmcache_ttl_secs,
        kv_events_port: p.kv_events_port,
        kv_replay_port: p.kv_replay_port,
        ..RawProvider::default()
    };
    let mut value = serde_json::to_value(kv).ok()?;
    if let Some(map) = value.as_object_mut() {
        map.retain(|k, _| k == "endpoints" || k.starts_with("kv_") || k.starts_with("lmcache_"));
    }
    Some(value)
}

fn addresses(p: &RawProvider) -> Vec<String> {
    p.endpoints.iter().map(|e| e.address.clone()).collect()
}

/// `provider` with the settings of its `kv` column, which also holds its endpoints' object form.
fn with_kv(mut provider: RawProvider, kv: Option<serde_json::Value>) -> RawProvider {
    #[derive(serde::Deserialize, Default)]
    #[serde(default)]
    struct Kv {
        endpoints: Vec<RawEndpoint>,
        kv_block_size: Option<u32>,
        kv_topic: Option<String>,
        kv_max_blocks: Option<u64>,
        kv_tokenize: Option<bool>,
        kv_tier_weights: Option<ferrogate_core::config::RawTierWeights>,
        lmcache_ttl_secs: Option<u64>,
        kv_events_port: Option<u16>,
        kv_replay_port: Option<u16>,
    }
    let Some(kv) = kv.and_then(|v| serde_json::from_value::<Kv>(v).ok()) else { return provider };
    if kv.endpoints.len() == provider.endpoints.len() {
        provider.endpoints = kv.endpoints;
    }
    provider.kv_block_size = kv.kv_block_size;
    provider.kv_topic = kv.kv_topic;
    provider.kv_max_blocks = kv.kv_max_blocks;
    provider.kv_tokenize = kv.kv_tokenize;
    provider.kv_tier_weights = kv.kv_tier_weights;
    provider.lmcache_ttl_secs = kv.lmcache_ttl_secs;
    provider.kv_events_port = kv.kv_events_port;
    provider.kv_replay_port = kv.kv_replay_port;
    provider
}

#[cfg(test)]
mod cache_tests;
