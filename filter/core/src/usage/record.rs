//! [`Record`]: one request's usage as the filter reports it to the sidecar (`POST /v1/usage`,
//! one JSON object per line).

use serde::{Deserialize, Serialize};

use super::write::{push_field, push_str};
use super::{GuardrailRecord, Usage};

/// Status recorded when the client went away before the response finished (nginx's 499).
pub const STATUS_CLIENT_CLOSED: u16 = 499;

/// Usage of one request. Unknown fields are ignored on reading, so filters and sidecars of
/// neighbouring versions can exchange records.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Record {
    /// `x-request-id` of the request.
    pub request_id: String,
    /// Name of the virtual key; `None` on an open gateway.
    #[serde(default)]
    pub key: Option<String>,
    /// Names of the key's groups.
    #[serde(default)]
    pub groups: Vec<String>,
    /// The model name the client sent.
    pub model_requested: String,
    /// Provider that served the request.
    pub provider: String,
    /// Model id sent to the provider.
    pub upstream_model: String,
    /// HTTP status returned to the client ([`STATUS_CLIENT_CLOSED`] when it disconnected).
    pub status: u16,
    /// Prompt tokens, cached ones included.
    #[serde(default)]
    pub prompt_tokens: u64,
    /// Completion tokens.
    #[serde(default)]
    pub completion_tokens: u64,
    /// Cached prompt tokens.
    #[serde(default)]
    pub cached_tokens: u64,
    /// Cost in micro-USD; `None` when the model has no price (or usage was unknown).
    #[serde(default)]
    pub cost_micro_usd: Option<u64>,
    /// Time from request start to end of response, in milliseconds.
    pub latency_ms: u64,
    /// Time to first token, in milliseconds (streaming responses).
    #[serde(default)]
    pub ttft_ms: Option<u64>,
    /// Request start, Unix milliseconds.
    pub started_at_unix_ms: u64,
    /// Whether the response was streamed.
    #[serde(default)]
    pub streamed: bool,
    /// Whether the request was admitted by the limits (holds a reservation on its counters):
    /// the sidecar folds only such records into the cross-replica counters.
    #[serde(default)]
    pub admitted: bool,
    /// Whether the stream was cut for overrunning its limits (`overrun: cut`); the tokens are
    /// then what was delivered.
    #[serde(default)]
    pub cut: bool,
    /// The streamed answer did not run to its end (the client went away, the upstream failed
    /// or it was cut): the tokens are what was delivered, the provider's counts where it gave
    /// them, else estimated. Written only when true.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub partial: bool,
    /// Milliseconds the request waited in a flow-control queue. Written only when not 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub queued_ms: u64,
    /// Attempts abandoned before this one to fail over (`ferrogate serve`; the request took
    /// `retries + 1` attempts). Written only when not 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retries: u64,
    /// The stored response (`previous_response_id`) or conversation the request continued.
    /// Written only when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continues: Option<String>,
    /// The gateway rebuilt the conversation from its store and sent it whole (a translated
    /// target, or an OpenAI one that did not make the whole chain): the prompt tokens are the
    /// provider's count of the whole conversation. Written only when true.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rebuilt: bool,
    /// What guardrails did to the request; absent when no policy applied. Written only when
    /// set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guardrails: Option<GuardrailRecord>,
    /// Answered from the response cache: no provider was called (`provider` is empty, the cost
    /// `None` or 0), the tokens are the cached answer's. Written only when true.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cached: bool,
    /// The client's `User-Agent` header, bounded ([`super::bounded_user_agent`]); `None` when
    /// it sent none (and in the records of filters that predate the field). Written only when
    /// set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_agent: Option<String>,
    /// The pool endpoint (`ip:port`) that served: the pick, or the endpoint an endpoint-picker
    /// gateway says served when its retry walked past the pick. `None` for a target without a
    /// pool (and in the records of filters that predate the field). Written only when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Record {
    /// Copies the token counts of `usage` into the record.
    pub fn set_usage(&mut self, usage: &Usage) {
        self.prompt_tokens = usage.prompt_tokens;
        self.completion_tokens = usage.completion_tokens;
        self.cached_tokens = usage.cached_tokens;
    }

    /// The token counts as a [`Usage`].
    pub fn usage(&self) -> Usage {
        Usage {
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.completion_tokens,
            cached_tokens: self.cached_tokens,
        }
    }

    /// The record as one line of JSON, newline included.
    pub fn to_json_line(&self) -> String {
        let mut line = Vec::with_capacity(256);
        self.view().write_json_line(&mut line);
        String::from_utf8(line).unwrap_or_default()
    }

    /// Parses newline-delimited records (blank lines skipped), e.g. a `POST /v1/usage` body.
    pub fn parse_lines(text: &[u8]) -> Result<Vec<Record>, LineError> {
        text.split(|b| *b == b'\n')
            .enumerate()
            .filter(|(_, l)| !l.iter().all(u8::is_ascii_whitespace))
            .map(|(i, l)| serde_json::from_slice(l).map_err(|source| LineError { line: i + 1, source }))
            .collect()
    }

    /// The record borrowed, in the shape it is written.
    pub fn view(&self) -> RecordView<'_> {
        RecordView {
            request_id: &self.request_id,
            key: self.key.as_deref(),
            groups: &self.groups,
            model_requested: &self.model_requested,
            provider: &self.provider,
            upstream_model: &self.upstream_model,
            status: self.status,
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.completion_tokens,
            cached_tokens: self.cached_tokens,
            cost_micro_usd: self.cost_micro_usd,
            latency_ms: self.latency_ms,
            ttft_ms: self.ttft_ms,
            started_at_unix_ms: self.started_at_unix_ms,
            streamed: self.streamed,
            admitted: self.admitted,
            cut: self.cut,
            partial: self.partial,
            queued_ms: self.queued_ms,
            retries: self.retries,
            continues: self.continues.as_deref(),
            rebuilt: self.rebuilt,
            guardrails: self.guardrails.as_ref(),
            cached: self.cached,
            user_agent: self.user_agent.as_deref(),
            endpoint: self.endpoint.as_deref(),
        }
    }
}

