//! Decoding a Gemini `generationConfig` (sampling, structured output, thinking) and Google's
//! OpenAPI-subset schemas.

use serde_json::{json, Map, Value};

use super::super::ir::{OutputFormat, Reasoning, Request};
use super::super::json::{array, boolean, invalid, map, no_more, number, opt_string, string, uint, unsupported};
use super::super::TranslateError;
use super::decode::camel;

/// Name given to a Gemini response schema (Gemini schemas have none; OpenAI requires one).
pub(crate) const SCHEMA_NAME: &str = "response";

/// Reads `generationConfig` into `req`.
pub(crate) fn generation(v: Value, req: &mut Request) -> Result<(), TranslateError> {
    let g = camel(map("generationConfig", v)?);
    let (mut mime, mut schema) = (None, None);
    for (key, v) in g {
        if v.is_null() {
            continue;
        }
        let path = format!("generationConfig.{key}");
        match key.as_str() {
            "maxOutputTokens" => req.max_tokens = Some(uint(&path, &v)?),
            "temperature" => req.temperature = Some(number(&path, &v)?),
            "topP" => req.top_p = Some(number(&path, &v)?),
            "topK" => req.top_k = Some(uint(&path, &v)?),
            "stopSequences" => {
                let items = array(&path, v)?.into_iter().enumerate();
                req.stop = items.map(|(i, s)| string(&format!("{path}[{i}]"), s)).collect::<Result<_, _>>()?;
            }
            "seed" => req.seed = Some(v.as_i64().ok_or_else(|| invalid(&path, "an integer"))?),
            "presencePenalty" => req.presence_penalty = Some(number(&path, &v)?),
            "frequencyPenalty" => req.frequency_penalty = Some(number(&path, &v)?),
            "responseMimeType" => mime = Some(string(&path, v)?),
            "responseSchema" | "responseJsonSchema" if schema.is_some() => {
                return Err(invalid(&path, "responseSchema or responseJsonSchema, not both"));
            }
            "responseSchema" => schema = Some(json_schema(v)),
            "responseJsonSchema" => schema = Some(v),
            "thinkingConfig" => req.reasoning = thinking(v)?,
            // Defaults, accepted as such.
            "candidateCount" if v == 1 => {}
            "responseLogprobs" if v == false => {}
            "responseModalities" if v == json!(["TEXT"]) => {}
            _ => return Err(unsupported(&path)),
        }
    }
    req.output = output(mime, schema)?;
    Ok(())
}

/// Structured output: JSON with or without a schema; a schema needs the JSON MIME type.
fn output(mime: Option<String>, schema: Option<Value>) -> Result<Option<OutputFormat>, TranslateError> {
    let path = "generationConfig.responseMimeType";
    match (mime.as_deref(), schema) {
        (None | Some("text/plain"), None) => Ok(None),
        (Some("application/json"), None) => Ok(Some(OutputFormat::JsonObject)),
        // Gemini constrains decoding to the schema; `strict` stays unset because Gemini
        // schemas need not meet OpenAI's strict-mode rules.
        (Some("application/json"), Some(schema)) => {
            Ok(Some(OutputFormat::JsonSchema { name: SCHEMA_NAME.into(), schema, strict: None }))
        }
        (None | Some("text/plain"), Some(_)) => Err(invalid(path, "application/json with a response schema")),
        (Some(_), _) => Err(unsupported(path)),
    }
}

/// `thinkingConfig`. A budget of -1 (dynamic, Gemini's default) or 0 (off, the neutral
/// default) asks for nothing; a positive budget is a budget; `thinkingLevel` is an effort.
/// `includeThoughts` is accepted either way: answers show the reasoning providers return.
fn thinking(v: Value) -> Result<Option<Reasoning>, TranslateError> {
    let path = "generationConfig.thinkingConfig";
    let mut t = camel(map(path, v)?);
    if let Some(v) = t.remove("includeThoughts").filter(|v| !v.is_null()) {
        boolean(&format!("{path}.includeThoughts"), &v)?;
    }
    let budget = t.remove("thinkingBudget").filter(|v| !v.is_null());
    let level = opt_string(&mut t, "thinkingLevel", path)?;
    no_more(&t, path)?;
    match (budget, level) {
        (Some(_), Some(_)) => Err(invalid(path, "thinkingBudget or thinkingLevel, not both")),
        (Some(b), None) => match b.as_i64() {
            Some(-1 | 0) => Ok(None),
            Some(n) => match u64::try_from(n) {
                Ok(n) => Ok(Some(Reasoning::Budget(n))),
                Err(_) => Err(invalid(&format!("{path}.thinkingBudget"), "-1, 0 or a positive integer")),
            },
            None => Err(invalid(&format!("{path}.thinkingBudget"), "-1, 0 or a positive integer")),
        },
        (None, Some(level)) => match level.to_ascii_lowercase().as_str() {
            "thinking_level_unspecified" => Ok(None),
            effort @ ("minimal" | "low" | "medium" | "high") => Ok(Some(Reasoning::Effort(effort.to_string()))),
            _ => Err(invalid(&format!("{path}.thinkingLevel"), "MINIMAL, LOW, MEDIUM or HIGH")),
        },
        (None, None) => Ok(None),
    }
}

/// Google's OpenAPI-subset `Schema` as JSON Schema: type names lowercased (`STRING` →
/// `string`), `nullable: true` as a `null` alternative, and `propertyOrdering` (an ordering
/// hint of Gemini's own) left out. Only `properties`, `items` and `anyOf` hold sub-schemas.
pub(crate) fn json_schema(v: Value) -> Value {
    let Value::Object(m) = v else { return v };
    let m = camel(m);
    let nullable = m.get("nullable") == Some(&Value::Bool(true));
    let mut out = Map::new();
    for (k, v) in m {
        let v = match (k.as_str(), v) {
            ("nullable" | "propertyOrdering", _) => continue,
            ("type", Value::String(t)) => Value::String(t.to_ascii_lowercase()),
            ("properties", Value::Object(props)) => {
                Value::Object(props.into_iter().map(|(name, s)| (name, json_schema(s))).collect())
            }
            ("items", s) => json_schema(s),
            ("anyOf", Value::Array(items)) => Value::Array(items.into_iter().map(json_schema).collect()),
            (_, v) => v,
        };
        out.insert(k, v);
    }
    if nullable {
        allow_null(&mut out);
    }
    Value::Object(out)
}

/// Lets a schema also match `null` (`type: [t, "null"]`, or one more `anyOf` branch).
fn allow_null(schema: &mut Map<String, Value>) {
    if let Some(Value::Array(values)) = schema.get_mut("enum") {
        values.push(Value::Null);
    }
    if let Some(Value::String(t)) = schema.get("type") {
        let both = json!([t, "null"]);
        schema.insert("type".into(), both);
    } else if let Some(Value::Array(branches)) = schema.get_mut("anyOf") {
        branches.push(json!({"type": "null"}));
    }
}
