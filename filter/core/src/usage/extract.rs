//! Per-dialect usage extraction from a whole body, one SSE event's data, or a bounded tail.
//!
//! Typed serde structs read only the usage fields; everything else is skipped without building
//! a DOM.

use serde::de::IgnoredAny;
use serde::Deserialize;

use super::converse::CvUsage;
use super::counts::{self, Quick};
use super::json::{escaped_quote, find, object_value_after_key, rfind, top_level_object, value_end};
use super::{Usage, UsageDialect};

/// OpenAI usage; the `input_*` aliases are the Responses API spelling.
#[derive(Debug, Default, Deserialize)]
struct OaUsage {
    #[serde(alias = "input_tokens")]
    prompt_tokens: Option<u64>,
    #[serde(alias = "output_tokens")]
    completion_tokens: Option<u64>,
    #[serde(alias = "input_tokens_details")]
    prompt_tokens_details: Option<OaDetails>,
}

#[derive(Debug, Default, Deserialize)]
struct OaDetails {
    cached_tokens: Option<u64>,
}

impl OaUsage {
    fn usage(&self) -> Usage {
        let details = self.prompt_tokens_details.as_ref();
        Usage {
            prompt_tokens: self.prompt_tokens.unwrap_or(0),
            completion_tokens: self.completion_tokens.unwrap_or(0),
            cached_tokens: details.and_then(|d| d.cached_tokens).unwrap_or(0),
        }
    }
}

/// A chat/completions chunk or body, or a Responses API event (`response.usage`).
#[derive(Debug, Deserialize)]
struct OaObject {
    usage: Option<OaUsage>,
    choices: Option<Vec<IgnoredAny>>,
    response: Option<OaResponse>,
    /// Groq's final stream chunk carries its usage here (with its timings).
    x_groq: Option<OaResponse>,
}

#[derive(Debug, Deserialize)]
struct OaResponse {
    usage: Option<OaUsage>,
}

/// Anthropic usage; counts are cumulative, so a later event's fields replace earlier ones.
#[derive(Debug, Default, Clone, Copy, Deserialize)]
pub(crate) struct AnUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
}

impl AnUsage {
    fn merge(&mut self, later: &AnUsage) {
        let keep = |old: &mut Option<u64>, new: Option<u64>| *old = new.or(*old);
        keep(&mut self.input_tokens, later.input_tokens);
        keep(&mut self.output_tokens, later.output_tokens);
        keep(&mut self.cache_read_input_tokens, later.cache_read_input_tokens);
        keep(&mut self.cache_creation_input_tokens, later.cache_creation_input_tokens);
    }

    fn usage(&self) -> Usage {
        let read = self.cache_read_input_tokens.unwrap_or(0);
        let write = self.cache_creation_input_tokens.unwrap_or(0);
        Usage {
            prompt_tokens: self.input_tokens.unwrap_or(0).saturating_add(read).saturating_add(write),
            completion_tokens: self.output_tokens.unwrap_or(0),
            cached_tokens: read,
        }
    }
}

/// `message_start` (`message.usage`), `message_delta` (`usage`) or a whole Messages body.
#[derive(Debug, Deserialize)]
struct AnObject {
    usage: Option<AnUsage>,
    message: Option<AnMessage>,
}

#[derive(Debug, Deserialize)]
struct AnMessage {
    usage: Option<AnUsage>,
}

/// Gemini usage; `promptTokenCount` already includes the cached content.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct GemUsage {
    prompt_token_count: Option<u64>,
    candidates_token_count: Option<u64>,
    cached_content_token_count: Option<u64>,
    thoughts_token_count: Option<u64>,
    tool_use_prompt_token_count: Option<u64>,
}

