//! What a request is expected to cost before it runs: prompt tokens estimated from the body's
//! size (a token per four bytes, the usual rule for English text and JSON), and the completion
//! allowance the client set (`max_tokens`, `max_completion_tokens`, `max_output_tokens`,
//! Gemini's `generationConfig.maxOutputTokens`) or [`DEFAULT_COMPLETION`].
//! Settlement replaces the estimate with the real counts, so its error only matters while the
//! request runs.

use serde::Deserialize;

/// Completion tokens reserved when the request sets no limit of its own.
pub const DEFAULT_COMPLETION: u64 = 1024;

#[derive(Deserialize)]
struct Caps {
    max_tokens: Option<u64>,
    max_completion_tokens: Option<u64>,
    max_output_tokens: Option<u64>,
    #[serde(rename = "generationConfig", alias = "generation_config")]
    generation: Option<GenerationCaps>,
}

#[derive(Deserialize)]
struct GenerationCaps {
    #[serde(rename = "maxOutputTokens", alias = "max_output_tokens")]
    max_output_tokens: Option<u64>,
}

/// What a request to `model` of `provider` reserves on the limits of `plan`: tokens and their
/// price only when a limit counts them (the estimate parses the body once more).
pub fn amounts(
    config: &crate::config::Config,
    plan: &[super::LimitSpec],
    (provider, model): (&str, &str),
    body: &[u8],
) -> super::Amounts {
    if plan.iter().all(|s| s.metric == super::Metric::Requests) {
        return super::Amounts::default();
    }
    let (prompt, completion) = estimate(body);
    let usage = crate::usage::Usage { prompt_tokens: prompt, completion_tokens: completion, cached_tokens: 0 };
    let micro_usd = crate::usage::cost_micro_usd(&config.pricing, provider, model, &usage);
    super::Amounts::model(prompt.saturating_add(completion), micro_usd)
}

/// Estimated prompt tokens of a request body of `body_len` bytes: a token per four bytes.
pub fn prompt_tokens(body_len: usize) -> u64 {
    (body_len as u64).div_ceil(4)
}

/// `(estimated prompt tokens, completion allowance)` of a JSON request body.
pub fn estimate(body: &[u8]) -> (u64, u64) {
    (prompt_tokens(body.len()), max_tokens(body).unwrap_or(DEFAULT_COMPLETION))
}

/// The output cap the client set in a JSON request body, in any dialect's spelling.
pub fn max_tokens(body: &[u8]) -> Option<u64> {
    let caps: Caps = serde_json::from_slice(body).ok()?;
    let gemini = caps.generation.and_then(|g| g.max_output_tokens);
    caps.max_completion_tokens.or(caps.max_tokens).or(caps.max_output_tokens).or(gemini)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowances_from_every_dialect() {
        assert_eq!(estimate(br#"{"model":"m","max_tokens":50}"#).1, 50);
        assert_eq!(estimate(br#"{"max_completion_tokens":7,"max_tokens":50}"#).1, 7);
        assert_eq!(estimate(br#"{"max_output_tokens":9}"#).1, 9);
        assert_eq!(estimate(br#"{"generationConfig":{"maxOutputTokens":11}}"#).1, 11);
        assert_eq!(estimate(br#"{"model":"m"}"#), (4, DEFAULT_COMPLETION));
        assert_eq!(estimate(b"not json").1, DEFAULT_COMPLETION);
    }
}
