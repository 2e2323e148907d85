//! `kv_tokenize`: when a request for a `precise_cache_aware` model carries no token ids, the
//! filter asks one of the pool's replicas for them with vLLM's `POST /tokenize`, which applies
//! the model's chat template exactly as the engine will before hashing its blocks. These are
//! the call's plan and the reading of its answer; the filter makes the call.

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::config::{Config, Resolved};
use crate::route::Api;

/// The call to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenizeCall {
    /// Index of the provider (its cluster) into the configuration's providers.
    pub provider: usize,
    /// `:path`: the provider's `base_url` prefix and `/tokenize`.
    pub path: String,
    /// The JSON body: the upstream model and the request's `messages` or `prompt`.
    pub body: Vec<u8>,
}

#[derive(Deserialize)]
struct Prompt<'a> {
    #[serde(borrow)]
    model: Option<&'a RawValue>,
    #[serde(borrow)]
    messages: Option<&'a RawValue>,
    #[serde(borrow)]
    prompt: Option<&'a RawValue>,
}

/// The `/tokenize` call for a chat or completion request `body` whose model routes by
/// `precise_cache_aware` over a pool with `kv_tokenize: true`; `None` otherwise.
pub fn plan(config: &Config, api: Api, body: &[u8]) -> Option<TokenizeCall> {
    let field = match api {
        Api::ChatCompletions => "messages",
        Api::Completions => "prompt",
        _ => return None,
    };
    let prompt: Prompt<'_> = serde_json::from_slice(body).ok()?;
    let name: String = serde_json::from_str(prompt.model?.get()).ok()?;
    let Some(Resolved::Model(m)) = config.resolve(&name) else { return None };
    let model = config.models.get(m)?;
    if !model.strategy.uses_kv_index() {
        return None;
    }
    let [target] = model.targets.as_slice() else { return None };
    let provider = config.providers.get(target.provider)?;
    if !provider.kv.as_ref().is_some_and(|kv| kv.tokenize) {
        return None;
    }
    let value = if field == "messages" { prompt.messages? } else { prompt.prompt? };
    let upstream = serde_json::to_string(&target.model).ok()?;
    let body = format!("{{\"model\":{upstream},\"{field}\":{}}}", value.get()).into_bytes();
    Some(TokenizeCall { provider: target.provider, path: format!("{}/tokenize", provider.base_url.path_prefix), body })
}

/// The token ids of a `/tokenize` answer (`{"tokens": [...], ...}`); `None` when it is not one
/// or has none.
pub fn parse_answer(body: &[u8]) -> Option<Vec<u32>> {
    #[derive(Deserialize)]
    struct Answer {
        tokens: Vec<u32>,
    }
    let answer: Answer = serde_json::from_slice(body).ok()?;
    (!answer.tokens.is_empty()).then_some(answer.tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(tokenize: bool, strategy: &str) -> Config {
        let yaml = format!(
            r#"
providers:
  - name: pool
    kind: openai_compatible
    base_url: "http://vllm:8000/engine"
    kv_tokenize: {tokenize}
    endpoints: [{{ address: "10.0.0.1:8000", kv_events: "tcp://10.0.0.1:5557" }}]
models: [{{ name: m, strategy: {strategy}, targets: [{{ provider: pool, model: "Qwen/Qwen3-8B" }}] }}]
aliases: {{ fast: m }}
"#
        );
        Config::try_from(serde_saphyr::from_str::<crate::config::RawConfig>(&yaml).unwrap()).unwrap()
    }

    #[test]
    fn chat_and_completion_requests_are_planned() {
        let c = config(true, "precise_cache_aware");
        let chat = br#"{"model":"fast","messages":[{"role":"user","content":"hi"}],"stream":true}"#;
        let call = plan(&c, Api::ChatCompletions, chat).unwrap();
        assert_eq!((call.provider, call.path.as_str()), (0, "/engine/tokenize"));
        assert_eq!(
            String::from_utf8(call.body).unwrap(),
            r#"{"model":"Qwen/Qwen3-8B","messages":[{"role":"user","content":"hi"}]}"#
        );
        let completion = br#"{"model":"m","prompt":"once upon"}"#;
        let body = plan(&c, Api::Completions, completion).unwrap().body;
        assert_eq!(body, br#"{"model":"Qwen/Qwen3-8B","prompt":"once upon"}"#);
    }

    #[test]
    fn nothing_is_planned_unless_asked_for() {
        let chat = br#"{"model":"m","messages":[]}"#;
        assert_eq!(plan(&config(false, "precise_cache_aware"), Api::ChatCompletions, chat), None);
        assert_eq!(plan(&config(true, "cache_aware"), Api::ChatCompletions, chat), None);
        let c = config(true, "precise_cache_aware");
        assert_eq!(plan(&c, Api::Embeddings, chat), None);
        assert_eq!(plan(&c, Api::ChatCompletions, br#"{"model":"other","messages":[]}"#), None);
        assert_eq!(plan(&c, Api::ChatCompletions, b"not json"), None);
    }

    #[test]
    fn answers_are_read_or_refused() {
        assert_eq!(
            parse_answer(br#"{"count":2,"max_model_len":8,"tokens":[5,6],"token_strs":null}"#),
            Some(vec![5, 6])
        );
        assert_eq!(parse_answer(br#"{"tokens":[]}"#), None);
        assert_eq!(parse_answer(br#"{"tokens":[-1]}"#), None);
        assert_eq!(parse_answer(b"<html>"), None);
    }
}
