//! `GET /openapi.json` on the admin listener: the admin API described from the same table the
//! router is checked against (see the test: every documented operation is routed).

use serde_json::{json, Map, Value};

use super::pg::Section;

/// One documented operation.
#[derive(Debug, Clone)]
pub struct Operation {
    /// HTTP method, lower case.
    pub method: &'static str,
    /// Path as routed, with `{name}` parameters.
    pub path: String,
    /// What it does.
    pub summary: String,
    /// Whether it takes a JSON body.
    pub body: bool,
}

fn op(method: &'static str, path: impl Into<String>, summary: impl Into<String>, body: bool) -> Operation {
    Operation { method, path: path.into(), summary: summary.into(), body }
}

/// Every operation of the admin listener.
pub fn operations() -> Vec<Operation> {
    let mut ops = vec![
        op("get", "/healthz", "Liveness", false),
        op(
            "get",
            "/readyz",
            "Readiness: 200 once a configuration snapshot exists (strict=true: and the store answers)",
            false,
        ),
        op("get", "/metrics", "Prometheus metrics (the filter's, named as Envoy names them)", false),
        op("get", "/openapi.json", "This document", false),
        op("get", "/api/v1/usage", "Usage records and totals by key, model and time range", false),
        op(
            "get",
            "/api/v1/limits",
            "Consumption and remaining amount of every limit (key=, group= to narrow), across replicas",
            false,
        ),
        op(
            "get",
            "/api/v1/targets",
            "Health (probe verdict, cooldown, consecutive results) and engine load of every routing target",
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
    ];
    for s in Section::ALL {
        let name = s.as_str();
        ops.push(op("get", format!("/api/v1/{name}"), format!("List {name}"), false));
        ops.push(op("post", format!("/api/v1/{name}"), format!("Create one of {name} (409 if the name exists)"), true));
        ops.push(op("put", format!("/api/v1/{name}/{{name}}"), format!("Create or replace one of {name}"), true));
        ops.push(op("delete", format!("/api/v1/{name}/{{name}}"), format!("Delete one of {name}"), false));
    }
    ops
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
        if o.path.contains("{name}") {
            operation["parameters"] =
                json!([{"name": "name", "in": "path", "required": true, "schema": {"type": "string"}}]);
        }
        if o.body {
            operation["requestBody"] = json!({"required": true, "content": {"application/json": {"schema": {
                "type": "object",
                "description": "The entry in the config file's shape; unknown fields are refused"
            }}}});
        }
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
