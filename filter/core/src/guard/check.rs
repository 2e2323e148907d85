//! The wire contract of external checks: what a guardrail webhook is sent and may answer,
//! and the adapter for OpenAI-compatible `/v1/moderations` endpoints.
//!
//! A webhook gets `POST` JSON `{stage, policy, rule, request_id, key, model, api, texts}`
//! (the text parts after the detector rules ran, so it never sees what they redacted) and
//! answers `200` with `{"action": "allow"}`, `{"action": "block", "reason": "..."}` or
//! `{"action": "rewrite", "texts": [...]}` (one text per text sent, in order). Anything else —
//! another status, no answer in time, a body that is not that — is an error, which the
//! rule's `fail` setting turns into a pass or a refusal.

use serde::{Deserialize, Serialize};

/// What a check is asked about.
#[derive(Debug, Serialize)]
pub struct CheckRequest<'a> {
    /// `input` or `output`.
    pub stage: &'a str,
    /// The policy's name.
    pub policy: &'a str,
    /// The rule's name.
    pub rule: &'a str,
    /// The gateway's request id.
    pub request_id: &'a str,
    /// The caller's key name, when it has one.
    pub key: Option<&'a str>,
    /// The model the client asked for.
    pub model: &'a str,
    /// The API (`chat_completions`, `messages`, ...).
    pub api: &'a str,
    /// The text parts, in document order.
    pub texts: &'a [String],
}

/// A check's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Let it through.
    Allow,
    /// Refuse it; the check's reason, when it gave one (shown to the caller).
    Block(Option<String>),
    /// Let it through with these texts instead (one per text part).
    Rewrite(Vec<String>),
}

impl Verdict {
    /// `allow`, `block` or `rewrite` (records and metrics).
    pub fn as_str(&self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::Block(_) => "block",
            Verdict::Rewrite(_) => "rewrite",
        }
    }
}

/// Why a check gave no usable verdict.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    /// No answer (timeout, reset, unreachable).
    #[error("no answer")]
    NoAnswer,
    /// An answer with another status than 200.
    #[error("answered {0}")]
    Status(u16),
    /// A 200 whose body is not the contract's.
    #[error("unreadable answer: {0}")]
    Body(String),
}

/// The webhook's request body.
pub fn webhook_body(r: &CheckRequest<'_>) -> Vec<u8> {
    serde_json::to_vec(r).unwrap_or_default()
}

#[derive(Deserialize)]
struct WebhookAnswer {
    action: String,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    texts: Option<Vec<String>>,
}

/// Reads a webhook's answer to a request of `sent` texts.
pub fn parse_webhook(status: Option<u16>, body: &[u8], sent: usize) -> Result<Verdict, CheckError> {
    ok(status)?;
    let answer: WebhookAnswer = serde_json::from_slice(body).map_err(|e| CheckError::Body(e.to_string()))?;
    match (answer.action.as_str(), answer.texts) {
        ("allow", _) => Ok(Verdict::Allow),
        ("block", _) => Ok(Verdict::Block(answer.reason.map(|r| bounded(&r)))),
        ("rewrite", Some(texts)) if texts.len() == sent => Ok(Verdict::Rewrite(texts)),
        ("rewrite", Some(texts)) => Err(CheckError::Body(format!("rewrite with {} texts for {sent}", texts.len()))),
        ("rewrite", None) => Err(CheckError::Body("rewrite without texts".into())),
        (other, _) => Err(CheckError::Body(format!("unknown action {other:?}"))),
    }
}

/// A moderation request: `{"input": [texts], "model"?}`.
pub fn moderation_body(model: Option<&str>, texts: &[String]) -> Vec<u8> {
    #[derive(Serialize)]
    struct Body<'a> {
        input: &'a [String],
        #[serde(skip_serializing_if = "Option::is_none")]
        model: Option<&'a str>,
    }
    serde_json::to_vec(&Body { input: texts, model }).unwrap_or_default()
}

#[derive(Deserialize)]
struct ModerationAnswer {
    results: Vec<ModerationResult>,
}

#[derive(Deserialize)]
struct ModerationResult {
    flagged: bool,
    #[serde(default)]
    categories: serde_json::Map<String, serde_json::Value>,
}

/// Reads a moderation answer: blocked when any result is flagged, naming its categories.
pub fn parse_moderation(status: Option<u16>, body: &[u8]) -> Result<Verdict, CheckError> {
    ok(status)?;
    let answer: ModerationAnswer = serde_json::from_slice(body).map_err(|e| CheckError::Body(e.to_string()))?;
    let mut categories: Vec<&str> = Vec::new();
    let mut flagged = false;
    for r in answer.results.iter().filter(|r| r.flagged) {
        flagged = true;
        for (name, _) in r.categories.iter().filter(|(_, v)| v.as_bool() == Some(true)) {
            if !categories.contains(&name.as_str()) {
                categories.push(name);
            }
        }
    }
    if !flagged {
        return Ok(Verdict::Allow);
    }
    let reason = (!categories.is_empty()).then(|| bounded(&format!("flagged: {}", categories.join(", "))));
    Ok(Verdict::Block(reason))
}

fn ok(status: Option<u16>) -> Result<(), CheckError> {
    match status {
        None => Err(CheckError::NoAnswer),
        Some(200) => Ok(()),
        Some(other) => Err(CheckError::Status(other)),
    }
}

/// A reason shown to callers: at most 200 characters of it.
fn bounded(reason: &str) -> String {
    reason.chars().take(200).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webhook_answers_are_read_strictly() {
        assert_eq!(parse_webhook(Some(200), br#"{"action":"allow"}"#, 2), Ok(Verdict::Allow));
        assert_eq!(
            parse_webhook(Some(200), br#"{"action":"block","reason":"no"}"#, 2),
            Ok(Verdict::Block(Some("no".into())))
        );
        assert_eq!(
            parse_webhook(Some(200), br#"{"action":"rewrite","texts":["a","b"]}"#, 2),
            Ok(Verdict::Rewrite(vec!["a".into(), "b".into()]))
        );
        assert!(parse_webhook(Some(200), br#"{"action":"rewrite","texts":["a"]}"#, 2).is_err());
        assert!(parse_webhook(Some(200), br#"{"action":"maybe"}"#, 2).is_err());
        assert_eq!(parse_webhook(Some(500), b"", 2), Err(CheckError::Status(500)));
        assert_eq!(parse_webhook(None, b"", 2), Err(CheckError::NoAnswer));
        assert!(parse_webhook(Some(200), b"not json", 2).is_err());
    }

    #[test]
    fn moderation_flags_name_their_categories() {
        let flagged = br#"{"id":"m","model":"x","results":[{"flagged":false,"categories":{"violence":false}},
            {"flagged":true,"categories":{"violence":true,"hate":false,"self-harm":true}}]}"#;
        let verdict = parse_moderation(Some(200), flagged);
        assert_eq!(verdict, Ok(Verdict::Block(Some("flagged: self-harm, violence".into()))));
        let clean = br#"{"results":[{"flagged":false,"categories":{}}]}"#;
        assert_eq!(parse_moderation(Some(200), clean), Ok(Verdict::Allow));
        let body = moderation_body(Some("omni"), &["a".into()]);
        assert_eq!(body, br#"{"input":["a"],"model":"omni"}"#);
    }
}
