//! Gateway configuration: the validated, indexed form the data plane routes with.
//!
//! Two phases: [`RawConfig`] is the serde image of the YAML/JSON document; `Config::try_from`
//! checks every value and cross-reference, collecting *all* problems (each with its path,
//! e.g. `models[1].targets[0].provider`) so `ferrogate check` can print them in one go, and
//! builds the lookup indexes. Core only parses JSON ([`Config::from_json_slice`]); YAML is
//! parsed by the sidecar into [`RawConfig`] to keep the YAML parser out of the filter wasm.

pub mod a2a;
pub mod admin;
mod agent_limits;
pub mod cache;
pub mod cloud;
pub mod egress;
pub mod grants;
pub mod guardrails;
pub mod mcp;
pub mod named;
pub mod presets;
mod raw;
pub mod responses;
#[cfg(feature = "schema")]
mod schema;
pub mod syntax;
mod validate;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;

use crate::auth::DigestIndex;
use crate::grants::Grants;

pub use agent_limits::AgentLimits;
pub use raw::{
    RawBand, RawConfig, RawEndpoint, RawFlowControl, RawGroup, RawKey, RawLimits, RawLmcache, RawModel, RawPrice,
    RawProvider, RawRedis, RawStore, RawTarget, RawTierWeights,
};
pub use responses::{RawResponses, Responses};
pub use syntax::{BaseUrl, Scheme};
pub use validate::lmcache::{Controller, Lmcache, OccupancySource};

/// API family a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    /// api.openai.com.
    OpenAi,
    /// Anthropic Messages API.
    Anthropic,
    /// Google Gemini API.
    Gemini,
    /// Any server speaking the OpenAI API (vLLM, SGLang, Ollama, ...).
    OpenAiCompatible,
    /// Azure OpenAI (deployments, or the v1 API).
    AzureOpenAi,
    /// AWS Bedrock runtime (Converse; SigV4-signed by the filter).
    Bedrock,
    /// Google Vertex AI (Gemini and Anthropic models).
    Vertex,
}

impl ProviderKind {
    /// Parses the config spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "openai" => Self::OpenAi,
            "anthropic" => Self::Anthropic,
            "gemini" => Self::Gemini,
            "openai_compatible" => Self::OpenAiCompatible,
            "azure_openai" => Self::AzureOpenAi,
            "bedrock" => Self::Bedrock,
            "vertex" => Self::Vertex,
            _ => return None,
        })
    }

    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OpenAi => "openai",
            Self::Anthropic => "anthropic",
            Self::Gemini => "gemini",
            Self::OpenAiCompatible => "openai_compatible",
            Self::AzureOpenAi => "azure_openai",
            Self::Bedrock => "bedrock",
            Self::Vertex => "vertex",
        }
    }

    /// True when the provider accepts OpenAI-dialect request bodies unchanged.
    pub fn speaks_openai(self) -> bool {
        matches!(self, Self::OpenAi | Self::OpenAiCompatible | Self::AzureOpenAi)
    }

    /// Header that carries the provider credential (value shape in [`Credential`]).
    pub fn credential_header(self) -> &'static str {
        match self {
            Self::OpenAi | Self::OpenAiCompatible | Self::Bedrock | Self::Vertex => "authorization",
            Self::Anthropic => "x-api-key",
            Self::Gemini => "x-goog-api-key",
            Self::AzureOpenAi => "api-key",
        }
    }
}

/// How a model picks among its targets: every [`crate::balance::StrategyKind`] spelling
/// (the name stays for the configuration's readers).
pub use crate::balance::StrategyKind as Strategy;

/// A credential header ready to send upstream.
#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    /// Lower-case header name.
    pub name: &'static str,
    /// Full header value (`Bearer <key>` for `authorization`).
    pub value: String,
}

impl fmt::Debug for Credential {
    // Keys must never reach logs, even through `{:?}` of a whole config.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Credential {{ name: {:?}, value: <redacted> }}", self.name)
    }
}

