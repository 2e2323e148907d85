//! A small, tolerant reader of the Prometheus text exposition format (0.0.4), enough to pull
//! engine load out of a vLLM or SGLang `/metrics` page.
//!
//! Tolerant means: a line that is not a well-formed sample (a comment, a truncated line, a bad
//! label set, a value that is not a number) is skipped and the rest is still read; nothing here
//! panics or allocates more than the input's size, whatever the bytes. Label values are
//! unescaped (`\\`, `\"`, `\n`); timestamps are ignored.
//!
//! [`load`] then reads the load series: vLLM's `vllm:num_requests_running`,
//! `vllm:num_requests_waiting` and `vllm:kv_cache_usage_perc` (or the older
//! `vllm:gpu_cache_usage_perc` when the new one is absent), and SGLang's
//! `sglang:num_running_reqs`, `sglang:num_queue_reqs` and `sglang:token_usage`.

/// One sample line: metric name, labels and value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample<'a> {
    /// Metric name (`vllm:num_requests_running`).
    pub name: &'a str,
    /// Label names and unescaped values, in order.
    pub labels: Vec<(&'a str, String)>,
    /// The value (may be NaN or infinite, as the format allows).
    pub value: f64,
}

/// Every well-formed sample of `text`, in order; other lines are skipped.
pub fn samples(text: &str) -> impl Iterator<Item = Sample<'_>> {
    text.lines().filter_map(sample)
}

/// Parses one line, `None` when it is a comment, blank or malformed.
pub fn sample(line: &str) -> Option<Sample<'_>> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let end = line.find(|c: char| c == '{' || c.is_ascii_whitespace()).unwrap_or(line.len());
    let (name, mut rest) = line.split_at(end);
    if !valid_name(name) {
        return None;
    }
    let mut labels = Vec::new();
    if let Some(after) = rest.strip_prefix('{') {
        rest = label_set(after, &mut labels)?;
    }
    let value = rest.split_ascii_whitespace().next()?;
    Some(Sample { name, labels, value: number(value)? })
}

/// `[a-zA-Z_:][a-zA-Z0-9_:]*`.
fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// Reads `name="value",...}` into `labels`; returns what follows the closing brace.
fn label_set<'a>(mut rest: &'a str, labels: &mut Vec<(&'a str, String)>) -> Option<&'a str> {
    loop {
        rest = rest.trim_start();
        if let Some(after) = rest.strip_prefix('}') {
            return Some(after);
        }
        let eq = rest.find('=')?;
        let name = rest[..eq].trim();
        if !valid_name(name) {
            return None;
        }
        let (value, after) = quoted(rest[eq + 1..].trim_start())?;
        labels.push((name, value));
        rest = after.trim_start();
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
}

/// Reads `"..."` with escapes; returns the unescaped value and what follows the quote.
fn quoted(s: &str) -> Option<(String, &str)> {
    let body = s.strip_prefix('"')?;
    let mut value = String::new();
    let mut chars = body.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((value, &body[i + 1..])),
            '\\' => match chars.next()?.1 {
                'n' => value.push('\n'),
                other => value.push(other),
            },
            other => value.push(other),
        }
    }
    None
}

/// A sample value: a float, `NaN`, `+Inf` or `-Inf` (any case).
fn number(s: &str) -> Option<f64> {
    s.parse::<f64>().ok()
}

/// Engine load read from a metrics page; `None` where the page has no such series.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Load {
    /// Requests running, summed over the engine's models (and data-parallel engines).
    pub running: Option<f64>,
    /// Requests waiting, summed likewise.
    pub waiting: Option<f64>,
    /// KV-cache usage, 0..=1: the fullest of the engine's caches.
    pub kv_usage: Option<f64>,
}

impl Load {
    /// True when the page had none of the series (not a vLLM or SGLang engine).
    pub fn is_empty(&self) -> bool {
        self.running.is_none() && self.waiting.is_none() && self.kv_usage.is_none()
    }
}

/// Reads the load series of `text`. Non-finite and negative values are ignored.
pub fn load(text: &str) -> Load {
    let mut found = Found::default();
    for s in samples(text) {
        if !s.value.is_finite() || s.value < 0.0 {
            continue;
        }
        let slot = match s.name {
            "vllm:num_requests_running" | "sglang:num_running_reqs" => &mut found.running,
            "vllm:num_requests_waiting" | "sglang:num_queue_reqs" => &mut found.waiting,
            "vllm:kv_cache_usage_perc" | "sglang:token_usage" => &mut found.kv,
            "vllm:gpu_cache_usage_perc" => &mut found.old_kv,
            _ => continue,
        };
        combine(slot_kind(s.name), slot, s.value);
    }
    Load { running: found.running, waiting: found.waiting, kv_usage: found.kv.or(found.old_kv) }
}

/// Series values gathered so far.
#[derive(Default)]
struct Found {
    running: Option<f64>,
    waiting: Option<f64>,
    kv: Option<f64>,
    old_kv: Option<f64>,
}

/// How samples of one series combine across label sets.
#[derive(Clone, Copy)]
enum Combine {
    Sum,
    Max,
}

fn slot_kind(name: &str) -> Combine {
    if name.ends_with("_perc") || name.ends_with("token_usage") {
        Combine::Max
    } else {
        Combine::Sum
    }
}

fn combine(how: Combine, slot: &mut Option<f64>, value: f64) {
    *slot = Some(match (how, *slot) {
        (_, None) => value,
        (Combine::Sum, Some(v)) => v + value,
        (Combine::Max, Some(v)) => v.max(value),
    });
}

#[cfg(test)]
#[path = "prom_tests.rs"]
mod tests;
