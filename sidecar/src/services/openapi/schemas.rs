//! JSON Schemas of the admin listener's queries, bodies and answers. Bodies of the
//! configuration sections come from the Rust types the handlers read them into (the core's raw
//! config types, the crud's `AliasBody` and `PriceBody`); answers the handlers build by hand
//! are described here, loosely where a full schema would be impractical (objects stay open to
//! fields added later), never with a constraint the real answer could break.

use ferrogate_core::config::a2a::RawA2aAgent;
use ferrogate_core::config::guardrails::RawGuardrail;
use ferrogate_core::config::mcp::RawMcpServer;
use ferrogate_core::config::{RawGroup, RawKey, RawModel, RawPrice, RawProvider};
use serde_json::{json, Value};

use super::schema;
use crate::services::crud::{AliasBody, PriceBody};
use crate::services::pg::Section;

/// An unsigned 64-bit integer.
fn u64_schema() -> Value {
    json!({"type": "integer", "minimum": 0, "maximum": u64::MAX})
}

/// An optional string, as a query parameter.
fn string_param(description: &str) -> Value {
    json!({"type": "string", "description": description})
}

/// `/readyz`'s query.
pub(super) fn readiness_query() -> Value {
    json!({"type": "object", "additionalProperties": false, "properties": {
        "strict": {"type": "boolean", "description": "also require the configuration store to answer"}
    }})
}

/// `services::usage::Query`.
pub(super) fn usage_query() -> Value {
    json!({"type": "object", "additionalProperties": false, "properties": {
        "key": string_param("key name, exact"),
        "model": string_param("model as the client asked for it, exact"),
        "since": with_description(u64_schema(), "Unix ms, inclusive"),
        "until": with_description(u64_schema(), "Unix ms, exclusive"),
        "limit": with_description(u64_schema(), "most records returned: default 100, at most 10,000 (larger is 10,000)"),
    }})
}

/// `services::usage::requests::Params`.
pub(super) fn requests_query() -> Value {
    json!({"type": "object", "additionalProperties": false, "properties": {
        "request_id": string_param("x-request-id, exact"),
        "key": string_param("key name, exact"),
        "model": string_param("model_requested, exact"),
        "provider": string_param("provider, exact"),
        "status": {"type": "integer", "minimum": 0, "maximum": u16::MAX, "description": "HTTP status, exact"},
        "status_class": {"type": "string", "pattern": "^([1-5][xX][xX])?$",
            "description": "1xx, 2xx, 3xx, 4xx or 5xx (empty: any)"},
        "since": with_description(u64_schema(), "Unix ms, inclusive, on the start"),
        "until": with_description(u64_schema(), "Unix ms, exclusive, on the start"),
        "streamed": {"type": "boolean", "description": "streamed answers only (true) or unstreamed only (false)"},
        "partial": {"type": "boolean", "description": "answers that stopped early (true) or complete ones (false)"},
        "limit": with_description(u64_schema(), "items per page: default 100, brought into 1 to 1000"),
        "cursor": string_param("next_cursor of the previous page (absent or empty: the first page)"),
    }})
}

/// `services::limits::Filter`.
pub(super) fn limits_query() -> Value {
    json!({"type": "object", "additionalProperties": false, "properties": {
        "key": string_param("only this key's own limits"),
        "group": string_param("only this group's limits"),
    }})
}

fn with_description(mut schema: Value, description: &str) -> Value {
    schema["description"] = description.into();
    schema
}

/// A usage record (`ferrogate_core::usage::Record`), as the usage query lists it.
fn record() -> Value {
    json!({"type": "object", "required": ["request_id", "model_requested", "provider", "status", "started_at_unix_ms"],
    "properties": {
        "request_id": {"type": "string"},
        "key": {"type": ["string", "null"]},
        "groups": {"type": "array", "items": {"type": "string"}},
        "model_requested": {"type": "string"},
        "provider": {"type": "string"},
        "upstream_model": {"type": "string"},
        "status": {"type": "integer"},
        "prompt_tokens": {"type": "integer"},
        "completion_tokens": {"type": "integer"},
        "cached_tokens": {"type": "integer"},
        "cost_micro_usd": {"type": ["integer", "null"]},
        "latency_ms": {"type": "integer"},
        "ttft_ms": {"type": ["integer", "null"]},
        "started_at_unix_ms": {"type": "integer"},
        "streamed": {"type": "boolean"},
        "cut": {"type": "boolean"},
        "partial": {"type": "boolean"},
        "user_agent": {"type": ["string", "null"], "description": "the client's User-Agent, at most 256 bytes"},
        "endpoint": {"type": ["string", "null"], "description": "the pool endpoint (ip:port) that served"}
    }})
}

