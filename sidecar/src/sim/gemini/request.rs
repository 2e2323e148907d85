//! Gemini request bodies: the GenerateContentRequest fields the sim reads (in both spellings
//! the API accepts), the API's validation, and the dialect-neutral [`Ask`] they make.

use axum::body::Bytes;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::sim::error::SimError;
use crate::sim::reply::{self, Ask, Turn};
use crate::sim::tools::{ToolChoice, ToolSpec, Traffic};

/// Top-level fields of a GenerateContentRequest, in both accepted spellings.
const KNOWN_FIELDS: [&str; 13] = [
    "model",
    "contents",
    "tools",
    "toolConfig",
    "tool_config",
    "safetySettings",
    "safety_settings",
    "systemInstruction",
    "system_instruction",
    "generationConfig",
    "generation_config",
    "cachedContent",
    "cached_content",
];

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct GenerateRequest {
    #[serde(default)]
    contents: Vec<Content>,
    #[serde(default, alias = "system_instruction")]
    system_instruction: Option<Content>,
    #[serde(default)]
    tools: Vec<Tool>,
    #[serde(default, alias = "tool_config")]
    tool_config: Option<ToolConfig>,
    #[serde(default, alias = "generation_config")]
    generation_config: GenerationConfig,
}

#[derive(Debug, Deserialize)]
struct Content {
    #[serde(default)]
    role: String,
    #[serde(default)]
    parts: Vec<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Tool {
    #[serde(default, alias = "function_declarations")]
    function_declarations: Vec<FunctionDeclaration>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct FunctionDeclaration {
    name: String,
    parameters: Option<Value>,
    #[serde(alias = "parameters_json_schema")]
    parameters_json_schema: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ToolConfig {
    #[serde(default, alias = "function_calling_config")]
    function_calling_config: Option<FunctionCallingConfig>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct FunctionCallingConfig {
    #[serde(default)]
    mode: String,
    #[serde(default, alias = "allowed_function_names")]
    allowed_function_names: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct GenerationConfig {
    #[serde(alias = "max_output_tokens")]
    max_output_tokens: Option<u32>,
    #[serde(default, alias = "stop_sequences")]
    stop_sequences: Vec<String>,
    #[serde(alias = "response_mime_type")]
    response_mime_type: Option<String>,
    #[serde(alias = "response_schema")]
    response_schema: Option<Value>,
    #[serde(alias = "response_json_schema")]
    response_json_schema: Option<Value>,
}

/// Parses and validates a GenerateContentRequest the way the API does.
pub(super) fn parse_request(body: &Bytes) -> Result<GenerateRequest, SimError> {
    let invalid = |detail: String| SimError::BadRequest(format!("Invalid JSON payload received. {detail}"));
    let object: Map<String, Value> = match serde_json::from_slice(body) {
        Ok(Value::Object(object)) => object,
        Ok(_) => return Err(invalid("Expected an object.".into())),
        Err(error) => return Err(invalid(error.to_string())),
    };
    if let Some(unknown) = object.keys().find(|key| !KNOWN_FIELDS.contains(&key.as_str())) {
        return Err(invalid(format!("Unknown name \"{unknown}\": Cannot find field.")));
    }
    let request: GenerateRequest = serde_json::from_value(Value::Object(object)).map_err(|e| invalid(e.to_string()))?;
    if request.contents.is_empty() {
        return Err(SimError::BadRequest("* GenerateContentRequest.contents: contents is not specified".into()));
    }
    if request.contents.iter().any(|content| !matches!(content.role.as_str(), "" | "user" | "model")) {
        return Err(SimError::BadRequest("Please use a valid role: user, model.".into()));
    }
    Ok(request)
}

impl GenerateRequest {
    /// The dialect-neutral ask and the prompt tokens.
    pub(super) fn ask(&self) -> (Ask, u32) {
        let system = self.system_instruction.as_ref().map(|c| Turn::new("system", parts_text(&c.parts)));
        let contents = self.contents.iter().map(|c| {
            let role = if c.role == "model" { "assistant" } else { "user" };
            Turn::new(role, parts_text(&c.parts))
        });
        let turns: Vec<Turn> = system.into_iter().chain(contents).collect();
        let (prompt, prompt_tokens) = reply::prompt(&turns);
        let config = &self.generation_config;
        let json_out = config.response_mime_type.as_deref() == Some("application/json");
        let schema = config.response_json_schema.as_ref().or(config.response_schema.as_ref());
        let ask = Ask {
            prompt,
            max_tokens: config.max_output_tokens,
            stop: config.stop_sequences.clone(),
            tools: self.tool_specs(),
            choice: self.tool_choice(),
            tool_result: self.contents.last().and_then(|c| function_responses(&c.parts)),
            json_schema: json_out.then(|| schema.cloned().unwrap_or(Value::Null)),
            echo: None,
        };
        (ask, prompt_tokens)
    }

    /// The contents' function calls and responses (`x-sim-echo-tools`).
    pub(super) fn traffic(&self) -> Traffic {
        Traffic::gemini(self.contents.iter().map(|c| c.parts.as_slice()))
    }

    fn tool_specs(&self) -> Vec<ToolSpec> {
        let declarations = self.tools.iter().flat_map(|tool| &tool.function_declarations);
        let spec = |d: &FunctionDeclaration| {
            let schema = d.parameters_json_schema.as_ref().or(d.parameters.as_ref()).cloned().unwrap_or(Value::Null);
            ToolSpec { name: d.name.clone(), schema }
        };
        declarations.map(spec).collect()
    }

    /// `toolConfig.functionCallingConfig`: `NONE`, `ANY` (optionally limited to
    /// `allowedFunctionNames`, the first of which is called), else `AUTO`.
    fn tool_choice(&self) -> ToolChoice {
        let Some(config) = self.tool_config.as_ref().and_then(|c| c.function_calling_config.as_ref()) else {
            return ToolChoice::Auto;
        };
        match (config.mode.as_str(), config.allowed_function_names.first()) {
            ("NONE", _) => ToolChoice::None,
            ("ANY", Some(name)) => ToolChoice::Named(name.clone()),
            ("ANY", None) => ToolChoice::Required,
            _ => ToolChoice::Auto,
        }
    }
}

/// The text of a content's parts: `text` parts, and function responses as compact JSON.
fn parts_text(parts: &[Value]) -> String {
    let texts = parts.iter().filter_map(|part| match part.get("text").and_then(Value::as_str) {
        Some(text) => Some(text.to_owned()),
        None => function_response(part).map(Value::to_string),
    });
    texts.collect::<Vec<_>>().join(" ")
}

fn function_response(part: &Value) -> Option<&Value> {
    let response = part.get("functionResponse").or_else(|| part.get("function_response"))?;
    Some(response.get("response").unwrap_or(&Value::Null))
}

/// The function responses of a content, if it has any.
fn function_responses(parts: &[Value]) -> Option<String> {
    let results: Vec<String> = parts.iter().filter_map(function_response).map(Value::to_string).collect();
    (!results.is_empty()).then(|| results.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn snake_case_fields_and_function_responses_are_read() {
        let body = json!({
            "system_instruction": {"parts": [{"text": "be brief"}]},
            "contents": [{"role": "user", "parts": [{"function_response": {"name": "f", "response": {"t": 1}}}]}],
            "generation_config": {"max_output_tokens": 3, "stop_sequences": ["x"]},
        });
        let request = parse_request(&Bytes::from(body.to_string())).unwrap();
        let (ask, tokens) = request.ask();
        assert_eq!(ask.prompt, "system: be brief\nuser: {\"t\":1}");
        assert_eq!(tokens, 2 + 4 + 1 + 4 + 3);
        assert_eq!((ask.max_tokens, ask.stop), (Some(3), vec!["x".to_owned()]));
        assert_eq!(ask.tool_result.as_deref(), Some("{\"t\":1}"));
    }

    #[test]
    fn unknown_fields_and_roles_are_refused() {
        let bad = |body: Value| parse_request(&Bytes::from(body.to_string())).unwrap_err().to_string();
        let contents = json!([{"role": "user", "parts": [{"text": "hi"}]}]);
        assert!(bad(json!({"contents": contents, "max_tokens": 5})).contains("Unknown name \"max_tokens\""));
        assert!(bad(json!({"contents": []})).contains("contents is not specified"));
        assert!(bad(json!({"contents": [{"role": "assistant", "parts": []}]})).contains("valid role"));
    }
}
