//! The OpenAPI 3.1 document made from the operations table.

use std::collections::BTreeSet;

use serde_json::{json, Map, Value};

use super::{operations, schemas, Access, Answer, Operation, BODY_LIMIT};

/// Where hoisted schemas live.
const COMPONENTS: &str = "#/components/schemas/";
/// The name of the error body's schema in `components/schemas`.
const ERROR: &str = "Error";

/// The OpenAPI 3.1 document of the admin listener.
pub fn document() -> Value {
    let mut components = Map::new();
    components.insert(ERROR.into(), schemas::error());
    let mut paths = Map::new();
    for o in operations() {
        let operation = operation(&o, &mut components);
        let methods = paths.entry(o.path.clone()).or_insert_with(|| Value::Object(Map::new()));
        if let Some(methods) = methods.as_object_mut() {
            methods.insert(o.method.to_string(), operation);
        }
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "ferrogate admin API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "The admin listener of ferrogate: probes, metrics and the admin API. Every operation names \
                the least role that may call it (x-ferrogate-role: public, viewer, key-manager, admin or owner; each \
                role may do all the ones before it may). Callers authenticate with a bearer token \
                (FERROGATE_ADMIN_TOKEN, the bootstrap owner, or a user's fgt_ API token) or a session cookie \
                (changes with a cookie also need the session's X-CSRF-Token header). Every error is JSON \
                {\"error\": \"...\"}."
        },
        "components": {
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer",
                    "description": "FERROGATE_ADMIN_TOKEN (the bootstrap owner) or a user's API token (fgt_...)"},
                "session": {"type": "apiKey", "in": "cookie", "name": "ferrogate_session",
                    "description": "a login session; changes (POST, PUT, PATCH, DELETE) also need X-CSRF-Token"}
            },
            "schemas": components
        },
        "paths": paths
    })
}

/// The path parameters of a routed path: `{name}` segments.
pub(super) fn path_parameters(path: &str) -> Vec<&str> {
    path.split('/').filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}'))).collect()
}

/// Every error status `o` may answer: its handler's, and the router's own.
pub(super) fn error_statuses(o: &Operation) -> BTreeSet<u16> {
    let mut statuses: BTreeSet<u16> = o.errors.iter().copied().collect();
    if o.access != Access::Public {
        statuses.extend([401, 403, 503]);
    }
    if o.query.is_some() || o.request.is_some() || !path_parameters(&o.path).is_empty() {
        statuses.insert(400);
    }
    if o.request.is_some() {
        statuses.insert(413);
    }
    statuses
}

fn operation(o: &Operation, components: &mut Map<String, Value>) -> Value {
    let role = o.access.label();
    let description = match o.access {
        Access::Public => "Public: no credentials needed.".to_string(),
        Access::Role(r) => format!("Minimum role: {r}."),
    };
    let security = match o.access {
        Access::Public => json!([]),
        Access::Role(_) => json!([{"bearer": []}, {"session": []}]),
    };
    let mut operation = json!({
        "operationId": operation_id(o),
        "summary": format!("{} [{role}]", o.summary),
        "description": description,
        "x-ferrogate-role": role,
        "security": security,
    });
    let mut parameters: Vec<Value> = path_parameters(&o.path)
        .into_iter()
        .map(|name| {
            // An empty segment is another path (the router's 404): at least one character.
            let mut schema = super::table::path_parameter(&o.path, name).unwrap_or_else(|| json!({"type": "string"}));
            if let Some(s) = schema.as_object_mut() {
                s.entry("minLength").or_insert(1.into());
            }
            json!({"name": name, "in": "path", "required": true, "schema": schema})
        })
        .collect();
    if let Some(query) = &o.query {
        let query = hoist(query.clone(), components);
        let required: Vec<&str> =
            query.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
        for (name, schema) in query.get("properties").and_then(Value::as_object).into_iter().flatten() {
            let mut parameter = json!({"name": name, "in": "query", "required": required.contains(&name.as_str()),
                "schema": schema});
            if let Some(d) = schema.get("description") {
                parameter["description"] = d.clone();
            }
            parameters.push(parameter);
        }
    }
    if !parameters.is_empty() {
        operation["parameters"] = Value::Array(parameters);
    }
    if let Some(request) = &o.request {
        operation["requestBody"] = json!({"required": true, "description": format!("JSON, at most {BODY_LIMIT} bytes"),
            "content": {"application/json": {"schema": hoist(request.clone(), components)}}});
    }
    let mut responses = Map::new();
    match &o.answer {
        Answer::Json(schema) => {
            let content = json!({"application/json": {"schema": hoist(schema.clone(), components)}});
            responses.insert("200".into(), json!({"description": "OK", "content": content}));
        }
        Answer::Text => {
            let content = json!({"text/plain": {"schema": {"type": "string"}}});
            responses.insert("200".into(), json!({"description": "OK", "content": content}));
        }
        Answer::Redirect => {
            responses.insert(
                "302".into(),
                json!({"description": "Found: the browser goes on to the page in Location",
                    "headers": {"Location": {"required": true, "schema": {"type": "string"}}}}),
            );
        }
    }
    for status in error_statuses(o) {
        let content = if o.answer == Answer::Text && status == 503 {
            // A probe's failure is its text answer, as its success is.
            json!({"text/plain": {"schema": {"type": "string"}}})
        } else {
            json!({"application/json": {"schema": {"$ref": format!("{COMPONENTS}{ERROR}")}}})
        };
        responses.insert(status.to_string(), json!({"description": error_description(status), "content": content}));
    }
    operation["responses"] = Value::Object(responses);
    operation
}