/// `GET /api/v1/usage`'s answer.
pub(super) fn usage_answer() -> Value {
    json!({"type": "object", "required": ["totals", "records"], "properties": {
        "totals": {"type": "object", "required": ["requests", "prompt_tokens", "completion_tokens", "cost_micro_usd"],
            "properties": {
                "requests": {"type": "integer"},
                "prompt_tokens": {"type": "integer"},
                "completion_tokens": {"type": "integer"},
                "cost_micro_usd": {"type": "integer"}
            }},
        "records": {"type": "array", "items": record()},
        "unreadable": {"type": "integer", "description": "stored lines that are not records (absent when none)"}
    }})
}

/// A request of the request log: a usage record's fields and `attempts`.
fn request_item() -> Value {
    let mut item = record();
    item["properties"]["attempts"] = json!({"type": "integer"});
    item["properties"]["retries"] = json!({"type": "integer"});
    item["properties"]["queued_ms"] = json!({"type": "integer"});
    item
}

/// `GET /api/v1/requests`'s answer.
pub(super) fn requests_page() -> Value {
    json!({"type": "object", "required": ["requests", "next_cursor"], "properties": {
        "requests": {"type": "array", "items": request_item()},
        "next_cursor": {"type": ["string", "null"], "description": "pass back as cursor for the next page; null on the last"}
    }})
}

/// `GET /api/v1/requests/{request_id}`'s answer.
pub(super) fn requests_of_id() -> Value {
    json!({"type": "object", "required": ["requests"], "properties": {
        "requests": {"type": "array", "items": request_item()}
    }})
}

/// `GET /api/v1/limits`'s answer.
pub(super) fn limits_answer() -> Value {
    json!({"type": "object", "required": ["synced", "replica", "limits"], "properties": {
        "synced": {"type": "boolean"},
        "replica": {"type": "string"},
        "limits": {"type": "array", "items": {"type": "object",
            "required": ["scope", "name", "metric", "window", "limit", "used", "remaining"],
            "properties": {
                "scope": {"type": "string"},
                "name": {"type": "string"},
                "metric": {"type": "string"},
                "window": {"type": "string"},
                "limit": {"type": "integer"},
                "used": {"type": "integer"},
                "remaining": {"type": "integer"}
            }}}
    }})
}

/// `GET /api/v1/targets`'s answer.
pub(super) fn targets_answer() -> Value {
    json!({"type": "object", "required": ["version", "probe_interval_ms", "targets"], "properties": {
        "version": {"type": "integer"},
        "probe_interval_ms": {"type": "integer"},
        "targets": {"type": "array", "items": {"type": "object", "required": ["provider", "endpoint", "kind", "probed"],
            "properties": {
                "provider": {"type": "string"},
                "endpoint": {"type": "string"},
                "kind": {"type": "string"},
                "probed": {"type": "boolean"},
                "healthy": {"type": "boolean"}
            }}},
        "provider_keys": {"type": "array", "description": "Each provider's own keys, by fingerprint (k- and 8 hex digits of the key's SHA-256), never the key.",
            "items": {"type": "object", "required": ["provider", "keys"], "properties": {
                "provider": {"type": "string"},
                "keys": {"type": "array", "items": {"type": "string"}}
            }}}
    }})
}

/// `GET /api/v1/kv`'s answer.
pub(super) fn kv_answer() -> Value {
    json!({"type": "object", "required": ["providers"], "properties": {
        "providers": {"type": "array", "items": {"type": "object", "required": ["provider", "blocks", "endpoints"],
            "properties": {
                "provider": {"type": "string"},
                "blocks": {"type": "integer"},
                "endpoints": {"type": "array", "items": {"type": "object"}}
            }}}
    }})
}

