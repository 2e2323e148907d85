//! The schemas against what deserialisation accepts: the body types' shape (names, required
//! fields, unknown fields refused) and every entry of the repository's real configurations
//! (`testdata/config/full.yaml` and the complete examples in `docs/`), which the schema must
//! accept since the server does. A small validator covers the keywords schemars emits.

use schemars::{schema_for, JsonSchema};
use serde_json::{json, Map, Value};

use super::super::a2a::RawA2aAgent;
use super::super::guardrails::RawGuardrail;
use super::super::mcp::RawMcpServer;
use super::super::{RawConfig, RawGroup, RawKey, RawModel, RawPrice, RawProvider};

/// `T`'s schema as JSON (draft 2020-12, definitions under `$defs`).
fn schema<T: JsonSchema>() -> Value {
    schema_for!(T).to_value()
}

/// The keywords [`violation`] checks, or may ignore (annotations, `format`, bounds a value
/// from a valid configuration cannot break).
const KNOWN: [&str; 16] = [
    "$ref",
    "$schema",
    "$defs",
    "title",
    "description",
    "default",
    "format",
    "maximum",
    "type",
    "anyOf",
    "pattern",
    "minimum",
    "items",
    "properties",
    "required",
    "additionalProperties",
];

/// Why `value` does not match `schema` (`None`: it does). `root` resolves `$ref`s.
fn violation(root: &Value, schema: &Value, value: &Value, at: &str) -> Option<String> {
    let Some(s) = schema.as_object() else {
        return (schema == &Value::Bool(false)).then(|| format!("{at}: nothing allowed"));
    };
    // A keyword this validator does not know would be ignored: fail instead.
    if let Some(k) = s.keys().find(|k| !KNOWN.contains(&k.as_str())) {
        panic!("{at}: keyword {k} is not checked here");
    }
    if let Some(r) = s.get("$ref").and_then(Value::as_str) {
        let target = root.pointer(r.trim_start_matches('#')).unwrap_or(&Value::Null);
        assert!(target.is_object(), "unresolved {r}");
        return violation(root, target, value, at);
    }
    if let Some(types) = s.get("type") {
        let names: Vec<&str> = types
            .as_array()
            .map_or(vec![types.as_str().unwrap_or("")], |a| a.iter().filter_map(Value::as_str).collect());
        if !names.iter().any(|t| has_type(value, t)) {
            return Some(format!("{at}: {value} is not {names:?}"));
        }
    }
    if let Some(any) = s.get("anyOf").and_then(Value::as_array) {
        if any.iter().all(|sub| violation(root, sub, value, at).is_some()) {
            return Some(format!("{at}: {value} matches no anyOf branch"));
        }
    }
    if let (Some(p), Some(text)) = (s.get("pattern").and_then(Value::as_str), value.as_str()) {
        if !regex_lite::Regex::new(p).unwrap().is_match(text) {
            return Some(format!("{at}: {text:?} does not match {p}"));
        }
    }
    if let (Some(min), Some(n)) = (s.get("minimum").and_then(Value::as_f64), value.as_f64()) {
        if n < min {
            return Some(format!("{at}: {n} < {min}"));
        }
    }
    if let (Some(items), Some(array)) = (s.get("items"), value.as_array()) {
        for (i, item) in array.iter().enumerate() {
            if let Some(v) = violation(root, items, item, &format!("{at}[{i}]")) {
                return Some(v);
            }
        }
    }
    value.as_object().and_then(|o| object_violation(root, s, o, at))
}

