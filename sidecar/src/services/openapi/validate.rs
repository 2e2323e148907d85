//! A body checked against the JSON Schema the document gives for it, before serde reads it:
//! serde takes things the schema forbids (a struct from an array, `"limits": [null, null]`),
//! and a client or a fuzzer holding the document expects such data refused. Covers what the
//! schemas of the admin API use: `$ref` into `$defs`, `type`, `enum`, `const`, `properties`,
//! `required`, `additionalProperties`, `items`, `anyOf`, `oneOf`, `allOf`, numeric bounds,
//! lengths, `uniqueItems`. `pattern` and `format` are left to the handlers (the configuration's
//! own checks say what a name must be).

use serde_json::{Map, Value};

/// The first place `value` breaks `schema` (whose `$defs` its references point into), as
/// `path: why`.
///
/// # Errors
/// Where and why the value does not conform.
pub fn check(schema: &Value, value: &Value) -> Result<(), String> {
    let defs = schema.get("$defs").and_then(Value::as_object);
    Checker { defs, depth: 0 }.check(schema, value, "")
}

struct Checker<'a> {
    defs: Option<&'a Map<String, Value>>,
    depth: usize,
}

/// Deepest nesting of references followed (a recursive schema on a deep value).
const MAX_DEPTH: usize = 64;