/// `GET /api/v1/config/problems`'s answer.
pub(super) fn problems_answer() -> Value {
    let problems = json!({"type": "array", "items": {"type": "object", "required": ["path", "message"],
        "properties": {"path": {"type": "string"}, "message": {"type": "string"}}}});
    json!({"type": "object", "required": ["version", "dropped", "rejected"], "properties": {
        "version": {"type": ["string", "null"], "description": "the served snapshot's version"},
        "dropped": problems,
        "rejected": problems
    }})
}

/// A recorded purge, as `GET /api/v1/cache` lists it and a purge answers it.
fn purge_schema() -> Value {
    json!({"type": "object", "required": ["at_ms"], "properties": {
        "scopes": {"type": "array", "items": {"type": "string"},
            "description": "key:<name>, group:<name> or global; absent: every scope"},
        "model": {"type": "string", "description": "the public model; absent: every model"},
        "at_ms": {"type": "integer", "description": "when it was recorded, Unix ms: entries created until then are purged"}
    }})
}

/// `POST /api/v1/cache/purge`'s body: exactly one of four members.
pub(super) fn purge_request() -> Value {
    let name = |what: &str| {
        json!({"type": "object", "additionalProperties": false, "required": [what],
            "properties": {what: {"type": "string", "minLength": 1}}})
    };
    let all = json!({"type": "object", "additionalProperties": false, "required": ["all"],
        "properties": {"all": {"const": true}}});
    json!({"oneOf": [name("key"), name("group"), name("model"), all]})
}

/// `POST /api/v1/cache/purge`'s answer.
pub(super) fn purge_answer() -> Value {
    json!({"type": "object", "required": ["purge"], "properties": {
        "purged": {"type": ["integer", "null"], "description": "entries deleted in Redis; null with the memory store"},
        "semantic": {"type": ["integer", "null"], "description": "entries dropped from the semantic store; null when none is wired"},
        "purge": purge_schema()
    }})
}

/// `GET /api/v1/cache`'s answer.
pub(super) fn cache_status() -> Value {
    json!({"type": "object", "required": ["store", "max_entries", "max_entry_bytes", "redis", "purges"], "properties": {
        "store": {"enum": ["memory", "redis"]},
        "max_entries": {"type": "integer"},
        "max_entry_bytes": {"type": "integer"},
        "redis": {"type": ["object", "null"], "properties": {
            "reachable": {"type": "boolean"},
            "entries": {"type": ["integer", "null"], "description": "entries counted with SCAN (at most 1,000,000)"},
            "complete": {"type": "boolean", "description": "false when the count stopped at its bound"},
            "error": {"type": "string"}
        }},
        "purges": {"type": "array", "items": purge_schema()}
    }})
}

/// What a section write answers: the new configuration version (and, for a key created
/// without a digest, the key itself, once).
pub(super) fn written(key: bool) -> Value {
    let mut answer = json!({"type": "object", "required": ["version"], "properties": {
        "version": {"type": "integer", "description": "the configuration version the write made"}
    }});
    if key {
        answer["properties"]["key"] = json!({"type": "string",
            "description": "the generated key (when the body had no digest): shown this once, only its digest is kept"});
    }
    answer
}

/// The body a section's `POST` and `PUT` take: the config file's entry.
pub(super) fn section_body(s: Section) -> Value {
    match s {
        Section::Providers => schema::<RawProvider>(),
        Section::Models => schema::<RawModel>(),
        Section::Aliases => schema::<AliasBody>(),
        Section::Groups => schema::<RawGroup>(),
        Section::Keys => {
            // Without a digest the key is generated.
            let mut key = schema::<RawKey>();
            if let Some(required) = key.get_mut("required").and_then(Value::as_array_mut) {
                required.retain(|r| r != "digest");
            }
            key
        }
        Section::Pricing => schema::<PriceBody>(),
        Section::McpServers => schema::<RawMcpServer>(),
        Section::A2aAgents => schema::<RawA2aAgent>(),
        Section::Guardrails => schema::<RawGuardrail>(),
    }
}