fn has_type(value: &Value, name: &str) -> bool {
    match name {
        "null" => value.is_null(),
        "boolean" => value.is_boolean(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "string" => value.is_string(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        other => panic!("unknown type {other}"),
    }
}

/// `required`, `properties` and `additionalProperties` of an object.
fn object_violation(root: &Value, s: &Map<String, Value>, o: &Map<String, Value>, at: &str) -> Option<String> {
    let required = s.get("required").and_then(Value::as_array).into_iter().flatten();
    if let Some(missing) = required.filter_map(Value::as_str).find(|r| !o.contains_key(*r)) {
        return Some(format!("{at}: {missing} is required"));
    }
    let properties = s.get("properties").and_then(Value::as_object);
    for (k, v) in o {
        let sub = match properties.and_then(|p| p.get(k)) {
            Some(sub) => sub,
            None => s.get("additionalProperties").unwrap_or(&Value::Bool(true)),
        };
        if let Some(why) = violation(root, sub, v, &format!("{at}.{k}")) {
            return Some(why);
        }
    }
    None
}

fn validates<T: JsonSchema>(value: &Value) -> Result<(), String> {
    let root = schema::<T>();
    violation(&root, &root, value, "$").map_or(Ok(()), Err)
}

/// The repository's valid configurations: fixtures, `examples/` and every complete example of `docs/`
/// (a block whose info string is exactly `yaml`), as written rather than re-serialised.
fn real_configs() -> Vec<(String, Value)> {
    let root = format!("{}/../..", env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    let files = ["testdata/config/full.yaml", "testdata/config/keys.yaml", "examples/quickstart-keys.yaml"];
    for file in files.into_iter().chain(["examples/kv-pool.yaml", "examples/quickstart.yaml"]) {
        out.push((file.to_string(), std::fs::read_to_string(format!("{root}/{file}")).unwrap()));
    }
    for page in std::fs::read_dir(format!("{root}/docs")).unwrap() {
        let path = page.unwrap().path();
        // Pages only: docs/ also holds images/.
        if path.extension().is_none_or(|x| x != "md") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for (n, block) in text.split("\n```").skip(1).step_by(2).enumerate() {
            if let Some(yaml) = block.strip_prefix("yaml\n") {
                out.push((format!("{}#{n}", path.display()), yaml.to_string()));
            }
        }
    }
    let parse = |(name, yaml): (String, String)| {
        let value: Value = serde_saphyr::from_str(&yaml).ok()?;
        // Only documents the server takes: the schema need not admit what it refuses.
        serde_json::from_value::<RawConfig>(value.clone()).ok()?;
        Some((name, value))
    };
    out.into_iter().filter_map(parse).collect()
}

#[test]
fn key_and_group_schemas() {
    for (name, s) in [("RawKey", schema::<RawKey>()), ("RawGroup", schema::<RawGroup>())] {
        assert_eq!(s["type"], "object", "{name}");
        assert_eq!(s["additionalProperties"], false, "{name}: unknown fields are refused");
        assert_eq!(s["properties"]["name"]["pattern"], "^[a-z0-9][a-z0-9-]{0,62}$", "{name}");
    }
    // A key body may leave its digest out (the admin API then generates the key).
    assert_eq!(schema::<RawKey>()["required"], json!(["name"]));
    assert_eq!(schema::<RawKey>()["properties"]["digest"]["pattern"], super::super::syntax::DIGEST_PATTERN);
    assert_eq!(schema::<RawGroup>()["required"], json!(["name"]));
    let digest = format!("sha256:{}", "a".repeat(64));
    assert_eq!(validates::<RawKey>(&json!({"name": "k1", "digest": digest, "groups": ["team-a"]})), Ok(()));
    assert_eq!(validates::<RawKey>(&json!({"name": "k1"})), Ok(()));
    for bad in [
        json!({"name": "a b"}),
        json!({"name": "A"}),
        json!({"name": "k1", "digest": "sha256:AB"}),
        json!({"name": "k1", "colour": "red"}),
        json!({"digest": digest}),
        json!({"name": "k1", "priority": "high"}),
    ] {
        assert!(validates::<RawKey>(&bad).is_err(), "{bad}");
    }
    assert!(validates::<RawGroup>(&json!({"name": "team_a"})).is_err());
    assert!(validates::<RawGroup>(&json!({"name": "team-a", "models": "*"})).is_err());
}

#[test]
fn the_other_names_carry_their_patterns() {
    let slug = "^[a-z0-9][a-z0-9-]{0,62}$";
    for s in [schema::<RawProvider>(), schema::<RawMcpServer>(), schema::<RawA2aAgent>(), schema::<RawGuardrail>()] {
        assert_eq!(s["properties"]["name"]["pattern"], slug, "{}", s["title"]);
        assert_eq!(s["additionalProperties"], false, "{}", s["title"]);
    }
    let model = schema::<RawModel>();
    assert_eq!(model["properties"]["name"]["pattern"], super::super::syntax::PUBLIC_NAME_PATTERN);
    assert_eq!(validates::<RawModel>(&json!({"name": "llama3:8b"})), Ok(()));
    assert!(validates::<RawModel>(&json!({"name": ".."})).is_err());
    assert!(validates::<RawModel>(&json!({"name": "a?b"})).is_err());
}

/// A pool endpoint is a string or an object (a hand-written `Deserialize`): both validate,
/// as they deserialise.
#[test]
fn endpoints_take_either_form() {
    let pool = |endpoints: Value| json!({"name": "p", "kind": "openai_compatible", "base_url": "http://h", "endpoints": endpoints});
    let ok = pool(json!(["h:1", {"address": "h:2", "kv_events": "tcp://h:5557"}]));
    assert_eq!(validates::<RawProvider>(&ok), Ok(()));
    serde_json::from_value::<RawProvider>(ok).unwrap();
    for bad in [json!([{"kv_events": "tcp://h:5557"}]), json!([{"address": "h:1", "port": 1}]), json!([1])] {
        assert!(validates::<RawProvider>(&pool(bad.clone())).is_err(), "{bad}");
        assert!(serde_json::from_value::<RawProvider>(pool(bad.clone())).is_err(), "{bad}");
    }
}

/// Every entry of every real configuration validates against its body type's schema, and the
/// whole documents against `RawConfig`'s: the schemas are never stricter than the server.
#[test]
fn real_config_entries_validate() {
    let configs = real_configs();
    assert!(configs.len() > 10, "the docs' examples were found: {}", configs.len());
    type Check = fn(&Value) -> Result<(), String>;
    let sections: [(&str, Check); 7] = [
        ("providers", validates::<RawProvider>),
        ("models", validates::<RawModel>),
        ("groups", validates::<RawGroup>),
        ("keys", validates::<RawKey>),
        ("mcp_servers", validates::<RawMcpServer>),
        ("a2a_agents", validates::<RawA2aAgent>),
        ("guardrails", validates::<RawGuardrail>),
    ];
    let mut seen = std::collections::BTreeMap::<&str, usize>::new();
    for (file, doc) in &configs {
        assert_eq!(validates::<RawConfig>(doc), Ok(()), "{file}");
        for (section, check) in sections {
            for (i, entry) in doc.get(section).and_then(Value::as_array).into_iter().flatten().enumerate() {
                assert_eq!(check(entry), Ok(()), "{file}: {section}[{i}]");
                *seen.entry(section).or_default() += 1;
            }
        }
        for (model, price) in doc.get("pricing").and_then(Value::as_object).into_iter().flatten() {
            assert_eq!(validates::<RawPrice>(price), Ok(()), "{file}: pricing.{model}");
            *seen.entry("pricing").or_default() += 1;
        }
    }
    assert_eq!(seen.len(), 8, "every body type had a sample: {seen:?}");
}
