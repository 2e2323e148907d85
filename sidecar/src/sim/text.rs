//! Deterministic "model output" for the simulated engine: completion words derived from a
//! hash of the prompt, prompt-token estimates, completion lengths and embedding vectors.
//!
//! Everything here is a pure function of its inputs so that demos, end-to-end tests and
//! benchmarks are reproducible: the same prompt always yields the same text, the same usage
//! numbers and the same embedding, across runs and machines (no std `Hasher`, whose output may
//! change between Rust releases).
//!
//! Token model: one whitespace-separated word is one token, both for prompts and completions.
//! Chat prompts add [`MESSAGE_OVERHEAD`] tokens per message (role and separators) and
//! [`REPLY_PRIMING`] tokens for the assistant turn, like OpenAI's published estimate.

use serde_json::Value;

/// Tokens added per chat message for the role and the separators around it.
pub const MESSAGE_OVERHEAD: u32 = 4;
/// Tokens added once per chat request for the primed assistant reply.
pub const REPLY_PRIMING: u32 = 3;
/// Default size of embedding vectors when the request does not ask for `dimensions`.
pub const EMBEDDING_DIMS: usize = 16;
/// Upper bound on requested embedding `dimensions`, so a request cannot make us allocate
/// arbitrary amounts of memory.
pub const MAX_EMBEDDING_DIMS: usize = 4096;

/// The vocabulary completions are drawn from; 64 entries so a hash maps onto it evenly.
const WORDS: [&str; 64] = [
    "the",
    "gateway",
    "routes",
    "tokens",
    "quickly",
    "to",
    "a",
    "model",
    "while",
    "every",
    "request",
    "waits",
    "for",
    "its",
    "turn",
    "and",
    "cache",
    "blocks",
    "fill",
    "with",
    "prompts",
    "from",
    "many",
    "users",
    "so",
    "latency",
    "stays",
    "low",
    "when",
    "load",
    "grows",
    "across",
    "replicas",
    "that",
    "share",
    "work",
    "in",
    "small",
    "batches",
    "of",
    "text",
    "streamed",
    "back",
    "as",
    "chunks",
    "over",
    "open",
    "connections",
    "until",
    "done",
    "engine",
    "answers",
    "each",
    "question",
    "politely",
    "using",
    "simulated",
    "words",
    "which",
    "look",
    "plausible",
    "enough",
    "here",
    "now",
];

/// Why the engine stopped generating, as vLLM's metrics count it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// The answer ended by itself: natural length, a stop sequence or a tool call.
    Stop,
    /// The request's output cap cut the answer short.
    Length,
}

/// 64-bit FNV-1a: tiny, stable across platforms and releases, good enough to seed words.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3))
}

/// SplitMix64 step: turns one seed into a well-mixed stream of values.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The `count` completion words for `prompt`; one word is one token.
pub fn completion_words(prompt: &str, count: u32) -> Vec<&'static str> {
    let mut state = fnv1a(prompt.as_bytes());
    (0..count).map(|_| WORDS[(splitmix64(&mut state) % WORDS.len() as u64) as usize]).collect()
}

/// Whitespace-word count, the sim's token estimate for a piece of text.
pub fn count_words(text: &str) -> u32 {
    u32::try_from(text.split_whitespace().count()).unwrap_or(u32::MAX)
}

/// The text of a chat message `content`: a plain string, or the `text` of each part of a
/// multi-part content array (images and other parts contribute nothing).
pub fn message_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => {
            parts.iter().filter_map(|part| part.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join(" ")
        }
        _ => String::new(),
    }
}

/// Prompt tokens of a chat request whose messages have the given texts.
pub fn chat_prompt_tokens<'a>(texts: impl IntoIterator<Item = &'a str>) -> u32 {
    texts
        .into_iter()
        .map(|text| count_words(text).saturating_add(MESSAGE_OVERHEAD))
        .fold(REPLY_PRIMING, u32::saturating_add)
}

/// One prompt of a `/v1/completions` or `/v1/embeddings` request: its text (what the output
/// is derived from) and its token estimate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PromptInput {
    /// Text used for hashing; token-id prompts are rendered as their ids.
    pub text: String,
    /// Estimated prompt tokens.
    pub tokens: u32,
}

