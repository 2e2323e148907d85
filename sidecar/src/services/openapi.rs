//! `GET /openapi.json` on the admin listener: the admin API described from the same table the
//! router is checked against (see the test: every documented operation is routed).

use serde_json::{json, Map, Value};

use super::identity::Role;
use super::pg::Section;

/// Who may call an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Anyone, no credentials (probes, the login routes, this document).
    Public,
    /// Callers whose role covers this one.
    Role(Role),
}

/// What a successful call answers.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// 200 with a JSON body of this schema.
    Json(Value),
    /// 200 with `text/plain`.
    Text,
    /// 302 to another page (browser flows).
    Redirect,
}

/// One documented operation: the router is checked against this table, the admin router's
/// authorization reads each route's [`Access`] from it, and `/openapi.json` is made from it.
#[derive(Debug, Clone)]
pub struct Operation {
    /// HTTP method, lower case.
    pub method: &'static str,
    /// Path as routed, with `{name}` parameters.
    pub path: String,
    /// What it does.
    pub summary: String,
    /// Who may call it.
    pub access: Access,
    /// JSON Schema of the request body ([`schema`]); `None`: no body.
    pub request: Option<Value>,
    /// JSON Schema of an object whose properties are the query parameters.
    pub query: Option<Value>,
    /// The successful answer.
    pub answer: Answer,
    /// Error statuses it may answer (401 and 403 are added for non-public operations).
    pub errors: Vec<u16>,
}

/// The JSON Schema of `T` (its `$defs` inline; the document hoists them into
/// `components/schemas`).
pub fn schema<T: schemars::JsonSchema>() -> Value {
    schemars::schema_for!(T).to_value()
}

fn op(method: &'static str, path: impl Into<String>, summary: impl Into<String>, body: bool) -> Operation {
    let access = if method == "get" { Access::Role(Role::Viewer) } else { Access::Role(Role::Admin) };
    let request = body.then(|| json!({"type": "object"}));
    let errors = vec![400, 404, 409, 503];
    Operation {
        method,
        path: path.into(),
        summary: summary.into(),
        access,
        request,
        query: None,
        answer: Answer::Json(json!({})),
        errors,
    }
}

fn public(o: Operation) -> Operation {
    Operation { access: Access::Public, ..o }
}

/// Every operation of the admin listener.
pub fn operations() -> Vec<Operation> {
    let mut ops = vec![
        public(op("get", "/healthz", "Liveness", false)),
        public(op(
            "get",
            "/readyz",
            "Readiness: 200 once a configuration snapshot exists (strict=true: and the store answers)",
            false,
        )),
        public(op("get", "/metrics", "Prometheus metrics (the filter's, named as Envoy names them)", false)),
        public(op("get", "/openapi.json", "This document", false)),
        op("get", "/api/v1/usage", "Usage records and totals by key, model and time range", false),
        op(
            "get",
            "/api/v1/requests",
            "The request log: usage records, newest first, with filters and cursor paging \
             ({\"requests\": [...], \"next_cursor\": \"...\" | null}; 400 for a bad cursor or status_class)",
            false,
        ),
        op(
            "get",
            "/api/v1/requests/{request_id}",
            "Every record of one request id ({\"requests\": [...]}; 404 when none)",
            false,
        ),
        op(
            "get",
            "/api/v1/limits",
            "Consumption and remaining amount of every limit (key=, group= to narrow), across replicas",
            false,
        ),
        op(
            "get",
            "/api/v1/targets",
            "Health (probe verdict, cooldown, consecutive results), engine load and cache figures (LMCache) of every routing target",
            false,
        ),
        op(
            "get",
            "/api/v1/kv",
            "Every KV-event stream: connected, last sequence, blocks held, last event age, gaps, replays, restarts",
            false,
        ),
        op(
            "get",
            "/api/v1/config/problems",
            "Rows dropped from the served snapshot; why the latest change was rejected",
            false,
        ),
        op(
            "get",
            "/api/v1/cache",
            "The response cache: store, bounds, Redis reachability and entries, recorded purges",
            false,
        ),
        op(
            "post",
            "/api/v1/cache/purge",
            "Purge cached answers of one key, group (and its keys), model, or all; recorded and sent to every filter \
             (400 for another body, 404 for an unknown name, 503 when Redis cannot be reached: the purge is still recorded)",
            true,
        ),
    ];
    ops.extend(super::identity::operations());
    ops.extend(super::identity::oidc::operations());
    for s in Section::ALL {
        let name = s.as_str();
        ops.push(op("get", format!("/api/v1/{name}"), format!("List {name}"), false));
        ops.push(op("post", format!("/api/v1/{name}"), format!("Create one of {name} (409 if the name exists)"), true));
        ops.push(op("get", format!("/api/v1/{name}/{{name}}"), format!("One of {name} (404 when absent)"), false));
        ops.push(op("put", format!("/api/v1/{name}/{{name}}"), format!("Create or replace one of {name}"), true));
        ops.push(op("delete", format!("/api/v1/{name}/{{name}}"), format!("Delete one of {name}"), false));
    }
    ops
}

