//! Why the model stopped: the finish reasons an answer states (`gen_ai.response.finish_reasons`),
//! read only when asked for (the GenAI attributes), by a byte search of each complete event or
//! of a whole JSON body — no parse, so it costs nothing to the usage reading it rides along.

use super::UsageDialect;

/// At most this many reasons are kept (one per choice; `n` is rarely above a few).
const MAX_REASONS: usize = 8;
/// A reason longer than this is not one (the known ones are short words).
const MAX_LEN: usize = 40;

/// The finish reasons seen so far in one answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FinishReasons {
    /// In the order they were written; an event that states reasons again replaces them.
    pub reasons: Vec<String>,
}

/// The keys a dialect writes its reason under, with a string value: OpenAI's
/// `choices[].finish_reason`, Anthropic's `stop_reason` (top level or `message_delta.delta`),
/// Gemini's `candidates[].finishReason`, Converse's `stopReason` (top level, or a stream's
/// `messageStop` event).
fn key(dialect: UsageDialect) -> &'static [u8] {
    match dialect {
        UsageDialect::OpenAi => b"\"finish_reason\":",
        UsageDialect::Anthropic => b"\"stop_reason\":",
        UsageDialect::Gemini => b"\"finishReason\":",
        UsageDialect::Converse => b"\"stopReason\":",
    }
}

impl FinishReasons {
    /// Reads the reasons `text` (one event's bytes, or a whole body) states; `null` values and
    /// texts without the key change nothing.
    pub fn scan(&mut self, dialect: UsageDialect, text: &[u8]) {
        let key = key(dialect);
        let mut found: Vec<String> = Vec::new();
        let mut rest = text;
        while let Some(at) = crate::bytes::find_sub(rest, key) {
            rest = rest.get(at + key.len()..).unwrap_or_default();
            if let Some(reason) = string_value(rest) {
                if found.len() < MAX_REASONS {
                    found.push(reason);
                }
            }
        }
        if !found.is_empty() {
            self.reasons = found;
        }
    }
}

/// The JSON string starting `bytes` (after optional spaces), when it is a short plain word.
fn string_value(bytes: &[u8]) -> Option<String> {
    let start = bytes.iter().position(|b| !b.is_ascii_whitespace())?;
    let body = bytes.get(start..)?.strip_prefix(b"\"")?;
    let end = crate::bytes::find_byte(body, b'"')?;
    let word = body.get(..end)?;
    let plain = word.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'-');
    (plain && !word.is_empty() && word.len() <= MAX_LEN).then(|| String::from_utf8_lossy(word).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(dialect: UsageDialect, texts: &[&str]) -> Vec<String> {
        let mut f = FinishReasons::default();
        for t in texts {
            f.scan(dialect, t.as_bytes());
        }
        f.reasons
    }

    #[test]
    fn every_dialect_states_its_reasons() {
        let openai = r#"{"choices":[{"index":0,"finish_reason":"stop"},{"index":1,"finish_reason": "length"}]}"#;
        assert_eq!(scan(UsageDialect::OpenAi, &[openai]), ["stop", "length"]);
        // A stream: earlier chunks say null, the last one the reason, the usage chunk nothing.
        let chunks = [
            r#"{"choices":[{"delta":{"content":"hi"},"finish_reason":null}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#,
            r#"{"choices":[],"usage":{}}"#,
        ];
        assert_eq!(scan(UsageDialect::OpenAi, &chunks), ["stop"]);
        let anthropic = [
            r#"{"type":"message_start","message":{"stop_reason":null}}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":3}}"#,
        ];
        assert_eq!(scan(UsageDialect::Anthropic, &anthropic), ["end_turn"]);
        assert_eq!(scan(UsageDialect::Gemini, &[r#"{"candidates":[{"finishReason":"MAX_TOKENS"}]}"#]), ["MAX_TOKENS"]);
    }

    #[test]
    fn odd_values_are_not_reasons() {
        let long = format!(r#"{{"finish_reason":"{}"}}"#, "x".repeat(100));
        for text in [r#"{"finish_reason":"a\"b"}"#, r#"{"finish_reason":""}"#, &long, r#"{"finish_reason":"#] {
            assert!(scan(UsageDialect::OpenAi, &[text]).is_empty(), "{text}");
        }
        let many = format!("[{}]", vec![r#"{"finish_reason":"stop"}"#; 20].join(","));
        assert_eq!(scan(UsageDialect::OpenAi, &[&many]).len(), MAX_REASONS);
    }
}
