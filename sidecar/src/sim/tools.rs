//! Deterministic tool calling and JSON output for the simulated engine, shared by the OpenAI,
//! Anthropic and Gemini dialects.
//!
//! The rule: when a request declares tools, the sim calls one of them unless the conversation
//! just handed it a tool result (then it answers in text) or `tool_choice` says otherwise.
//! `none` never calls; a named tool is always called; `required`/`any` always call the first
//! declared tool; `auto` (the default) calls the first declared tool unless the last turn is a
//! tool result. Arguments are built from the tool's JSON schema by [`sample`], so tests know
//! them in advance: every required property gets a fixed value of its type.

use serde_json::{json, Map, Value};

use super::error::SimError;

/// Characters per streamed fragment of a tool call's JSON arguments (one fragment, one token).
pub const FRAGMENT_CHARS: usize = 8;
/// How deep [`sample`] follows nested schemas and `$ref`s before giving up with `null`.
const MAX_DEPTH: usize = 16;

/// A declared tool, dialect-neutral: its name and its parameters' JSON schema.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolSpec {
    /// The function name the model calls.
    pub name: String,
    /// JSON schema (or Gemini's OpenAPI subset) of the arguments; `null` when none.
    pub schema: Value,
}

/// What the request lets the model do with its tools.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ToolChoice {
    /// Call a tool unless the last turn is a tool result.
    #[default]
    Auto,
    /// Never call a tool.
    None,
    /// Always call a tool (OpenAI `required`, Anthropic `any`, Gemini `ANY`).
    Required,
    /// Always call this tool.
    Named(String),
}

/// A tool call the simulated model makes.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCall {
    /// Name of the called tool.
    pub name: String,
    /// Arguments, a JSON object built from the tool's schema.
    pub arguments: Value,
}

impl ToolCall {
    /// The arguments as compact JSON text (OpenAI's `arguments` string).
    pub fn arguments_json(&self) -> String {
        self.arguments.to_string()
    }

    /// The arguments text cut into [`FRAGMENT_CHARS`]-character pieces, as streamed; at least
    /// one piece, and the pieces concatenate to [`ToolCall::arguments_json`].
    pub fn fragments(&self) -> Vec<String> {
        let chars: Vec<char> = self.arguments_json().chars().collect();
        chars.chunks(FRAGMENT_CHARS).map(|chunk| chunk.iter().collect()).collect()
    }

    /// Output tokens of the call: one per fragment.
    pub fn tokens(&self) -> u32 {
        u32::try_from(self.fragments().len()).unwrap_or(u32::MAX)
    }
}

/// The tool call the sim makes for `tools` under `choice`, or `None` to answer in text.
/// `after_tool_result` tells whether the last turn hands the model tool results.
///
/// # Errors
/// `choice` names a tool that is not declared (every provider answers 400 to that).
pub fn pick(tools: &[ToolSpec], choice: &ToolChoice, after_tool_result: bool) -> Result<Option<ToolCall>, SimError> {
    let spec = match choice {
        ToolChoice::None => None,
        ToolChoice::Auto if after_tool_result => None,
        ToolChoice::Auto | ToolChoice::Required => tools.first(),
        ToolChoice::Named(name) => Some(
            tools
                .iter()
                .find(|tool| tool.name == *name)
                .ok_or_else(|| SimError::BadRequest(format!("tool_choice names an undeclared tool `{name}`")))?,
        ),
    };
    Ok(spec.map(|tool| ToolCall { name: tool.name.clone(), arguments: object_or_empty(sample(&tool.schema)) }))
}

/// Tool arguments are always an object, even for a missing or odd schema.
fn object_or_empty(value: Value) -> Value {
    if value.is_object() {
        value
    } else {
        Value::Object(Map::new())
    }
}

/// A value matching `schema` with every required property filled: strings `"sim"` (or the
/// first `enum` value), integers `1`, numbers `1.5`, booleans `true`, arrays one sampled item,
/// objects their required properties, `null` for what cannot be sampled. Local `$ref`s
/// (`#/$defs/...`, `#/definitions/...`) are followed; `anyOf`/`oneOf` take the first option.
/// Types may be spelled in upper case (Gemini's `STRING`, `OBJECT`, ...).
pub fn sample(schema: &Value) -> Value {
    sample_at(schema, schema, 0)
}