/// A [`Record`] made of borrowed parts, so the filter writes one per request without copying
/// its strings. Same fields, same JSON.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[allow(missing_docs)] // field for field the documented `Record`
pub struct RecordView<'a> {
    pub request_id: &'a str,
    pub key: Option<&'a str>,
    pub groups: &'a [String],
    pub model_requested: &'a str,
    pub provider: &'a str,
    pub upstream_model: &'a str,
    pub status: u16,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cached_tokens: u64,
    pub cost_micro_usd: Option<u64>,
    pub latency_ms: u64,
    pub ttft_ms: Option<u64>,
    pub started_at_unix_ms: u64,
    pub streamed: bool,
    pub admitted: bool,
    pub cut: bool,
    pub partial: bool,
    pub queued_ms: u64,
    pub retries: u64,
    pub continues: Option<&'a str>,
    pub rebuilt: bool,
    pub guardrails: Option<&'a GuardrailRecord>,
    pub cached: bool,
    pub user_agent: Option<&'a str>,
    pub endpoint: Option<&'a str>,
}

impl RecordView<'_> {
    /// Copies the token counts of `usage` into the record.
    pub fn set_usage(&mut self, usage: &Usage) {
        self.prompt_tokens = usage.prompt_tokens;
        self.completion_tokens = usage.completion_tokens;
        self.cached_tokens = usage.cached_tokens;
    }

    /// Appends the record as one line of JSON, newline included, to `out` (a batch buffer).
    /// Written by hand (the filter writes one per request): the same bytes serde would write
    /// for [`Record`], without escaping the constant field names every time.
    pub fn write_json_line(&self, out: &mut Vec<u8>) {
        // One reservation for the whole line: the appends below then never grow it one by one.
        out.reserve(self.line_len_estimate());
        out.extend_from_slice(b"{\"request_id\":");
        push_str(out, self.request_id);
        out.extend_from_slice(b",\"key\":");
        match self.key {
            Some(key) => push_str(out, key),
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"groups\":[");
        for (i, group) in self.groups.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            push_str(out, group);
        }
        out.extend_from_slice(b"],\"model_requested\":");
        push_str(out, self.model_requested);
        out.extend_from_slice(b",\"provider\":");
        push_str(out, self.provider);
        out.extend_from_slice(b",\"upstream_model\":");
        push_str(out, self.upstream_model);
        push_field(out, b",\"status\":", Some(u64::from(self.status)));
        push_field(out, b",\"prompt_tokens\":", Some(self.prompt_tokens));
        push_field(out, b",\"completion_tokens\":", Some(self.completion_tokens));
        push_field(out, b",\"cached_tokens\":", Some(self.cached_tokens));
        push_field(out, b",\"cost_micro_usd\":", self.cost_micro_usd);
        push_field(out, b",\"latency_ms\":", Some(self.latency_ms));
        push_field(out, b",\"ttft_ms\":", self.ttft_ms);
        push_field(out, b",\"started_at_unix_ms\":", Some(self.started_at_unix_ms));
        out.extend_from_slice(if self.streamed { b",\"streamed\":true" } else { b",\"streamed\":false" });
        out.extend_from_slice(if self.admitted { b",\"admitted\":true" } else { b",\"admitted\":false" });
        out.extend_from_slice(if self.cut { b",\"cut\":true" } else { b",\"cut\":false" });
        // Only an incomplete or a queued answer says so: the common line stays as it was.
        if self.partial {
            out.extend_from_slice(b",\"partial\":true");
        }
        if self.queued_ms > 0 {
            push_field(out, b",\"queued_ms\":", Some(self.queued_ms));
        }
        if self.retries > 0 {
            push_field(out, b",\"retries\":", Some(self.retries));
        }
        if let Some(id) = self.continues {
            out.extend_from_slice(b",\"continues\":");
            push_str(out, id);
        }
        if self.rebuilt {
            out.extend_from_slice(b",\"rebuilt\":true");
        }
        if let Some(guardrails) = self.guardrails {
            out.extend_from_slice(b",\"guardrails\":");
            push_guardrails(out, guardrails);
        }
        if self.cached {
            out.extend_from_slice(b",\"cached\":true");
        }
        if let Some(agent) = self.user_agent {
            out.extend_from_slice(b",\"user_agent\":");
            push_str(out, agent);
        }
        if let Some(endpoint) = self.endpoint {
            out.extend_from_slice(b",\"endpoint\":");
            push_str(out, endpoint);
        }
        out.extend_from_slice(b"}\n");
    }
}