/// A validated provider.
#[derive(Debug, Clone, PartialEq)]
pub struct Provider {
    /// Slug; also the Envoy cluster name.
    pub name: String,
    /// API family.
    pub kind: ProviderKind,
    /// Parsed `base_url`.
    pub base_url: BaseUrl,
    /// `:authority` to send (`host` or `host:port` when the port is not the default).
    pub authority: String,
    /// Normalised `host:port` pool (empty: no pool).
    pub endpoints: Vec<String>,
    /// Environment variable the key came from, if any.
    pub api_key_env: Option<String>,
    /// Credential header derived from the resolved key, if any: with a key pool, its first key.
    pub credential: Option<Credential>,
    /// Every key of the provider, in order (`api_key`, or the pool of `api_keys`); with more
    /// than one, requests are spread over them ([`crate::keypool`]).
    pub keys: Vec<crate::keypool::PoolKey>,
    /// [`crate::keypool::generation`] of `keys`: a key disabled under another one is usable.
    pub key_generation: u64,
    /// `key_cooldown_secs` in ms: the rest of a pooled key after a 429 without `Retry-After`.
    pub key_cooldown_ms: u64,
    /// KV-cache events and tokenization of the pool, when an endpoint publishes events or
    /// `kv_tokenize` is on.
    pub kv: Option<KvPool>,
    /// LMCache telemetry of the pool's engines, when configured.
    pub lmcache: Option<Lmcache>,
    /// Most requests in flight per endpoint for flow-controlled models (`None`: no bound).
    pub max_concurrency: Option<u32>,
    /// Region, project, API version and signing keys of a cloud kind.
    pub cloud: Option<cloud::Cloud>,
    /// The sidecar signs in for this provider (`credentials:`): without a token yet, requests
    /// get a 503 rather than going out unauthenticated.
    pub signs_in: bool,
    /// The hosted API an `openai_compatible` provider names with `preset:`.
    pub preset: Option<&'static presets::Preset>,
}

/// A pool's KV-cache settings (`precise_cache_aware`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvPool {
    /// Tokens per block, as the engines hash them.
    pub block_size: u32,
    /// Topic prefix subscribed to.
    pub topic: String,
    /// Bound on the provider's block index.
    pub max_blocks: u64,
    /// Whether the filter asks a replica's `/tokenize` when a request carries no token ids.
    pub tokenize: bool,
    /// What a block is worth in each tier when scoring endpoints.
    pub tier_weights: crate::kv::TierWeights,
    /// How long a block held in CPU memory or storage stays indexed after its last store
    /// event, in seconds.
    pub offload_ttl_secs: u64,
    /// Per endpoint, in `endpoints` order: its event sockets, when it publishes.
    pub sources: Vec<Option<KvSource>>,
}

/// Where one engine publishes its KV-cache events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvSource {
    /// The PUB socket (`tcp://host:port`).
    pub events: String,
    /// The replay ROUTER socket, if the engine has one.
    pub replay: Option<String>,
}

/// Default seconds an offloaded block stays indexed after its last store event.
pub const DEFAULT_LMCACHE_TTL_SECS: u64 = 300;

/// Default tokens per KV block (vLLM's `--block-size`).
pub const DEFAULT_KV_BLOCK_SIZE: u32 = 16;
/// Default bound on a provider's KV-block index.
pub const DEFAULT_KV_MAX_BLOCKS: u64 = 1_000_000;
/// Most endpoints a KV-indexed pool may have (holders are a 64-bit set per block).
pub const MAX_KV_ENDPOINTS: usize = 64;

/// One target of a model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Index into [`Config::providers`].
    pub provider: usize,
    /// Upstream model id.
    pub model: String,
    /// Relative weight (≥ 1).
    pub weight: u32,
}

/// A validated public model.
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    /// Public name.
    pub name: String,
    /// Targets, never empty.
    pub targets: Vec<Target>,
    /// Selection strategy.
    pub strategy: Strategy,
    /// Indexes into [`Config::models`], in order.
    pub fallbacks: Vec<usize>,
    /// The proxy-wide queue that holds requests while every target is saturated.
    pub flow: Option<crate::flow::FlowControl>,
}

/// What a USD budget does with a model that has no price (its cost cannot be counted).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Unpriced {
    /// Serve it; the budget does not see it.
    Ignore,
    /// Serve it and log once per model.
    #[default]
    Warn,
    /// Refuse it (402) wherever a USD budget applies.
    Block,
}

/// Limits; `None` means unlimited.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Limits {
    /// Requests per minute (sliding 60 s).
    pub requests_per_minute: Option<u64>,
    /// Requests per day (sliding 24 h).
    pub requests_per_day: Option<u64>,
    /// Tokens per minute (sliding 60 s).
    pub tokens_per_minute: Option<u64>,
    /// Tokens per day (sliding 24 h).
    pub tokens_per_day: Option<u64>,
    /// Tokens per UTC calendar month.
    pub tokens_per_month: Option<u64>,
    /// USD per day (sliding 24 h).
    pub cost_usd_per_day: Option<f64>,
    /// USD per UTC calendar month.
    pub cost_usd_per_month: Option<f64>,
    /// Tokens of one Responses conversation ([`crate::limits::conversation`]).
    pub tokens_per_conversation: Option<u64>,
    /// USD of one Responses conversation.
    pub cost_usd_per_conversation: Option<f64>,
    /// MCP and A2A requests per minute (sliding 60 s); model requests are not counted.
    pub mcp_requests_per_minute: Option<u64>,
    /// MCP and A2A requests per day (sliding 24 h).
    pub mcp_requests_per_day: Option<u64>,
    /// MCP `tools/call`s and A2A message sends per minute (sliding 60 s).
    pub tool_calls_per_minute: Option<u64>,
    /// MCP `tools/call`s and A2A message sends per day (sliding 24 h).
    pub tool_calls_per_day: Option<u64>,
    /// What a streamed answer overrunning these limits does (set on keys only).
    pub overrun: crate::limits::cut::Overrun,
    /// With limits shared through Redis, the longest a request waits for a lease top-up
    /// before it is refused ([`crate::limits::lease`]); default 250.
    pub max_wait_ms: u64,
}

