//! The configuration document exactly as users write it (YAML or JSON).
//!
//! These types only describe the *shape*: every struct denies unknown keys so a typo is an
//! error naming the key, but values are not checked here. Enumerations (`kind`, `strategy`,
//! `store.kind`) are kept as strings on purpose, so that a bad value becomes one entry in the
//! validator's problem list (with its path) instead of aborting deserialisation.
//! [`crate::config::Config`] is the validated, indexed form built with `TryFrom<RawConfig>`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The whole configuration document.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// Upstream API providers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub providers: Vec<RawProvider>,
    /// Public model names and the targets that serve them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<RawModel>,
    /// Extra public names, each pointing at one entry of `models`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub aliases: BTreeMap<String, String>,
    /// Groups of keys (teams) with shared grants and limits.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<RawGroup>,
    /// Virtual keys, stored as digests only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<RawKey>,
    /// USD per million tokens, keyed by upstream model id (or `provider/model`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pricing: BTreeMap<String, RawPrice>,
    /// Where the sidecar keeps the configuration (default: this file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<RawStore>,
    /// Optional Redis for cross-replica limits and reload notifications.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redis: Option<RawRedis>,
    /// Retention of stored Responses API responses (read by the sidecar at start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub responses: Option<super::RawResponses>,
    /// Org-wide default limits, checked for every request on top of its key's and groups'.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<RawLimits>,
    /// MCP servers fronted at `/mcp/{server}`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_servers: Vec<super::mcp::RawMcpServer>,
    /// A2A agents fronted at `/a2a/{agent}`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub a2a_agents: Vec<super::a2a::RawA2aAgent>,
    /// Which upstream hosts the configuration may name (default: any but link-local and cloud
    /// metadata addresses).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<super::egress::RawEgress>,
    /// Guardrail policies, applied where models, keys or groups name them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub guardrails: Vec<super::guardrails::RawGuardrail>,
    /// Where the response cache keeps entries, and how many.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_store: Option<super::cache::RawCacheStore>,
    /// What a USD budget does with a model that has no price: `ignore`, `warn` (default:
    /// served, logged once per model) or `block` (402).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unpriced: Option<String>,
    /// Admin sessions, login throttling, audit retention and single sign-on (read by the
    /// sidecar at start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin: Option<super::admin::RawAdmin>,
}

