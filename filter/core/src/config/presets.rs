//! `openai_compatible` presets: the hosted OpenAI-compatible APIs a configuration can name in
//! one line (`preset: groq`) — their base URL, and the Chat Completions fields each one
//! refuses with a 400, which the gateway leaves out of what it sends them.

/// One hosted API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preset {
    /// The name in `preset:`.
    pub name: &'static str,
    /// Its base URL (the API paths `/v1/...` follow, as for every `openai_compatible`).
    pub base_url: &'static str,
    /// Top-level request fields it refuses (dropped from requests sent to it).
    pub refuses: &'static [&'static str],
}

/// The known presets. Base URLs end where `/v1/chat/completions` follows: DeepSeek serves
/// `/v1` at its root, Fireworks and OpenRouter below a prefix.
pub const PRESETS: [Preset; 8] = [
    Preset {
        name: "groq",
        base_url: "https://api.groq.com/openai",
        refuses: &["logprobs", "logit_bias", "top_logprobs"],
    },
    Preset {
        name: "mistral",
        base_url: "https://api.mistral.ai",
        refuses: &["logit_bias", "logprobs", "top_logprobs"],
    },
    Preset { name: "deepseek", base_url: "https://api.deepseek.com", refuses: &[] },
    Preset { name: "together", base_url: "https://api.together.ai", refuses: &[] },
    Preset { name: "fireworks", base_url: "https://api.fireworks.ai/inference", refuses: &[] },
    Preset { name: "openrouter", base_url: "https://openrouter.ai/api", refuses: &[] },
    Preset { name: "xai", base_url: "https://api.x.ai", refuses: &[] },
    Preset {
        name: "cerebras",
        base_url: "https://api.cerebras.ai",
        refuses: &["frequency_penalty", "logit_bias", "presence_penalty", "parallel_tool_calls", "service_tier"],
    },
];

/// The preset called `name`.
pub fn find(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.name == name)
}

/// The base URL of the preset called `name`.
pub fn base_url(name: &str) -> Option<&'static str> {
    find(name).map(|p| p.base_url)
}

/// The names, for error messages.
pub fn names() -> String {
    PRESETS.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
}

/// `body` (a JSON object) without the top-level fields `preset` refuses; `None` when it has
/// none of them (or is not a JSON object: the router has refused those already).
pub fn strip_refused(preset: &Preset, body: &[u8]) -> Option<Vec<u8>> {
    // A byte search first: most bodies carry none of these and are not parsed again.
    let mentions = |name: &str| body.windows(name.len() + 2).any(|w| w.get(1..=name.len()) == Some(name.as_bytes()));
    if !preset.refuses.iter().any(|name| mentions(name)) {
        return None;
    }
    let mut doc: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(body).ok()?;
    let before = doc.len();
    for name in preset.refuses {
        doc.remove(*name);
    }
    (doc.len() != before).then(|| serde_json::to_vec(&doc).ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::syntax::parse_base_url;

    #[test]
    fn every_preset_has_a_valid_https_base_url() {
        for p in PRESETS {
            let url = parse_base_url(p.base_url).unwrap_or_else(|e| panic!("{}: {e}", p.name));
            assert_eq!(url.scheme.as_str(), "https", "{}", p.name);
            assert_eq!(find(p.name), Some(&p));
        }
        assert_eq!(base_url("groq"), Some("https://api.groq.com/openai"));
        assert!(find("nope").is_none());
    }

    #[test]
    fn refused_fields_are_dropped_and_others_kept() {
        let groq = find("groq").unwrap();
        let body =
            br#"{"model":"m","logprobs":true,"top_logprobs":2,"messages":[{"role":"user","content":"logprobs"}]}"#;
        let out: serde_json::Value = serde_json::from_slice(&strip_refused(groq, body).unwrap()).unwrap();
        assert_eq!(out, serde_json::json!({"model":"m","messages":[{"role":"user","content":"logprobs"}]}));
        // Named only inside a message: nothing to drop.
        assert_eq!(strip_refused(groq, br#"{"model":"m","messages":[{"content":"logprobs"}]}"#), None);
        assert_eq!(strip_refused(find("deepseek").unwrap(), body), None);
    }
}
