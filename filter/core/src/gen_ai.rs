//! A request's OpenTelemetry GenAI attributes (semantic conventions for GenAI spans), which the
//! filter hands its host as filter state [`FILTER_STATE_KEY`] when the plugin configuration
//! asks (`gen_ai_attributes`): `ferrogate serve` puts them on the request's span; in Envoy
//! they are `wasm.ferrogate.gen_ai` for access logs. Prompt and completion content is never
//! among them.

use crate::config::ProviderKind;
use crate::route::Api;

/// The filter-state key (Envoy prefixes it with `wasm.`).
pub const FILTER_STATE_KEY: &str = "ferrogate.gen_ai";

/// What one routed request reports.
#[derive(Debug, Clone, Default)]
pub struct Attributes<'a> {
    /// The API the client called.
    pub api: Option<Api>,
    /// The provider's kind, for `gen_ai.provider.name`.
    pub provider_kind: Option<ProviderKind>,
    /// The provider's name in the configuration.
    pub provider: &'a str,
    /// The model the client asked for.
    pub request_model: &'a str,
    /// The model id the provider was asked for.
    pub response_model: &'a str,
    /// The client's output cap, when it set one.
    pub max_tokens: Option<u64>,
    /// Input (cached included), output and cached input tokens.
    pub tokens: [u64; 3],
    /// Time to first token, ms.
    pub ttft_ms: Option<u64>,
    /// Why the model stopped, as the provider said, per choice.
    pub finish_reasons: &'a [String],
}

/// `gen_ai.operation.name` of an API: `chat`, `text_completion`, `embeddings`,
/// `generate_content`, or the API's own name where the conventions have none.
pub fn operation_name(api: Api) -> &'static str {
    match api {
        Api::ChatCompletions | Api::Messages | Api::Responses => "chat",
        Api::Completions => "text_completion",
        Api::Embeddings => "embeddings",
        Api::GenerateContent | Api::StreamGenerateContent => "generate_content",
        other => other.label(),
    }
}

/// `gen_ai.provider.name`: the conventions' well-known value for a hosted provider's kind
/// (`openai`, `anthropic`, `gcp.gemini`); a self-hosted server (`openai_compatible`) is named
/// by the configuration.
pub fn provider_name(kind: Option<ProviderKind>, configured: &str) -> &str {
    match kind {
        Some(ProviderKind::OpenAi) => "openai",
        Some(ProviderKind::Anthropic) => "anthropic",
        Some(ProviderKind::Gemini) => "gcp.gemini",
        Some(ProviderKind::AzureOpenAi) => "azure.ai.openai",
        Some(ProviderKind::Bedrock) => "aws.bedrock",
        Some(ProviderKind::Vertex) => "gcp.vertex_ai",
        Some(ProviderKind::OpenAiCompatible) | None => configured,
    }
}

impl Attributes<'_> {
    /// The attributes as one JSON object, keyed by attribute name.
    pub fn to_json(&self) -> String {
        let mut map = serde_json::Map::new();
        let mut put = |k: &str, v: serde_json::Value| {
            map.insert(k.to_string(), v);
        };
        if let Some(api) = self.api {
            put("gen_ai.operation.name", operation_name(api).into());
        }
        put("gen_ai.provider.name", provider_name(self.provider_kind, self.provider).into());
        put("gen_ai.request.model", self.request_model.into());
        put("gen_ai.response.model", self.response_model.into());
        if let Some(max) = self.max_tokens {
            put("gen_ai.request.max_tokens", max.into());
        }
        let [input, output, cached] = self.tokens;
        put("gen_ai.usage.input_tokens", input.into());
        put("gen_ai.usage.output_tokens", output.into());
        put("gen_ai.usage.cache_read.input_tokens", cached.into());
        if !self.finish_reasons.is_empty() {
            put("gen_ai.response.finish_reasons", self.finish_reasons.into());
        }
        put("ferrogate.provider", self.provider.into());
        if let Some(ms) = self.ttft_ms {
            put("ferrogate.time_to_first_token", (ms as f64 / 1000.0).into());
        }
        serde_json::Value::Object(map).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_follow_the_conventions() {
        let a = Attributes {
            api: Some(Api::Messages),
            provider_kind: Some(ProviderKind::Gemini),
            provider: "gem",
            request_model: "chat",
            response_model: "gemini-2.5-flash",
            max_tokens: Some(64),
            tokens: [12, 16, 2],
            ttft_ms: Some(250),
            finish_reasons: &["STOP".to_string()],
        };
        let v: serde_json::Value = serde_json::from_str(&a.to_json()).unwrap();
        assert_eq!(v["gen_ai.operation.name"], "chat");
        assert_eq!(v["gen_ai.provider.name"], "gcp.gemini");
        assert_eq!(v["ferrogate.provider"], "gem");
        assert_eq!(v["gen_ai.request.max_tokens"], 64);
        assert_eq!(v["gen_ai.usage.output_tokens"], 16);
        assert_eq!(v["ferrogate.time_to_first_token"], 0.25);
        assert_eq!(v["gen_ai.response.finish_reasons"], serde_json::json!(["STOP"]));
        let local = Attributes { provider_kind: Some(ProviderKind::OpenAiCompatible), provider: "vllm", ..a };
        assert_eq!(provider_name(local.provider_kind, local.provider), "vllm");
        assert_eq!(operation_name(Api::Completions), "text_completion");
        assert_eq!(operation_name(Api::StreamGenerateContent), "generate_content");
    }
}