/// Splits an OpenAI `prompt`/`input` value into prompts: a string, an array of strings, an
/// array of token ids, or an array of token-id arrays. `None` for any other shape.
pub fn prompt_inputs(value: &Value) -> Option<Vec<PromptInput>> {
    match value {
        Value::String(text) => Some(vec![text_input(text)]),
        Value::Array(items) if items.iter().all(Value::is_u64) => Some(vec![ids_input(items)]),
        Value::Array(items) => items
            .iter()
            .map(|item| match item {
                Value::String(text) => Some(text_input(text)),
                Value::Array(ids) if ids.iter().all(Value::is_u64) => Some(ids_input(ids)),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

fn text_input(text: &str) -> PromptInput {
    PromptInput { text: text.to_owned(), tokens: count_words(text) }
}

/// Token-id prompts are already tokenised: one id is one token.
fn ids_input(ids: &[Value]) -> PromptInput {
    let text = ids.iter().map(Value::to_string).collect::<Vec<_>>().join(" ");
    PromptInput { tokens: u32::try_from(ids.len()).unwrap_or(u32::MAX), text }
}

/// A unit-length embedding of `dims` components derived from the hash of `input`.
pub fn embedding(input: &str, dims: usize) -> Vec<f32> {
    let mut state = fnv1a(input.as_bytes());
    let raw: Vec<f64> = (0..dims)
        // Top 53 bits → [0, 1) → [-1, 1).
        .map(|_| (splitmix64(&mut state) >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0)
        .collect();
    let norm = raw.iter().map(|x| x * x).sum::<f64>().sqrt();
    raw.iter().map(|x| if norm > 0.0 { (x / norm) as f32 } else { 0.0 }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn same_prompt_same_words_and_different_prompt_differs() {
        let a = completion_words("hello world", 12);
        assert_eq!(a, completion_words("hello world", 12));
        assert_eq!(a.len(), 12);
        assert_ne!(a, completion_words("hello there", 12));
        // A shorter completion is a prefix of a longer one: max_tokens only truncates.
        assert_eq!(completion_words("hello world", 5), a[..5].to_vec());
    }

    #[test]
    fn chat_tokens_count_words_plus_overheads() {
        // 2 words + 4, 3 words + 4, + 3 priming.
        assert_eq!(chat_prompt_tokens(["be brief", "what is  rust?"]), 2 + 4 + 3 + 4 + 3);
        assert_eq!(chat_prompt_tokens([]), REPLY_PRIMING);
    }

    #[test]
    fn message_text_reads_strings_and_text_parts() {
        assert_eq!(message_text(&json!("hi there")), "hi there");
        let parts = json!([{"type": "text", "text": "a b"}, {"type": "image_url"}, {"type": "text", "text": "c"}]);
        assert_eq!(message_text(&parts), "a b c");
        assert_eq!(message_text(&json!(null)), "");
    }

    #[test]
    fn prompt_inputs_accept_all_openai_shapes() {
        let one = prompt_inputs(&json!("a b c")).unwrap();
        assert_eq!(one, vec![PromptInput { text: "a b c".into(), tokens: 3 }]);
        let many = prompt_inputs(&json!(["a", "b c"])).unwrap();
        assert_eq!(many.iter().map(|p| p.tokens).collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(prompt_inputs(&json!([1, 2, 3])).unwrap()[0].tokens, 3);
        assert_eq!(prompt_inputs(&json!([[1, 2], [3]])).unwrap().len(), 2);
        assert!(prompt_inputs(&json!(42)).is_none());
        assert!(prompt_inputs(&json!(["a", {"x": 1}])).is_none());
    }

    #[test]
    fn embeddings_are_deterministic_unit_vectors() {
        let a = embedding("hello", EMBEDDING_DIMS);
        assert_eq!(a.len(), EMBEDDING_DIMS);
        assert_eq!(a, embedding("hello", EMBEDDING_DIMS));
        assert_ne!(a, embedding("world", EMBEDDING_DIMS));
        let norm: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "norm {norm}");
    }

    #[test]
    fn fnv1a_matches_reference_vector() {
        // Published FNV-1a 64 test vector for "a".
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