/// A validated group of keys.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    /// Name.
    pub name: String,
    /// Grant patterns (checked to reference existing models/providers).
    pub models: Vec<String>,
    /// Shared limits.
    pub limits: Limits,
    /// Flow-control priority of its keys, when set.
    pub priority: Option<i32>,
    /// MCP grant patterns ([`mcp`]).
    pub mcp: Vec<String>,
    /// A2A grant patterns ([`a2a`]).
    pub a2a: Vec<String>,
}

/// A validated virtual key.
#[derive(Debug, Clone, PartialEq)]
pub struct Key {
    /// Name.
    pub name: String,
    /// `sha256:<hex>` digest.
    pub digest: String,
    /// Indexes into [`Config::groups`].
    pub groups: Vec<usize>,
    /// The same groups' names, in the same order: every usage record lists them, and a
    /// borrowed list costs a request nothing.
    pub group_names: Vec<String>,
    /// The key's own grant patterns.
    pub models: Vec<String>,
    /// Expiry as Unix seconds.
    pub expires_at: Option<i64>,
    /// The key's own limits.
    pub limits: Limits,
    /// Flow-control priority: its own, else the highest of its groups', else 0.
    pub priority: i32,
    /// The key's own MCP grant patterns ([`mcp`]).
    pub mcp: Vec<String>,
    /// The key's own A2A grant patterns ([`a2a`]).
    pub a2a: Vec<String>,
}

/// Prices in USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    /// Prompt tokens.
    pub input_per_mtok: f64,
    /// Completion tokens.
    pub output_per_mtok: f64,
    /// Cached prompt tokens (defaults to the input price).
    pub cached_input_per_mtok: f64,
}

/// Where the sidecar stores the configuration.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Store {
    /// The YAML file is the source of truth.
    #[default]
    File,
    /// PostgreSQL, URL read from the named environment variable.
    Postgres {
        /// Environment variable holding the URL.
        url_env: String,
    },
}

/// What a `"model"` value resolves to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolved<'a> {
    /// A public model (directly or through an alias): index into [`Config::models`].
    Model(usize),
    /// `provider/model`: the provider index and the id passed through unchanged.
    Pinned {
        /// Index into [`Config::providers`].
        provider: usize,
        /// Upstream model id (everything after the first `/`).
        model: &'a str,
    },
}

/// The validated, indexed configuration.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Config {
    /// Providers in file order.
    pub providers: Vec<Provider>,
    /// Models in file order.
    pub models: Vec<Model>,
    /// Alias → index into `models`.
    pub aliases: BTreeMap<String, usize>,
    /// Groups in file order.
    pub groups: Vec<Group>,
    /// Keys in file order.
    pub keys: Vec<Key>,
    /// Prices keyed by upstream model id or `provider/model`.
    pub pricing: BTreeMap<String, Price>,
    /// Config store.
    pub store: Store,
    /// Environment variable with the Redis URL, when Redis is configured.
    pub redis_url_env: Option<String>,
    /// `redis.fail_closed`: 503 for requests under limits while the cross-replica view is stale.
    pub limits_fail_closed: bool,
    /// `responses:`: retention of stored Responses API responses (used by the sidecar).
    pub responses: Responses,
    /// `mcp_servers:`, fronted at `/mcp/{server}`.
    pub mcp: mcp::McpServers,
    /// Flattened MCP grants per key, parallel to `keys`.
    pub(crate) mcp_grants: Vec<mcp::McpGrants>,
    /// `a2a_agents:`, fronted at `/a2a/{agent}`.
    pub a2a: a2a::A2aAgents,
    /// Flattened A2A grants per key, parallel to `keys`.
    pub(crate) a2a_grants: Vec<a2a::A2aGrants>,
    /// `egress:`: the upstream addresses the configuration may name and the proxy may connect
    /// to ([`crate::egress`]).
    pub egress: crate::egress::Policy,
    /// Guardrail policies and where they apply.
    pub guardrails: guardrails::Guardrails,
    /// The response cache: where entries live and which requests are cached.
    pub cache: cache::CacheSettings,
    /// Org-wide default limits.
    pub limits: Limits,
    /// What USD budgets do with unpriced models.
    pub unpriced: Unpriced,
    /// Limits flattened per key ([`crate::limits`]).
    pub limit_plans: crate::limits::Plans,
    provider_index: BTreeMap<String, usize>,
    model_index: BTreeMap<String, usize>,
    /// Raw SHA-256 of each key → index into `keys`, built once at validation so
    /// authentication is one hash and one lookup ([`crate::auth`]).
    pub(crate) digest_index: DigestIndex,
    /// Flattened grants per key, parallel to `keys` ([`crate::grants`]).
    pub(crate) grants: Vec<std::sync::Arc<Grants>>,
}

