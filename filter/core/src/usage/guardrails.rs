//! [`GuardrailRecord`]: what the guardrails (PII detectors, webhooks, moderation) did to one
//! request, as its usage record carries it (`Record::guardrails`). It names rules and counts
//! matches; it never holds the matched text.

use serde::{Deserialize, Serialize};

/// What guardrails did to one request. Written only for requests a policy applied to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuardrailRecord {
    /// `policy/rule` that refused the request or ended the answer (never the matched text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked: Option<String>,
    /// Matches per rule and direction.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hits: Vec<GuardrailHit>,
    /// External checks (webhooks, moderation): their verdicts and latencies.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<GuardrailCheck>,
}

/// The matches of one rule in one direction.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuardrailHit {
    /// `policy/rule` that matched.
    pub rule: String,
    /// Where it matched: `input` (the request) or `output` (the answer).
    pub stage: String,
    /// What was done: `block`, `redact`, `mask` or `log`.
    pub action: String,
    /// How many matches.
    pub count: u32,
}

/// One external check (a webhook, a moderation call) and its verdict.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuardrailCheck {
    /// `policy/rule` that made the check.
    pub rule: String,
    /// What it checked: `input` (the request) or `output` (the answer).
    pub stage: String,
    /// Its verdict: `allow`, `block`, `rewrite` or `error`.
    pub verdict: String,
    /// How long it took, in milliseconds.
    pub latency_ms: u64,
}