/// The parameters of the operations on `path`, when it has any.
fn parameters(path: &str) -> Option<Value> {
    let path_param = |name: &str| json!([{"name": name, "in": "path", "required": true, "schema": {"type": "string"}}]);
    if path.contains("{name}") {
        return Some(path_param("name"));
    }
    if path.contains("{request_id}") {
        return Some(path_param("request_id"));
    }
    if path != "/api/v1/requests" {
        return None;
    }
    Some(json!([
        query_param("request_id", "string", "x-request-id, exact"),
        query_param("key", "string", "key name, exact"),
        query_param("model", "string", "model_requested, exact"),
        query_param("provider", "string", "provider, exact"),
        query_param("status", "integer", "HTTP status, exact"),
        query_param("status_class", "string", "1xx, 2xx, 3xx, 4xx or 5xx"),
        query_param("since", "integer", "Unix ms, inclusive, on the start"),
        query_param("until", "integer", "Unix ms, exclusive, on the start"),
        query_param("streamed", "boolean", "streamed answers only (true) or unstreamed only (false)"),
        query_param("partial", "boolean", "answers that stopped early (true) or complete ones (false)"),
        query_param("limit", "integer", "items per page: default 100, 1 to 1000"),
        query_param("cursor", "string", "next_cursor of the previous page"),
    ]))
}

/// An optional query parameter.
fn query_param(name: &str, kind: &str, description: &str) -> Value {
    json!({"name": name, "in": "query", "required": false, "description": description, "schema": {"type": kind}})
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

/// The request and answer schemas of the cache operations.
fn cache_schemas(o: &Operation, operation: &mut Value) {
    let name = |what: &str| {
        json!({"type": "object", "additionalProperties": false, "required": [what],
        "properties": {what: {"type": "string", "minLength": 1}}})
    };
    let answer = match (o.method, o.path.as_str()) {
        ("post", "/api/v1/cache/purge") => {
            let all = json!({"type": "object", "additionalProperties": false, "required": ["all"],
                "properties": {"all": {"const": true}}});
            let one_of = json!([name("key"), name("group"), name("model"), all]);
            operation["requestBody"] =
                json!({"required": true, "content": {"application/json": {"schema": {"oneOf": one_of}}}});
            json!({"type": "object", "properties": {
                "purged": {"type": ["integer", "null"], "description": "entries deleted in Redis; null with the memory store"},
                "semantic": {"type": ["integer", "null"], "description": "entries dropped from the semantic store; null when none is wired"},
                "purge": purge_schema()
            }})
        }
        ("get", "/api/v1/cache") => json!({"type": "object", "properties": {
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
        }}),
        _ => return,
    };
    operation["responses"]["200"]["content"] = json!({"application/json": {"schema": answer}});
}

/// The OpenAPI 3.1 document.
pub fn document() -> Value {
    let mut paths = Map::new();
    for o in operations() {
        let mut operation = json!({
            "summary": o.summary,
            "security": [{"bearer": []}],
            "responses": {
                "200": {"description": "OK"},
                "400": {"description": "Invalid body or change (problems with paths)"},
                "401": {"description": "Missing or wrong bearer token"},
                "404": {"description": "No such row"},
                "409": {"description": "Conflict (name exists, rows depend on it, or file store)"},
                "503": {"description": "Store unavailable"}
            }
        });
        if let Some(parameters) = parameters(&o.path) {
            operation["parameters"] = parameters;
        }
        if o.request.is_some() {
            operation["requestBody"] = json!({"required": true, "content": {"application/json": {"schema": {
                "type": "object",
                "description": "The entry in the config file's shape; unknown fields are refused"
            }}}});
        }
        cache_schemas(&o, &mut operation);
        if let Some(Value::Object(methods)) = paths.get_mut(&o.path) {
            methods.insert(o.method.to_string(), operation);
        } else {
            let mut methods = Map::new();
            methods.insert(o.method.to_string(), operation);
            paths.insert(o.path.clone(), Value::Object(methods));
        }
    }
    json!({
        "openapi": "3.1.0",
        "info": {"title": "ferrogate admin API", "version": env!("CARGO_PKG_VERSION")},
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "paths": paths
    })
}