/// One upstream provider.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RawProvider {
    /// Slug, also used as the Envoy cluster name.
    #[cfg_attr(feature = "schema", schemars(regex(pattern = super::syntax::SLUG_PATTERN)))]
    pub name: String,
    /// `openai`, `anthropic`, `gemini`, `openai_compatible`, `azure_openai`, `bedrock` or
    /// `vertex`.
    pub kind: String,
    /// `scheme://host[:port][/prefix]`. May be left out for `bedrock` and `vertex` (derived from
    /// `region`) and for an `openai_compatible` `preset`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub base_url: String,
    /// A hosted OpenAI-compatible API by name (`groq`, `mistral`, `deepseek`, `together`,
    /// `fireworks`, `openrouter`, `xai`, `cerebras`): its base URL, and the request fields it
    /// refuses removed from translated requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<String>,
    /// The cloud region (`bedrock`: `us-east-1`; `vertex`: `us-central1`, `global`, `us`, `eu`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// The Google Cloud project (`vertex`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// `azure_openai`: the `api-version` of deployment paths
    /// (`/openai/deployments/{model}/...`); without it the v1 API (`/openai/v1/...`) is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Where the sidecar gets short-lived credentials (AWS STS, Google OAuth, Entra ID).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<Box<super::cloud::RawCredentials>>,
    /// `vertex`: the variable naming the service account's JSON key file (a
    /// `gcp_service_account` source reading that file; excludes `credentials`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_file_env: Option<String>,
    /// SigV4 keys (`bedrock`), filled in by the sidecar from `credentials`; never written in a
    /// configuration file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aws_keys: Option<Box<super::cloud::RawAwsKeys>>,
    /// Optional pool of replicas behind this provider: `host:port` strings, or objects that
    /// also name the replica's KV-event sockets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<RawEndpoint>,
    /// The pool's endpoints from DNS instead of a list: `host:port`, where `host` resolves to
    /// one address per replica (a Kubernetes headless Service). The sidecar resolves it again
    /// every few seconds and serves the answer as `endpoints`. Excludes `endpoints`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoints_dns: Option<String>,
    /// The pool's endpoints from a Gateway API Inference Extension `InferencePool`: `name` (in
    /// the sidecar's namespace) or `namespace/name`. The sidecar watches the pool and its
    /// pods through the Kubernetes API and serves every ready pod's `podIP:port`, one per
    /// target port, as `endpoints`. Excludes `endpoints` and `endpoints_dns`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoints_inference_pool: Option<String>,
    /// Tokens per KV-cache block of the pool's engines (vLLM's `--block-size`, default 16).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_block_size: Option<u32>,
    /// Topic prefix the KV-event subscription filters on (default `""`: every message).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_topic: Option<String>,
    /// The port of every endpoint's KV-event publisher, for endpoints that do not name their
    /// own `kv_events`: the sidecar subscribes to `tcp://<endpoint host>:<port>`. This is how a
    /// pool from `endpoints_dns` publishes: each address the name resolves to is subscribed to
    /// when it appears and dropped when it goes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_events_port: Option<u16>,
    /// The port of every endpoint's KV-event replay socket, as `kv_events_port` (needs it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_replay_port: Option<u16>,
    /// Bound on the KV-block index of this provider (default 1,000,000 blocks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_max_blocks: Option<u64>,
    /// Ask a replica's `POST /tokenize` for a request's token ids when the client sent none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_tokenize: Option<bool>,
    /// What a block held in each cache tier is worth when scoring the pool's endpoints
    /// (defaults: gpu 1.0, cpu 0.8, storage 0.5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_tier_weights: Option<RawTierWeights>,
    /// Seconds a block held in CPU memory or storage stays indexed after its last store event
    /// (LMCache reports no evictions from those tiers; default 300).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lmcache_ttl_secs: Option<u64>,
    /// LMCache telemetry of the pool's engines (`lmcache_aware`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lmcache: Option<RawLmcache>,
    /// Most requests in flight on each endpoint (or on the provider without endpoints) for
    /// models with `flow_control`; more wait in the model's queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrency: Option<u32>,
    /// Name of the environment variable that holds the provider's API key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// The key itself. Never written in a config file: it is filled in by
    /// [`RawConfig::resolve_api_keys`] (the sidecar reads the environment) and travels only in
    /// the JSON snapshot handed to the filter, which cannot read environment variables.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    /// Names of the environment variables that hold the provider's keys, a pool the requests
    /// are spread over (excludes `api_key_env`; a variable that is not set is skipped).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub api_keys_env: Vec<String>,
    /// The pool's keys, as `api_key`: never written in a config file, filled in by
    /// [`RawConfig::resolve_api_keys`] from `api_keys_env` for the JSON snapshot only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub api_keys: Vec<String>,
    /// Seconds a pooled key that answered 429 without a usable `Retry-After` is left alone
    /// (default 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_cooldown_secs: Option<u64>,
}

/// A provider's `lmcache` block.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RawLmcache {
    /// Where each engine's cache occupancy is read (`{"occupancy": 0.42, "cache_available":
    /// true}`): a path on the endpoint itself (`/v1/occupancy`), or a URL in which `{host}`
    /// stands for the endpoint's host (`http://{host}:9000/v1/occupancy`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub occupancy: Option<String>,
    /// Where the sidecar binds the PULL socket LMCache workers push to, as to a cache
    /// controller (`tcp://0.0.0.0:8300`; the workers' `controller_pull_url`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull: Option<String>,
    /// Where it binds the ROUTER socket that answers their registrations and heartbeats (the
    /// workers' `controller_reply_url`; LMCache 0.3.12 and later push nothing before an answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<String>,
    /// Which endpoint each LMCache instance (`lmcache_instance_id`) runs in: `host:port`, one of
    /// the pool's endpoints. An instance not named here is matched by the address it registers
    /// with, when one endpoint has that host.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub instances: std::collections::BTreeMap<String, String>,
}

/// A provider's `kv_tier_weights`: each between 0 and 1, a tier left out keeps its default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RawTierWeights {
    /// A block in GPU memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<f64>,
    /// A block held only in CPU memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<f64>,
    /// A block held only in storage (disk, remote).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<f64>,
}

/// One pool endpoint: `"host:port"`, or an object naming its KV-event sockets too.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawEndpoint {
    /// `host:port` of the replica's HTTP API.
    pub address: String,
    /// The engine's KV-event publisher (`tcp://host:port`, vLLM's `endpoint`).
    pub kv_events: Option<String>,
    /// The engine's replay socket (`tcp://host:port`, vLLM's `replay_endpoint`).
    pub kv_replay: Option<String>,
}

impl RawProvider {
    /// Whether the pool's endpoints come from outside the file (`endpoints_dns`,
    /// `endpoints_inference_pool`): none may be known yet, and any may come.
    pub fn is_dynamic_pool(&self) -> bool {
        self.endpoints_dns.is_some() || self.endpoints_inference_pool.is_some()
    }
}