/// `get /api/v1/keys/{name}` → `get_api_v1_keys_name`.
fn operation_id(o: &Operation) -> String {
    let path: String =
        o.path.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' }).collect();
    let mut id = format!("{}_{}", o.method, path);
    while id.contains("__") {
        id = id.replace("__", "_");
    }
    id.trim_end_matches('_').to_string()
}

fn error_description(status: u16) -> &'static str {
    match status {
        400 => "Bad request: a query or path parameter or the body cannot be read, or the change is not valid",
        401 => "No valid credentials: a bearer token or a session cookie",
        403 => {
            "The caller's role does not reach the operation's, a key-manager's groups do not cover the row, \
                or a session's change came without its X-CSRF-Token"
        }
        404 => "Not found",
        409 => "Conflict with what is there (a name taken, rows depending on it, the file store)",
        413 => "The body is larger than the admin API takes (1 MiB)",
        429 => "Too many attempts: try again later",
        503 => "A store or service the operation needs is unavailable",
        _ => "Error",
    }
}

/// `schema` with its `$defs` moved into `components` (a name already taken by another schema
/// gets a numbered suffix) and its `#/$defs/` references pointing there.
pub(super) fn hoist(mut schema: Value, components: &mut Map<String, Value>) -> Value {
    let Some(object) = schema.as_object_mut() else { return schema };
    object.remove("$schema");
    let Some(Value::Object(defs)) = object.remove("$defs") else { return schema };
    // Names first (a definition may refer to another), then the definitions with their
    // references rewritten, compared with what holds each name already.
    let mut names: Vec<(String, String)> = Vec::new();
    for (name, def) in &defs {
        let mut target = name.clone();
        let mut n = 1;
        loop {
            let rewritten = rewrite(def.clone(), &names_with(&names, name, &target), &defs);
            match components.get(&target) {
                Some(existing) if *existing != rewritten => {
                    n += 1;
                    target = format!("{name}{n}");
                }
                _ => break,
            }
        }
        names.push((name.clone(), target));
    }
    for (name, def) in &defs {
        let def = rewrite(def.clone(), &names, &defs);
        let target = lookup(&names, name).to_string();
        components.entry(target).or_insert(def);
    }
    rewrite(schema, &names, &defs)
}

fn names_with(names: &[(String, String)], name: &str, target: &str) -> Vec<(String, String)> {
    let mut all = names.to_vec();
    all.push((name.to_string(), target.to_string()));
    all
}

fn lookup<'a>(names: &'a [(String, String)], name: &'a str) -> &'a str {
    names.iter().find(|(n, _)| n == name).map_or(name, |(_, t)| t.as_str())
}

/// `value` with every `#/$defs/X` reference pointing at `X`'s place in `components`.
fn rewrite(mut value: Value, names: &[(String, String)], defs: &Map<String, Value>) -> Value {
    match &mut value {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                match (key.as_str(), v.as_str().and_then(|r| r.strip_prefix("#/$defs/"))) {
                    ("$ref", Some(name)) if defs.contains_key(name) => {
                        *v = Value::String(format!("{COMPONENTS}{}", lookup(names, name)));
                    }
                    _ => *v = rewrite(std::mem::take(v), names, defs),
                }
            }
        }
        Value::Array(items) => {
            for item in items.iter_mut() {
                *item = rewrite(std::mem::take(item), names, defs);
            }
        }
        _ => {}
    }
    value
}