impl GemUsage {
    fn usage(&self) -> Usage {
        let n = |v: Option<u64>| v.unwrap_or(0);
        Usage {
            prompt_tokens: n(self.prompt_token_count).saturating_add(n(self.tool_use_prompt_token_count)),
            completion_tokens: n(self.candidates_token_count).saturating_add(n(self.thoughts_token_count)),
            cached_tokens: n(self.cached_content_token_count),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct GemObject {
    usage_metadata: Option<GemUsage>,
}

/// Usage seen so far in one response.
#[derive(Debug, Default)]
pub(crate) struct Acc {
    /// OpenAI / Gemini: the last usage object wins.
    last: Option<Usage>,
    /// Anthropic: fields merged across `message_start` and `message_delta`.
    anthropic: Option<AnUsage>,
}

impl Acc {
    /// The usage found, if any.
    pub fn result(&self) -> Option<Usage> {
        self.anthropic.as_ref().map(AnUsage::usage).or(self.last)
    }

    fn anthropic(&mut self, u: &AnUsage) {
        self.anthropic.get_or_insert_with(AnUsage::default).merge(u);
    }
}

/// What one parsed object held.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Seen {
    /// It carried usage.
    pub usage: bool,
    /// It was an OpenAI chunk with `"choices": []` (the `include_usage` chunk).
    pub empty_choices: bool,
}

/// Reads usage from one JSON object (a whole body or one SSE event's data). Not JSON: nothing.
pub(crate) fn object(dialect: UsageDialect, data: &[u8], acc: &mut Acc) -> Seen {
    match dialect {
        UsageDialect::OpenAi => {
            let Ok(o) = serde_json::from_slice::<OaObject>(data) else { return Seen::default() };
            let usage = o.usage.or(o.response.and_then(|r| r.usage)).or(o.x_groq.and_then(|g| g.usage));
            if let Some(u) = &usage {
                acc.last = Some(u.usage());
            }
            Seen { usage: usage.is_some(), empty_choices: o.choices.is_some_and(|c| c.is_empty()) }
        }
        UsageDialect::Anthropic => {
            let Ok(o) = serde_json::from_slice::<AnObject>(data) else { return Seen::default() };
            let usage = o.usage.or(o.message.and_then(|m| m.usage));
            if let Some(u) = &usage {
                acc.anthropic(u);
            }
            Seen { usage: usage.is_some(), empty_choices: false }
        }
        UsageDialect::Gemini => gemini(data, acc),
        UsageDialect::Converse => Seen { usage: super::converse::object(data, acc), empty_choices: false },
    }
}

/// A Gemini body is one response object, or (streaming without `alt=sse`) an array of them.
fn gemini(data: &[u8], acc: &mut Acc) -> Seen {
    let first = data.iter().find(|b| !b.is_ascii_whitespace());
    let objects = if first == Some(&b'[') {
        serde_json::from_slice::<Vec<GemObject>>(data).unwrap_or_default()
    } else {
        serde_json::from_slice::<GemObject>(data).map(|o| vec![o]).unwrap_or_default()
    };
    let last = objects.iter().rev().find_map(|o| o.usage_metadata.as_ref());
    if let Some(u) = last {
        acc.last = Some(u.usage());
    }
    Seen { usage: last.is_some(), empty_choices: false }
}

/// The usage key each dialect writes.
fn usage_key(dialect: UsageDialect) -> &'static [u8] {
    match dialect {
        UsageDialect::Gemini => b"\"usageMetadata\"",
        UsageDialect::OpenAi | UsageDialect::Anthropic | UsageDialect::Converse => b"\"usage\"",
    }
}

/// Reads the last usage object in a tail of a body (bytes before it may be cut mid-token), or
/// in a whole body, where the top-level usage is the last one written.
pub(crate) fn tail(dialect: UsageDialect, tail: &[u8], acc: &mut Acc) -> bool {
    let key = usage_key(dialect);
    // Last occurrence first: usage sits at the end; earlier hits are tried if it is cut short.
    let mut before = tail.len();
    while let Some(at) = rfind(tail, key, before) {
        before = at;
        if escaped_quote(tail, at) {
            continue;
        }
        let Some(open) = object_value_after_key(tail, at + key.len()) else { continue };
        let value = tail.get(open..).unwrap_or_default();
        if tail_value(dialect, value, acc) {
            return true;
        }
    }
    false
}

/// Reads usage from a whole body's top-level usage member alone, skipping everything else
/// without parsing it; false when there is none the quick way (the caller parses in full).
pub(crate) fn top_level(dialect: UsageDialect, body: &[u8], acc: &mut Acc) -> bool {
    let key = usage_key(dialect);
    let name = key.get(1..key.len().saturating_sub(1)).unwrap_or_default();
    match top_level_object(body, name) {
        Some(at) => tail_value(dialect, body.get(at..).unwrap_or_default(), acc),
        None => false,
    }
}

/// Reads usage from a whole body whose last top-level member is the usage object, where
/// OpenAI and Anthropic write it: found from the end, nothing before it read. False when the
/// body is laid out otherwise (the caller then scans it).
pub(crate) fn last_member(dialect: UsageDialect, body: &[u8], acc: &mut Acc) -> bool {
    let key = usage_key(dialect);
    let Some(at) = rfind(body, key, body.len()) else { return false };
    // An unescaped `"usage"` followed by a colon is a key in valid JSON, never string content.
    if escaped_quote(body, at) {
        return false;
    }
    let Some(open) = object_value_after_key(body, at + key.len()) else { return false };
    let value = body.get(open..).unwrap_or_default();
    let quick = quick_value(dialect, value);
    let Some(len) = quick.as_ref().map(|q| q.1).or_else(|| Some(value_end(body, open)? - open)) else {
        return false;
    };
    // Only the closing brace of the top-level object may follow: the member is then one of
    // its members, and the last one.
    let mut rest = value.get(len..).unwrap_or_default().iter().filter(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'));
    if rest.next() != Some(&b'}') || rest.next().is_some() {
        return false;
    }
    match quick {
        Some((found, _)) => {
            found.add_to(acc);
            true
        }
        None => serde_value(dialect, value.get(..len).unwrap_or_default(), acc),
    }
}

/// Parses the first JSON value of `bytes` (trailing bytes ignored) as the dialect's usage:
/// the plain case without serde ([`counts`]), anything else with it.
fn tail_value(dialect: UsageDialect, bytes: &[u8], acc: &mut Acc) -> bool {
    match quick_value(dialect, bytes) {
        Some((found, _)) => {
            found.add_to(acc);
            true
        }
        None => serde_value(dialect, bytes, acc),
    }
}

/// A usage object read by [`quick_value`].
pub(crate) enum Found {
    /// OpenAI or Gemini: replaces what came before.
    Last(Usage),
    /// Anthropic: merged into what came before.
    Anthropic(AnUsage),
}

impl Found {
    pub(crate) fn add_to(&self, acc: &mut Acc) {
        match self {
            Found::Last(u) => acc.last = Some(*u),
            Found::Anthropic(u) => acc.anthropic(u),
        }
    }
}

/// The dialect's usage object at the start of `bytes` read by [`counts::quick`], and its
/// length; `None` when serde has to decide.
pub(crate) fn quick_value(dialect: UsageDialect, bytes: &[u8]) -> Option<(Found, usize)> {
    let (counts, len) = counts::quick(dialect, bytes)?;
    let found = match counts {
        Quick::OpenAi([prompt_tokens, completion_tokens, cached_tokens]) => {
            let details = Some(OaDetails { cached_tokens });
            Found::Last(OaUsage { prompt_tokens, completion_tokens, prompt_tokens_details: details }.usage())
        }
        Quick::Anthropic([input_tokens, output_tokens, cache_read_input_tokens, cache_creation_input_tokens]) => {
            Found::Anthropic(AnUsage {
                input_tokens,
                output_tokens,
                cache_read_input_tokens,
                cache_creation_input_tokens,
            })
        }
        Quick::Gemini([prompt, candidates, cached, thoughts, tool_use]) => Found::Last(
            GemUsage {
                prompt_token_count: prompt,
                candidates_token_count: candidates,
                cached_content_token_count: cached,
                thoughts_token_count: thoughts,
                tool_use_prompt_token_count: tool_use,
            }
            .usage(),
        ),
        Quick::Converse([input_tokens, output_tokens, cache_read_input_tokens, cache_write_input_tokens]) => {
            let u = CvUsage { input_tokens, output_tokens, cache_read_input_tokens, cache_write_input_tokens };
            Found::Last(u.usage())
        }
    };
    Some((found, len))
}

/// [`tail_value`] by serde.
pub(crate) fn serde_value(dialect: UsageDialect, bytes: &[u8], acc: &mut Acc) -> bool {
    fn first<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Option<T> {
        serde_json::Deserializer::from_slice(bytes).into_iter::<T>().next()?.ok()
    }
    match dialect {
        UsageDialect::OpenAi => first::<OaUsage>(bytes).map(|u| acc.last = Some(u.usage())).is_some(),
        UsageDialect::Anthropic => first::<AnUsage>(bytes).map(|u| acc.anthropic(&u)).is_some(),
        UsageDialect::Gemini => first::<GemUsage>(bytes).map(|u| acc.last = Some(u.usage())).is_some(),
        UsageDialect::Converse => first::<CvUsage>(bytes).map(|u| acc.last = Some(u.usage())).is_some(),
    }
}

/// Cheap check: does `bytes` contain a `"usage": {` (or `"usageMetadata": {`) object? Chunks with
/// `"usage": null` (every OpenAI chunk once `include_usage` is on) are not worth parsing.
pub(crate) fn has_usage_object(bytes: &[u8]) -> bool {
    let mut from = 0;
    while let Some(at) = find(bytes, b"\"usage", from) {
        let mut end = at + b"\"usage".len();
        if bytes.get(end..end + 8) == Some(b"Metadata".as_slice()) {
            end += 8;
        }
        if bytes.get(end) == Some(&b'"') && object_value_after_key(bytes, end + 1).is_some() {
            return true;
        }
        from = at + 1;
    }
    false
}

/// Cheap check: does this event carry generated output (for time to first token)? Role-only
/// deltas, `message_start` and pings do not.
pub(crate) fn is_token_event(dialect: UsageDialect, bytes: &[u8]) -> bool {
    // `"key": "x…"`: a string value with at least one character.
    let non_empty = |key: &[u8]| {
        let mut from = 0;
        while let Some(at) = find(bytes, key, from) {
            let rest = bytes.get(at + key.len()..).unwrap_or_default();
            let mut it = rest.iter().skip_while(|b| b.is_ascii_whitespace());
            if it.next() == Some(&b':') {
                let mut it = it.skip_while(|b| b.is_ascii_whitespace());
                if it.next() == Some(&b'"') && it.next().is_some_and(|&b| b != b'"') {
                    return true;
                }
            }
            from = at + 1;
        }
        false
    };
    match dialect {
        UsageDialect::OpenAi => {
            non_empty(b"\"content\"")
                || non_empty(b"\"text\"")
                || non_empty(b"\"reasoning_content\"")
                || find(bytes, b"\"tool_calls\"", 0).is_some()
                || find(bytes, b".delta\"", 0).is_some()
        }
        UsageDialect::Anthropic => find(bytes, b"\"content_block_delta\"", 0).is_some(),
        UsageDialect::Gemini => find(bytes, b"\"candidates\"", 0).is_some(),
        // A `contentBlockDelta` payload (streams are read frame by frame: `super::converse`).
        UsageDialect::Converse => find(bytes, b"\"delta\"", 0).is_some(),
    }
}