impl From<&str> for RawEndpoint {
    fn from(address: &str) -> Self {
        Self { address: address.to_string(), ..Self::default() }
    }
}

/// The object form of [`RawEndpoint`], read with unknown keys denied.
#[derive(Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub(super) struct EndpointObject {
    /// `host:port` of the replica's HTTP API.
    address: String,
    /// The engine's KV-event publisher (`tcp://host:port`, vLLM's `endpoint`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    kv_events: Option<String>,
    /// The engine's replay socket (`tcp://host:port`, vLLM's `replay_endpoint`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    kv_replay: Option<String>,
}

impl Serialize for RawEndpoint {
    /// A plain string when only the address is set, so older readers keep working.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.kv_events.is_none() && self.kv_replay.is_none() {
            return s.serialize_str(&self.address);
        }
        let object = EndpointObject {
            address: self.address.clone(),
            kv_events: self.kv_events.clone(),
            kv_replay: self.kv_replay.clone(),
        };
        object.serialize(s)
    }
}

impl<'de> Deserialize<'de> for RawEndpoint {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = RawEndpoint;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("\"host:port\" or { address, kv_events, kv_replay }")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<RawEndpoint, E> {
                Ok(RawEndpoint::from(v))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<RawEndpoint, A::Error> {
                let o = EndpointObject::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                Ok(RawEndpoint { address: o.address, kv_events: o.kv_events, kv_replay: o.kv_replay })
            }
        }
        d.deserialize_any(Visitor)
    }
}

/// One public model.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RawModel {
    /// The name clients send in `"model"`.
    #[cfg_attr(feature = "schema", schemars(regex(pattern = super::syntax::PUBLIC_NAME_PATTERN)))]
    pub name: String,
    /// Where requests for this model may go.
    #[serde(default)]
    pub targets: Vec<RawTarget>,
    /// Target selection strategy (default `round_robin`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<String>,
    /// Other public model names, tried in order when every target fails.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fallbacks: Vec<String>,
    /// Hold requests in a proxy-wide queue while every target is saturated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow_control: Option<RawFlowControl>,
    /// Guardrail policies (names of `guardrails:` entries) applied to its requests.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub guardrails: Vec<String>,
    /// Response cache for its requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<super::cache::RawCache>,
}

/// `models[i].flow_control`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RawFlowControl {
    /// Most requests a priority band may hold (default 1,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_queue: Option<u32>,
    /// Longest a request may wait, in milliseconds (default 30,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_ttl_ms: Option<u64>,
    /// An engine with at least this many queued requests is saturated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_waiting: Option<u32>,
    /// An engine running at least this many requests is saturated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_running: Option<u32>,
    /// An engine whose KV cache is at least this full (0 to 1) is saturated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_kv_usage: Option<f32>,
    /// Per-priority overrides of `max_queue` and `queue_ttl_ms`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bands: Vec<RawBand>,
}

/// One entry of `flow_control.bands`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RawBand {
    /// The priority it applies to.
    pub priority: i32,
    /// Most requests the band may hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_queue: Option<u32>,
    /// Longest a request may wait in the band, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_ttl_ms: Option<u64>,
}

/// One target of a model: a provider and the model id that provider knows.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RawTarget {
    /// Name of an entry of `providers`.
    pub provider: String,
    /// Upstream model id sent to the provider.
    pub model: String,
    /// Relative weight (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
}

/// A group of keys.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RawGroup {
    /// Group name.
    #[cfg_attr(feature = "schema", schemars(regex(pattern = super::syntax::SLUG_PATTERN)))]
    pub name: String,
    /// Grants: public names, `provider/model`, `provider/*` or `*`.
    #[serde(default)]
    pub models: Vec<String>,
    /// Limits shared by the group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<RawLimits>,
    /// Flow-control priority of the group's keys (higher first; default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// MCP grants: `*`, `server`, `server/*` or `server/<tool glob>`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp: Vec<String>,
    /// A2A grants: `*` or an agent's name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub a2a: Vec<String>,
    /// Guardrail policies (names of `guardrails:` entries) applied to its requests.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub guardrails: Vec<String>,
    /// Response cache for its requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<super::cache::RawCache>,
}