fn sample_at(schema: &Value, root: &Value, depth: usize) -> Value {
    if depth > MAX_DEPTH {
        return Value::Null;
    }
    let Some(object) = schema.as_object() else { return Value::Null };
    if let Some(value) = object.get("const").or_else(|| object.get("enum").and_then(|e| e.get(0))) {
        return value.clone();
    }
    if let Some(target) = object.get("$ref").and_then(Value::as_str).and_then(|r| resolve(root, r)) {
        return sample_at(target, root, depth + 1);
    }
    let first_option = ["anyOf", "oneOf", "allOf"].iter().find_map(|key| object.get(*key)?.get(0));
    if let Some(option) = first_option {
        return sample_at(option, root, depth + 1);
    }
    match schema_type(object).as_deref() {
        Some("string") => Value::from("sim"),
        Some("integer") => Value::from(1),
        Some("number") => Value::from(1.5),
        Some("boolean") => Value::from(true),
        Some("array") => {
            let item = object.get("items").map_or(Value::Null, |items| sample_at(items, root, depth + 1));
            Value::Array(vec![item])
        }
        Some("object") => sample_object(object, root, depth),
        _ => Value::Null,
    }
}

/// The schema's type in lower case: the first non-null entry of a type list, or `object`
/// when the schema only lists `properties`.
fn schema_type(object: &Map<String, Value>) -> Option<String> {
    let declared = match object.get("type") {
        Some(Value::String(kind)) => Some(kind.as_str()),
        Some(Value::Array(kinds)) => {
            kinds.iter().filter_map(Value::as_str).find(|kind| !kind.eq_ignore_ascii_case("null"))
        }
        _ => None,
    };
    declared.or_else(|| object.contains_key("properties").then_some("object")).map(str::to_ascii_lowercase)
}

fn sample_object(object: &Map<String, Value>, root: &Value, depth: usize) -> Value {
    let properties = object.get("properties").and_then(Value::as_object);
    let required = object.get("required").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let filled = required.iter().filter_map(Value::as_str).map(|name| {
        let value = properties.and_then(|p| p.get(name)).map_or(Value::Null, |s| sample_at(s, root, depth + 1));
        (name.to_owned(), value)
    });
    Value::Object(filled.collect())
}

/// A local JSON pointer `#/...` inside `root`.
fn resolve<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
    root.pointer(reference.strip_prefix('#')?)
}

/// The tool traffic of a received conversation, oldest first, for `x-sim-echo-tools`: each
/// call (`ref` its id, or its name where the dialect gives calls none; `name`; `arguments`)
/// and each result (`ref` the call it answers; `output` its text). A test reading it back sees
/// whether a gateway delivered both halves of a tool exchange, not only the last result.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Traffic {
    calls: Vec<Value>,
    results: Vec<Value>,
}

impl Traffic {
    /// Records a call.
    pub fn call(&mut self, reference: &str, name: &str, arguments: Value) {
        self.calls.push(json!({"ref": reference, "name": name, "arguments": arguments}));
    }

    /// Records a result.
    pub fn result(&mut self, reference: &str, output: String) {
        self.results.push(json!({"ref": reference, "output": output}));
    }