impl RecordView<'_> {
    /// Bytes of the line when no string needs escapes: the strings, then 400 for the names,
    /// numbers and punctuation (at most about 395).
    fn line_len_estimate(&self) -> usize {
        let strings = [self.request_id, self.key.unwrap_or_default(), self.model_requested, self.provider]
            .iter()
            .chain(&[self.upstream_model, self.continues.unwrap_or_default(), self.user_agent.unwrap_or_default()])
            .chain(&[self.endpoint.unwrap_or_default()])
            .map(|s| s.len() + 3)
            .sum::<usize>();
        let groups = self.groups.iter().map(|g| g.len() + 3).sum::<usize>();
        strings + groups + 400 + self.guardrails.map_or(0, guardrails_len_estimate)
    }
}

/// The guardrails object as serde writes [`GuardrailRecord`]: fields in declaration order,
/// empty ones skipped.
fn push_guardrails(out: &mut Vec<u8>, g: &GuardrailRecord) {
    out.push(b'{');
    let mut sep: &[u8] = b"";
    if let Some(rule) = &g.blocked {
        out.extend_from_slice(b"\"blocked\":");
        push_str(out, rule);
        sep = b",";
    }
    if !g.hits.is_empty() {
        out.extend_from_slice(sep);
        out.extend_from_slice(b"\"hits\":[");
        for (i, hit) in g.hits.iter().enumerate() {
            out.extend_from_slice(if i == 0 { b"{\"rule\":" } else { b",{\"rule\":" });
            push_str(out, &hit.rule);
            out.extend_from_slice(b",\"stage\":");
            push_str(out, &hit.stage);
            out.extend_from_slice(b",\"action\":");
            push_str(out, &hit.action);
            push_field(out, b",\"count\":", Some(u64::from(hit.count)));
            out.push(b'}');
        }
        out.push(b']');
        sep = b",";
    }
    if !g.checks.is_empty() {
        out.extend_from_slice(sep);
        out.extend_from_slice(b"\"checks\":[");
        for (i, check) in g.checks.iter().enumerate() {
            out.extend_from_slice(if i == 0 { b"{\"rule\":" } else { b",{\"rule\":" });
            push_str(out, &check.rule);
            out.extend_from_slice(b",\"stage\":");
            push_str(out, &check.stage);
            out.extend_from_slice(b",\"verdict\":");
            push_str(out, &check.verdict);
            push_field(out, b",\"latency_ms\":", Some(check.latency_ms));
            out.push(b'}');
        }
        out.push(b']');
    }
    out.push(b'}');
}

/// Bytes of the guardrails member when no string needs escapes, names and numbers included.
fn guardrails_len_estimate(g: &GuardrailRecord) -> usize {
    let hits = g.hits.iter().map(|h| h.rule.len() + h.stage.len() + h.action.len() + 60).sum::<usize>();
    let checks = g.checks.iter().map(|c| c.rule.len() + c.stage.len() + c.verdict.len() + 80).sum::<usize>();
    g.blocked.as_ref().map_or(0, |b| b.len() + 14) + hits + checks + 40
}

/// A line of a record batch that is not a record.
#[derive(Debug, thiserror::Error)]
#[error("line {line}: {source}")]
pub struct LineError {
    /// 1-based line number in the batch.
    pub line: usize,
    /// What is wrong with it.
    pub source: serde_json::Error,
}