/// A virtual key.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(transform = super::schema::digest_optional))]
#[serde(deny_unknown_fields)]
pub struct RawKey {
    /// Key name (for humans and usage records).
    #[cfg_attr(feature = "schema", schemars(regex(pattern = super::syntax::SLUG_PATTERN)))]
    pub name: String,
    /// `sha256:<64 hex>` digest of the plaintext key (left out of an admin API body, the key
    /// is generated and its plaintext answered once).
    #[cfg_attr(feature = "schema", schemars(regex(pattern = super::syntax::DIGEST_PATTERN)))]
    pub digest: String,
    /// Groups this key belongs to.
    #[serde(default)]
    pub groups: Vec<String>,
    /// Grants of the key itself, same syntax as a group's `models`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<String>,
    /// RFC 3339 expiry instant, or null for none.
    #[serde(default)]
    pub expires_at: Option<String>,
    /// Limits of this key alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<RawLimits>,
    /// Flow-control priority (higher first); default the highest of its groups', else 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// MCP grants of the key itself, same syntax as a group's `mcp`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp: Vec<String>,
    /// A2A grants of the key itself, same syntax as a group's `a2a`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub a2a: Vec<String>,
    /// Guardrail policies (names of `guardrails:` entries) applied to its requests.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub guardrails: Vec<String>,
    /// Response cache for its requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<super::cache::RawCache>,
}

/// Request, token and cost limits; every field is optional (absent = unlimited).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    /// Requests per minute (sliding 60 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_minute: Option<u64>,
    /// Requests per day (sliding 24 h).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_day: Option<u64>,
    /// Input + output tokens per minute (sliding 60 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_minute: Option<u64>,
    /// Input + output tokens per day (sliding 24 h).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_day: Option<u64>,
    /// Input + output tokens per UTC calendar month.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_month: Option<u64>,
    /// USD per day (sliding 24 h).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd_per_day: Option<f64>,
    /// USD per UTC calendar month.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd_per_month: Option<f64>,
    /// Input + output tokens of one Responses conversation (a `previous_response_id` chain).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_conversation: Option<u64>,
    /// USD of one Responses conversation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd_per_conversation: Option<f64>,
    /// Requests on `/mcp/…` and `/a2a/…` per minute (sliding 60 s), model requests apart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_requests_per_minute: Option<u64>,
    /// Requests on `/mcp/…` and `/a2a/…` per day (sliding 24 h).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_requests_per_day: Option<u64>,
    /// MCP `tools/call`s and A2A message sends per minute (sliding 60 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls_per_minute: Option<u64>,
    /// MCP `tools/call`s and A2A message sends per day (sliding 24 h).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls_per_day: Option<u64>,
    /// A key's streamed answers that overrun its token or USD limits: `allow` (default: they
    /// run to their end) or `cut` (stopped with a final error event). Keys only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overrun: Option<String>,
    /// With `redis:`, the longest a request waits for its lease to be topped up before it is
    /// refused, in milliseconds (default 250, at most 10,000; 0 refuses at once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_wait_ms: Option<u64>,
}

/// Prices of one model, USD per million tokens.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RawPrice {
    /// Prompt tokens.
    pub input_per_mtok: f64,
    /// Completion tokens.
    pub output_per_mtok: f64,
    /// Prompt tokens served from the provider's prompt cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input_per_mtok: Option<f64>,
}

/// `store:` block.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RawStore {
    /// `file` or `postgres`.
    pub kind: String,
    /// Environment variable holding the database URL (postgres only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url_env: Option<String>,
}

/// `redis:` block.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RawRedis {
    /// Environment variable holding the Redis URL.
    pub url_env: String,
    /// When the cross-replica view is stale (Redis or the sidecar unreachable), refuse
    /// requests under limits with 503 instead of enforcing this proxy's own counts alone.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fail_closed: bool,
}

impl RawConfig {
    /// Fills each provider's `api_key` from `lookup(api_key_env)`, and its `api_keys` from
    /// `lookup` of each of its `api_keys_env`.
    ///
    /// A key already present (from a JSON snapshot) is kept; a variable that `lookup` does not
    /// know leaves the provider without a credential, which is legitimate for local engines
    /// (in a pool, that variable is skipped: the pool is the keys that are set).
    pub fn resolve_api_keys(&mut self, lookup: impl Fn(&str) -> Option<String>) {
        for server in &mut self.mcp_servers {
            if let (None, Some(var)) = (&server.api_key, &server.api_key_env) {
                server.api_key = lookup(var);
            }
        }
        for agent in &mut self.a2a_agents {
            if let (None, Some(var)) = (&agent.api_key, &agent.api_key_env) {
                agent.api_key = lookup(var);
            }
        }
        for provider in &mut self.providers {
            if provider.api_keys.is_empty() {
                provider.api_keys = provider.api_keys_env.iter().filter_map(|var| lookup(var)).collect();
            }
            if provider.api_key.is_some() {
                continue;
            }
            if let Some(var) = &provider.api_key_env {
                provider.api_key = lookup(var);
            }
        }
    }
}