impl Config {
    /// Parses and validates a JSON document (the form the filter receives).
    pub fn from_json_slice(json: &[u8]) -> Result<Self, ConfigLoadError> {
        let raw: RawConfig = serde_json::from_slice(json).map_err(ConfigLoadError::Syntax)?;
        Ok(Self::try_from(raw)?)
    }

    /// Provider index by name.
    pub fn provider_index(&self, name: &str) -> Option<usize> {
        self.provider_index.get(name).copied()
    }

    /// Model index by public name (aliases not included; see [`Config::resolve`]).
    pub fn model_index(&self, name: &str) -> Option<usize> {
        self.model_index.get(name).copied()
    }

    /// Resolves a requested `"model"`: public name, alias, or `provider/model`.
    pub fn resolve<'a>(&self, requested: &'a str) -> Option<Resolved<'a>> {
        if let Some(i) = self.model_index(requested).or_else(|| self.aliases.get(requested).copied()) {
            return Some(Resolved::Model(i));
        }
        // Public names cannot contain '/', so this never shadows a configured model.
        let (provider, model) = requested.split_once('/')?;
        let provider = self.provider_index(provider)?;
        (!model.is_empty()).then_some(Resolved::Pinned { provider, model })
    }

    /// The tools of MCP server `server` that `caller` may use; `None` when it may use none.
    /// [`Caller::Open`] reaches every tool only while the configuration has no keys.
    ///
    /// [`Caller::Open`]: crate::auth::Caller::Open
    pub fn mcp_access(&self, caller: crate::auth::Caller, server: usize) -> Option<mcp::ToolAccess<'_>> {
        Self::scoped(&self.mcp_grants, self.keys.is_empty(), caller, server)
    }

    /// The JSON-RPC methods of A2A agent `agent` that `caller` may call; `None` when it may
    /// not reach the agent ([`Caller::Open`] reaches every agent only while the configuration
    /// has no keys).
    ///
    /// [`Caller::Open`]: crate::auth::Caller::Open
    pub fn a2a_access(&self, caller: crate::auth::Caller, agent: usize) -> Option<grants::Access<'_>> {
        Self::scoped(&self.a2a_grants, self.keys.is_empty(), caller, agent)
    }

    fn scoped(
        grants: &[grants::Scoped],
        open: bool,
        caller: crate::auth::Caller,
        entry: usize,
    ) -> Option<grants::Access<'_>> {
        match caller {
            crate::auth::Caller::Open => open.then_some(grants::Access::ALL),
            crate::auth::Caller::Key(i) => grants.get(i)?.entry(entry),
        }
    }

    /// Public names clients may send: models then aliases.
    pub fn public_names(&self) -> impl Iterator<Item = &str> {
        let models = self.models.iter().map(|m| m.name.as_str());
        models.chain(self.aliases.keys().map(String::as_str))
    }
}

/// One validation problem: where and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Path into the document, e.g. `models[1].targets[0].provider`.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Every problem found while validating a [`RawConfig`] (never empty).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid configuration ({} problem(s)): {}", .problems.len(), join(.problems))]
pub struct ConfigError {
    /// The problems, section by section (duplicate names are reported first).
    pub problems: Vec<Problem>,
}

fn join(problems: &[Problem]) -> String {
    let all: Vec<String> = problems.iter().map(Problem::to_string).collect();
    all.join("; ")
}

/// Failure to load a JSON document.
#[derive(Debug, thiserror::Error)]
pub enum ConfigLoadError {
    /// Not JSON of the expected shape (includes unknown keys, named by serde).
    #[error("configuration syntax: {0}")]
    Syntax(serde_json::Error),
    /// Well-formed but invalid.
    #[error(transparent)]
    Invalid(#[from] ConfigError),
}