fn at(path: &str, member: &str) -> String {
    if path.is_empty() {
        member.to_string()
    } else {
        format!("{path}.{member}")
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_f64() => "a number",
        Value::Number(_) => "an integer",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn is_type(v: &Value, ty: &str) -> bool {
    match ty {
        "null" => v.is_null(),
        "boolean" => v.is_boolean(),
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "number" => v.is_number(),
        "integer" => v.as_i64().is_some() || v.as_u64().is_some() || v.as_f64().is_some_and(|f| f.fract() == 0.0),
        _ => true,
    }
}

impl Checker<'_> {
    fn check(&self, schema: &Value, value: &Value, path: &str) -> Result<(), String> {
        let name = if path.is_empty() { "body" } else { path };
        let schema = match schema {
            Value::Bool(true) => return Ok(()),
            Value::Bool(false) => return Err(format!("{name}: not allowed here")),
            Value::Object(s) => s,
            _ => return Ok(()),
        };
        if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
            let target = r.strip_prefix("#/$defs/").and_then(|n| self.defs?.get(n));
            if let Some(target) = target {
                if self.depth >= MAX_DEPTH {
                    return Err(format!("{name}: nested too deep"));
                }
                Checker { defs: self.defs, depth: self.depth + 1 }.check(target, value, path)?;
            }
        }
        if let Some(ty) = schema.get("type") {
            let types: Vec<&str> = match ty {
                Value::String(t) => vec![t.as_str()],
                Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
                _ => Vec::new(),
            };
            if !types.is_empty() && !types.iter().any(|t| is_type(value, t)) {
                return Err(format!("{name}: expected {}, not {}", types.join(" or "), kind(value)));
            }
        }
        if let Some(options) = schema.get("enum").and_then(Value::as_array) {
            if !options.contains(value) {
                return Err(format!("{name}: not one of {}", Value::Array(options.clone())));
            }
        }
        if let Some(c) = schema.get("const") {
            if c != value {
                return Err(format!("{name}: must be {c}"));
            }
        }
        for all in schema.get("allOf").and_then(Value::as_array).into_iter().flatten() {
            self.check(all, value, path)?;
        }
        if let Some(any) = schema.get("anyOf").and_then(Value::as_array) {
            let errors: Vec<String> = any.iter().filter_map(|s| self.check(s, value, path).err()).collect();
            if errors.len() == any.len() && !any.is_empty() {
                return Err(errors.join("; or "));
            }
        }
        if let Some(one) = schema.get("oneOf").and_then(Value::as_array) {
            let results: Vec<Result<(), String>> = one.iter().map(|s| self.check(s, value, path)).collect();
            match results.iter().filter(|r| r.is_ok()).count() {
                1 => {}
                0 if !one.is_empty() => {
                    let errors: Vec<String> = results.into_iter().filter_map(Result::err).collect();
                    return Err(errors.join("; or "));
                }
                0 => {}
                n => return Err(format!("{name}: matches {n} of the forms it may take, not exactly one")),
            }
        }
        match value {
            Value::Object(members) => self.object(schema, members, path),
            Value::Array(items) => self.array(schema, items, path),
            Value::String(s) => {
                let chars = s.chars().count() as u64;
                if schema.get("minLength").and_then(Value::as_u64).is_some_and(|m| chars < m) {
                    return Err(format!("{name}: too short"));
                }
                if schema.get("maxLength").and_then(Value::as_u64).is_some_and(|m| chars > m) {
                    return Err(format!("{name}: too long"));
                }
                Ok(())
            }
            Value::Number(n) => {
                let Some(x) = n.as_f64() else { return Ok(()) };
                let bound = |k: &str| schema.get(k).and_then(Value::as_f64);
                let broken = bound("minimum").is_some_and(|m| x < m)
                    || bound("maximum").is_some_and(|m| x > m)
                    || bound("exclusiveMinimum").is_some_and(|m| x <= m)
                    || bound("exclusiveMaximum").is_some_and(|m| x >= m);
                if broken {
                    return Err(format!("{name}: {n} is out of range"));
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn object(&self, schema: &Map<String, Value>, members: &Map<String, Value>, path: &str) -> Result<(), String> {
        for required in schema.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str)
        {
            if !members.contains_key(required) {
                return Err(format!("{}: missing", at(path, required)));
            }
        }
        let properties = schema.get("properties").and_then(Value::as_object);
        for (member, v) in members {
            match properties.and_then(|p| p.get(member)) {
                Some(s) => self.check(s, v, &at(path, member))?,
                None => match schema.get("additionalProperties") {
                    Some(Value::Bool(false)) => return Err(format!("{}: unknown field", at(path, member))),
                    Some(s @ Value::Object(_)) => self.check(s, v, &at(path, member))?,
                    _ => {}
                },
            }
        }
        Ok(())
    }

    fn array(&self, schema: &Map<String, Value>, items: &[Value], path: &str) -> Result<(), String> {
        let name = if path.is_empty() { "body" } else { path };
        let count = items.len() as u64;
        if schema.get("minItems").and_then(Value::as_u64).is_some_and(|m| count < m) {
            return Err(format!("{name}: too few items"));
        }
        if schema.get("maxItems").and_then(Value::as_u64).is_some_and(|m| count > m) {
            return Err(format!("{name}: too many items"));
        }
        if schema.get("uniqueItems") == Some(&Value::Bool(true)) {
            for (i, item) in items.iter().enumerate() {
                if items[..i].contains(item) {
                    return Err(format!("{name}[{i}]: repeats an earlier item"));
                }
            }
        }
        if let Some(each) = schema.get("items") {
            for (i, item) in items.iter().enumerate() {
                self.check(each, item, &format!("{name}[{i}]"))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn what_the_schema_forbids_is_refused_with_where() {
        let schema = json!({
            "type": "object", "required": ["name"], "additionalProperties": false,
            "properties": {
                "name": {"type": "string", "minLength": 1},
                "limits": {"anyOf": [{"$ref": "#/$defs/Limits"}, {"type": "null"}]},
                "models": {"type": "array", "items": {"type": "string"}},
                "weight": {"type": ["integer", "null"], "format": "uint32", "minimum": 0}
            },
            "$defs": {"Limits": {"type": "object", "additionalProperties": false,
                "properties": {"rpm": {"type": ["integer", "null"], "minimum": 0}}}}
        });
        assert_eq!(check(&schema, &json!({"name": "a", "limits": {"rpm": 5}, "models": ["m"], "weight": 2})), Ok(()));
        assert_eq!(check(&schema, &json!({"name": "a", "limits": null, "weight": null})), Ok(()));
        for (bad, says) in [
            (json!(["a"]), "body: expected object, not an array"),
            (json!({}), "name: missing"),
            (json!({"name": ""}), "name: too short"),
            (json!({"name": "a", "wieght": 1}), "wieght: unknown field"),
            (json!({"name": "a", "limits": [null, null]}), "limits: expected object, not an array"),
            (json!({"name": "a", "limits": {"rpm": -1}}), "limits.rpm: -1 is out of range"),
            (json!({"name": "a", "models": ["m", 3]}), "models[1]: expected string, not an integer"),
            (json!({"name": "a", "weight": 1.5}), "weight: expected integer or null, not a number"),
        ] {
            let why = check(&schema, &bad).unwrap_err();
            assert!(why.contains(says), "{bad}: {why}");
        }
    }

    #[test]
    fn one_of_wants_exactly_one() {
        let schema = json!({"oneOf": [{"type": "object", "required": ["a"]}, {"type": "object", "required": ["b"]}]});
        assert_eq!(check(&schema, &json!({"a": 1})), Ok(()));
        assert!(check(&schema, &json!({"a": 1, "b": 2})).unwrap_err().contains("exactly one"));
        assert!(check(&schema, &json!({"c": 1})).is_err());
    }
}
