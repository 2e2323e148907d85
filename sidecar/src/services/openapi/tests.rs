//! The operations table and the document made from it.

use std::collections::BTreeSet;

use serde_json::{json, Map, Value};

use super::document::{error_statuses, hoist};
use super::*;
use crate::services::pg::Section;

/// Every `$ref` in `v`, and whether any `$defs` is left.
fn refs(v: &Value, out: &mut Vec<String>, defs_left: &mut bool) {
    match v {
        Value::Object(map) => {
            for (k, x) in map {
                if k == "$defs" {
                    *defs_left = true;
                }
                match (k.as_str(), x.as_str()) {
                    ("$ref", Some(r)) => out.push(r.to_string()),
                    _ => refs(x, out, defs_left),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|x| refs(x, out, defs_left)),
        _ => {}
    }
}

#[test]
fn the_document_hoists_every_definition_and_every_reference_resolves() {
    let doc = document();
    assert_eq!(doc["openapi"], "3.1.0");
    let (mut found, mut defs_left) = (Vec::new(), false);
    refs(&doc, &mut found, &mut defs_left);
    assert!(!defs_left, "a $defs is left in the document");
    assert!(found.len() > 10);
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    for r in found {
        let name = r.strip_prefix("#/components/schemas/").unwrap_or_else(|| panic!("{r} points elsewhere"));
        assert!(schemas.contains_key(name), "{r} does not resolve");
    }
    // No clash was renamed: a definition holds one meaning across the document.
    for name in schemas.keys() {
        let base = name.trim_end_matches(|c: char| c.is_ascii_digit());
        assert!(base == name || !schemas.contains_key(base), "{name}: two different definitions of {base}");
    }
}

#[test]
fn every_operation_names_its_role_security_and_errors() {
    let doc = document();
    let ops = operations();
    let mut seen = BTreeSet::new();
    for o in &ops {
        assert!(seen.insert((o.method, o.path.clone())), "{} {} twice in the table", o.method, o.path);
        let d = &doc["paths"][&o.path][o.method];
        assert_eq!(d["x-ferrogate-role"], o.access.label(), "{} {}", o.method, o.path);
        assert!(d["description"].as_str().unwrap().contains(o.access.label()) || o.access == Access::Public);
        let security = match o.access {
            Access::Public => json!([]),
            Access::Role(_) => json!([{"bearer": []}, {"session": []}]),
        };
        assert_eq!(d["security"], security, "{} {}", o.method, o.path);
        let responses = d["responses"].as_object().unwrap();
        for status in error_statuses(o) {
            let r = &responses[&status.to_string()];
            let text = r["content"].get("text/plain").is_some();
            assert!(
                text == (o.path == "/readyz" && status == 503),
                "{} {} {status}: only a probe's 503 is text",
                o.method,
                o.path
            );
            if !text {
                assert_eq!(r["content"]["application/json"]["schema"]["$ref"], "#/components/schemas/Error");
            }
        }
        if o.access != Access::Public {
            assert!(responses.contains_key("401") && responses.contains_key("403"), "{} {}", o.method, o.path);
        }
        for name in super::document::path_parameters(&o.path) {
            let documented =
                d["parameters"].as_array().into_iter().flatten().any(|p| p["name"] == name && p["in"] == "path");
            assert!(documented, "{} {}: path parameter {name}", o.method, o.path);
        }
    }
    let error = &doc["components"]["schemas"]["Error"];
    assert_eq!(error["required"], json!(["error"]));
    assert_eq!(error["properties"]["error"]["type"], "string");
    for probe in ["/healthz", "/readyz", "/metrics"] {
        assert!(doc["paths"][probe]["get"]["responses"]["200"]["content"]["text/plain"].is_object(), "{probe}");
    }
    let strict = &doc["paths"]["/readyz"]["get"]["parameters"][0];
    assert_eq!((&strict["name"], &strict["in"]), (&json!("strict"), &json!("query")));
    let usage: BTreeSet<&str> = doc["paths"]["/api/v1/usage"]["get"]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(usage, ["key", "limit", "model", "since", "until"].into());
}

#[test]
fn roles_follow_the_rules() {
    let public: BTreeSet<&str> = ["/healthz", "/readyz", "/metrics", "/openapi.json"].into();
    for o in table::operations() {
        let section = Section::ALL.into_iter().find(|s| {
            o.path == format!("/api/v1/{}", s.as_str()) || o.path == format!("/api/v1/{}/{{name}}", s.as_str())
        });
        let want = match (o.method, section) {
            _ if public.contains(o.path.as_str()) => Access::Public,
            ("get", _) => Access::Role(Role::Viewer),
            (_, Some(Section::Keys | Section::Groups)) => Access::Role(Role::KeyManager),
            _ => Access::Role(Role::Admin),
        };
        assert_eq!(o.access, want, "{} {}", o.method, o.path);
    }
}

#[test]
fn the_section_bodies_and_answers_come_from_the_types() {
    let doc = document();
    let schemas = &doc["components"]["schemas"];
    let body = |path: &str, method: &str| {
        doc["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"].clone()
    };
    let providers = body("/api/v1/providers", "post");
    assert!(providers["properties"]["base_url"].is_object() && providers["properties"]["api_key"].is_object());
    assert_eq!(providers["additionalProperties"], false, "unknown fields are refused");
    let key = body("/api/v1/keys/{name}", "put");
    assert!(!key["required"].as_array().unwrap().contains(&json!("digest")), "a key without a digest is generated");
    let listed = &doc["paths"]["/api/v1/providers"]["get"]["responses"]["200"]["content"]["application/json"]["schema"];
    assert_eq!(listed["type"], "array");
    assert!(listed["items"]["properties"].get("api_key").is_none(), "credentials are never listed");
    assert_eq!(listed["items"]["properties"]["api_key_set"]["type"], "boolean");
    let created = &doc["paths"]["/api/v1/keys"]["post"]["responses"]["200"]["content"]["application/json"]["schema"];
    assert_eq!(created["required"], json!(["version"]));
    assert_eq!(created["properties"]["key"]["type"], "string");
    let aliases = &doc["paths"]["/api/v1/aliases"]["get"]["responses"]["200"]["content"]["application/json"]["schema"];
    assert_eq!(aliases["additionalProperties"]["type"], "string");
    let price =
        &doc["paths"]["/api/v1/pricing/{name}"]["get"]["responses"]["200"]["content"]["application/json"]["schema"];
    assert_eq!(price["required"], json!(["model", "input_per_mtok", "output_per_mtok"]));
    assert!(schemas.is_object());
    let purge = &doc["paths"]["/api/v1/cache/purge"]["post"];
    assert_eq!(
        purge["requestBody"]["content"]["application/json"]["schema"]["oneOf"].as_array().map(Vec::len),
        Some(4)
    );
    assert!(purge["responses"]["200"]["content"]["application/json"]["schema"]["properties"]["purge"].is_object());
}

#[test]
fn hoisting_keeps_one_name_per_meaning() {
    let mut components = Map::new();
    let a = json!({"$defs": {"Limits": {"type": "object"}}, "properties": {"l": {"$ref": "#/$defs/Limits"}}});
    let b = json!({"$defs": {"Limits": {"type": "string"}, "Box": {"properties": {"x": {"$ref": "#/$defs/Limits"}}}},
        "properties": {"l": {"$ref": "#/$defs/Box"}}});
    let a = hoist(a, &mut components);
    let again = hoist(json!({"$defs": {"Limits": {"type": "object"}}, "$ref": "#/$defs/Limits"}), &mut components);
    let b = hoist(b, &mut components);
    assert_eq!(a["properties"]["l"]["$ref"], "#/components/schemas/Limits");
    assert_eq!(again["$ref"], "#/components/schemas/Limits", "the same definition is shared");
    assert_eq!(components["Limits2"], json!({"type": "string"}), "another one under another name");
    assert_eq!(components["Box"]["properties"]["x"]["$ref"], "#/components/schemas/Limits2");
    assert_eq!(b["properties"]["l"]["$ref"], "#/components/schemas/Box");
}

/// The route table of `docs/admin-api.md`: `(method, path, role)` of each row.
fn documented_routes() -> Vec<(String, String, String)> {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/admin-api.md")).unwrap();
    let start = page.find("\n## Routes and roles\n").expect("docs/admin-api.md: no \"## Routes and roles\" section");
    let section = &page[start + 1..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 3)];
    let cell = |c: &str| c.trim().trim_matches('`').to_string();
    section
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').collect();
            assert!(cells.len() >= 4, "docs/admin-api.md: a route row has method, path, role and what: {l}");
            (cell(cells[0]).to_ascii_lowercase(), cell(cells[1]), cell(cells[2]))
        })
        .collect()
}

#[test]
fn the_route_table_of_the_docs_is_the_operations_table() {
    let documented = documented_routes();
    let mut rows = BTreeSet::new();
    for row in &documented {
        assert!(rows.insert(row.clone()), "docs/admin-api.md lists {row:?} twice");
    }
    let table: BTreeSet<(String, String, String)> =
        operations().iter().map(|o| (o.method.to_string(), o.path.clone(), o.access.label().to_string())).collect();
    let missing: Vec<_> = table.difference(&rows).collect();
    let extra: Vec<_> = rows.difference(&table).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "docs/admin-api.md's route table differs from the operations table:\n  not in the docs: {missing:?}\n  \
         not operations (or another role): {extra:?}"
    );
}