    /// The `tool_use` and `tool_result` blocks of Anthropic messages' `content`.
    pub fn anthropic<'a>(contents: impl Iterator<Item = &'a Value>) -> Traffic {
        let mut traffic = Traffic::default();
        for block in contents.filter_map(Value::as_array).flatten() {
            let field = |key: &str| block.get(key).and_then(Value::as_str).unwrap_or_default();
            match field("type") {
                "tool_use" => traffic.call(field("id"), field("name"), block.get("input").cloned().unwrap_or_default()),
                "tool_result" => {
                    let output = block.get("content").map(super::text::message_text).unwrap_or_default();
                    traffic.result(field("tool_use_id"), output);
                }
                _ => {}
            }
        }
        traffic
    }

    /// The `functionCall` and `functionResponse` parts of Gemini contents (the response as
    /// compact JSON); Gemini pairs them by name when they carry no id.
    pub fn gemini<'a>(contents: impl Iterator<Item = &'a [Value]>) -> Traffic {
        let mut traffic = Traffic::default();
        for part in contents.flatten() {
            let either = |camel: &str, snake: &str| part.get(camel).or_else(|| part.get(snake));
            let reference = |v: &'a Value| v.get("id").or_else(|| v.get("name")).and_then(Value::as_str);
            if let Some(call) = either("functionCall", "function_call") {
                let name = call.get("name").and_then(Value::as_str).unwrap_or_default();
                traffic.call(reference(call).unwrap_or_default(), name, call.get("args").cloned().unwrap_or_default());
            }
            if let Some(response) = either("functionResponse", "function_response") {
                let output = response.get("response").map(Value::to_string).unwrap_or_default();
                traffic.result(reference(response).unwrap_or_default(), output);
            }
        }
        traffic
    }

    /// The answer's text: the traffic as compact JSON.
    pub fn text(&self) -> String {
        json!({"calls": self.calls, "results": self.results}).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn weather() -> ToolSpec {
        let schema = json!({
            "type": "object",
            "properties": {
                "city": {"type": "string"}, "days": {"type": "integer"}, "unit": {"enum": ["c", "f"]},
                "verbose": {"type": "boolean"}, "lat": {"type": ["number", "null"]}, "note": {"type": "string"},
            },
            "required": ["city", "days", "unit", "verbose", "lat"],
        });
        ToolSpec { name: "weather".into(), schema }
    }

    #[test]
    fn required_properties_get_fixed_values() {
        let call = pick(&[weather()], &ToolChoice::Auto, false).unwrap().unwrap();
        assert_eq!(call.name, "weather");
        let expected = json!({"city": "sim", "days": 1, "unit": "c", "verbose": true, "lat": 1.5});
        assert_eq!(call.arguments, expected);
    }

    #[test]
    fn choice_and_tool_results_decide_whether_to_call() {
        let other = ToolSpec { name: "other".into(), schema: Value::Null };
        let tools = [weather(), other];
        assert!(pick(&tools, &ToolChoice::Auto, true).unwrap().is_none());
        assert!(pick(&tools, &ToolChoice::None, false).unwrap().is_none());
        assert!(pick(&[], &ToolChoice::Auto, false).unwrap().is_none());
        assert_eq!(pick(&tools, &ToolChoice::Required, true).unwrap().unwrap().name, "weather");
        let named = pick(&tools, &ToolChoice::Named("other".into()), true).unwrap().unwrap();
        assert_eq!((named.name.as_str(), named.arguments), ("other", json!({})));
        assert!(pick(&tools, &ToolChoice::Named("nope".into()), false).is_err());
    }

    #[test]
    fn nested_refs_arrays_and_gemini_types() {
        let schema = json!({
            "type": "OBJECT",
            "properties": {
                "items": {"type": "ARRAY", "items": {"$ref": "#/$defs/item"}},
                "pick": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
            },
            "required": ["items", "pick"],
            "$defs": {"item": {"properties": {"id": {"type": "string"}}, "required": ["id"]}},
        });
        assert_eq!(sample(&schema), json!({"items": [{"id": "sim"}], "pick": 1}));
        let looping = json!({"$ref": "#"});
        assert_eq!(sample(&looping), Value::Null);
    }

    #[test]
    fn traffic_pairs_calls_and_results_in_every_dialect() {
        let anthropic = [
            json!([{"type": "text", "text": "hi"}, {"type": "tool_use", "id": "t1", "name": "w", "input": {"c": 1}}]),
            json!([{"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "21C"}]}]),
        ];
        let seen = Traffic::anthropic(anthropic.iter());
        let expected =
            r#"{"calls":[{"arguments":{"c":1},"name":"w","ref":"t1"}],"results":[{"output":"21C","ref":"t1"}]}"#;
        assert_eq!(seen.text(), expected);
        let gemini = [
            vec![json!({"functionCall": {"name": "w", "args": {"c": 1}}, "thoughtSignature": "s"})],
            vec![json!({"function_response": {"name": "w", "response": {"output": "21C"}}})],
        ];
        let seen = Traffic::gemini(gemini.iter().map(Vec::as_slice));
        assert_eq!(seen.calls, [json!({"ref": "w", "name": "w", "arguments": {"c": 1}})]);
        assert_eq!(seen.results, [json!({"ref": "w", "output": "{\"output\":\"21C\"}"})]);
        assert_eq!(Traffic::anthropic([json!("text")].iter()).text(), r#"{"calls":[],"results":[]}"#);
    }

    #[test]
    fn fragments_concatenate_to_the_arguments() {
        let call = pick(&[weather()], &ToolChoice::Auto, false).unwrap().unwrap();
        let fragments = call.fragments();
        assert!(fragments.len() > 1 && fragments.iter().all(|f| f.chars().count() <= FRAGMENT_CHARS));
        assert_eq!(fragments.concat(), call.arguments_json());
        assert_eq!(call.tokens() as usize, fragments.len());
        let empty = ToolCall { name: "x".into(), arguments: json!({}) };
        assert_eq!(empty.fragments(), ["{}"]);
    }
}