/// The body a section's `PUT` takes: the `POST` body, whose name the path gives (a name in
/// the body is ignored).
pub(super) fn section_put_body(s: Section) -> Value {
    let mut body = section_body(s);
    let name = super::name_member(s);
    if let Some(required) = body.get_mut("required").and_then(Value::as_array_mut) {
        required.retain(|r| r != name);
    }
    if let Some(properties) = body.get_mut("properties").and_then(Value::as_object_mut) {
        properties.insert(name.into(), json!({"description": "ignored: the path names the row"}));
    }
    body
}

/// The schema of the `{name}` of a section's path: what the body's name may be.
pub(super) fn section_name(s: Section) -> Value {
    let body = section_body(s);
    let mut name = body["properties"][super::name_member(s)].clone();
    if let Some(o) = name.as_object_mut() {
        o.remove("description");
        o.entry("type").or_insert("string".into());
    }
    name
}

/// A row as `GET /api/v1/{section}/{name}` answers it (and the listing holds it).
pub(super) fn section_row(s: Section) -> Value {
    match s {
        Section::Providers => without_credential(schema::<RawProvider>()),
        Section::McpServers => without_credential(schema::<RawMcpServer>()),
        Section::A2aAgents => without_credential(schema::<RawA2aAgent>()),
        Section::Keys => {
            // A viewer sees no digest.
            let mut key = schema::<RawKey>();
            if let Some(digest) = key.pointer_mut("/properties/digest") {
                let shown = digest.clone();
                *digest = json!({"anyOf": [shown, {"const": "[redacted]", "description": "what a viewer is shown"}]});
            }
            key
        }
        other => section_body(other),
    }
}

/// What `GET /api/v1/{section}` answers: an array of rows, or for aliases and pricing the
/// file's maps (`{alias: model}`, `{model: price}`).
pub(super) fn section_listing(s: Section) -> Value {
    match s {
        Section::Aliases => json!({"type": "object", "additionalProperties": {"type": "string"},
            "description": "alias: the model it names"}),
        Section::Pricing => {
            let mut price = schema::<RawPrice>();
            let defs = price.as_object_mut().and_then(|o| o.remove("$defs"));
            strip_meta(&mut price);
            let mut listing = json!({"type": "object", "additionalProperties": price,
                "description": "the upstream model (provider/model or model): its prices"});
            if let Some(defs) = defs {
                listing["$defs"] = defs;
            }
            listing
        }
        other => {
            let mut row = section_row(other);
            let defs = row.as_object_mut().and_then(|o| o.remove("$defs"));
            strip_meta(&mut row);
            let mut listing = json!({"type": "array", "items": row});
            if let Some(defs) = defs {
                listing["$defs"] = defs;
            }
            listing
        }
    }
}

/// A schema moved inside another loses its document-level keywords.
fn strip_meta(schema: &mut Value) {
    if let Some(o) = schema.as_object_mut() {
        o.remove("$schema");
    }
}

/// A row of a section with a credential, as listed: `api_key` never shown, `api_key_set`
/// (whether one is stored) instead.
fn without_credential(mut row: Value) -> Value {
    if let Some(properties) = row.get_mut("properties").and_then(Value::as_object_mut) {
        properties.remove("api_key");
        properties.insert(
            "api_key_set".into(),
            json!({"type": "boolean", "description": "whether a credential is stored (it is never shown)"}),
        );
    }
    match row.get_mut("required").and_then(Value::as_array_mut) {
        Some(required) => {
            required.retain(|r| r != "api_key");
            required.push("api_key_set".into());
        }
        None => row["required"] = json!(["api_key_set"]),
    }
    row
}

/// The body of every error answer: `{"error": "<why>"}`, and for a configuration change that
/// would not be servable, its problems.
pub(super) fn error() -> Value {
    json!({"type": "object", "required": ["error"], "properties": {
        "error": {"type": "string", "description": "what went wrong"},
        "problems": {"type": "array", "description": "a change that would not be servable: what and where",
            "items": {"type": "object", "required": ["path", "message"],
                "properties": {"path": {"type": "string"}, "message": {"type": "string"}}}}
    }})
}
