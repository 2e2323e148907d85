//! Gemini streams (`streamGenerateContent?alt=sse`): every event is a whole
//! `GenerateContentResponse`; the text parts of `candidates[i].content.parts` are the texts,
//! one chain per candidate (thought parts are left as they are). A candidate's text ends in
//! the chunk that carries its `finishReason`: what was held is appended to that chunk's last
//! text part, or added as a part when it has none. A stream that ends without one gets a
//! chunk of its own. Function calls come whole: each string of their `args` is redacted as a
//! whole text.

use serde_json::{json, Map, Value};

use super::chat::apply;
use super::{Event, Key, Run, Stop};

/// `Key::kind` of a candidate's text (`a`: candidate index).
const CANDIDATE: u8 = 0;
/// `Key::kind` of one string of a whole function call's `args` (`a`: candidate, `b`: ordinal).
const CALL: u8 = 1;

/// Gemini stream state.
#[derive(Debug, Default)]
pub(super) struct State {
    /// The first chunk's `modelVersion` and `responseId`, for chunks written here.
    template: Map<String, Value>,
}

impl State {
    pub(super) fn event(&mut self, run: &mut Run<'_, '_>, ev: &Event<'_>, out: &mut Vec<u8>) -> Result<(), Stop> {
        let Some(mut chunk) = ev.json() else {
            out.extend_from_slice(ev.raw);
            return Ok(());
        };
        if self.template.is_empty() {
            for field in ["modelVersion", "responseId"] {
                if let Some(v) = chunk.get(field) {
                    self.template.insert(field.into(), v.clone());
                }
            }
        }
        let mut changed = false;
        let candidates =
            chunk.get_mut("candidates").and_then(Value::as_array_mut).map(Vec::as_mut_slice).unwrap_or_default();
        for (pos, candidate) in candidates.iter_mut().enumerate() {
            changed |= self.candidate(run, pos, candidate, out)?;
        }
        if changed {
            ev.rewrite(&chunk, out);
        } else {
            out.extend_from_slice(ev.raw);
        }
        Ok(())
    }

    /// Redacts one candidate's text parts; true when one changed. When the candidate finishes
    /// and has no text part to carry the held text, it goes in `part` or in a chunk before.
    fn candidate(
        &self,
        run: &mut Run<'_, '_>,
        pos: usize,
        candidate: &mut Value,
        out: &mut Vec<u8>,
    ) -> Result<bool, Stop> {
        let index = candidate.get("index").and_then(Value::as_u64).map_or(pos, |i| i as usize);
        let key = Key { kind: CANDIDATE, a: index, b: 0 };
        let finished = candidate.get("finishReason").is_some_and(Value::is_string);
        let parts = candidate.get_mut("content").and_then(|c| c.get_mut("parts")).and_then(Value::as_array_mut);
        let Some(parts) = parts else {
            if finished {
                self.flush(run, key, out)?;
            }
            return Ok(false);
        };
        let last_text = parts
            .iter()
            .rposition(|p| p.get("text").is_some_and(Value::is_string) && p.get("thought") != Some(&json!(true)));
        let mut changed = false;
        let mut strings = 0;
        for (j, part) in parts.iter_mut().enumerate() {
            if part.get("thought") == Some(&json!(true)) {
                continue;
            }
            if let Some(args) = part.get_mut("functionCall").and_then(|c| c.get_mut("args")) {
                changed |= call_args(run, index, args, &mut strings)?;
            }
            if let Some(Value::String(text)) = part.get_mut("text") {
                changed |= apply(run, key, 0, finished && Some(j) == last_text, text)?;
            }
        }
        if finished && last_text.is_none() {
            if let Some((_, held)) = run.flush(key)?.filter(|(_, t)| !t.is_empty()) {
                parts.push(json!({ "text": held }));
                changed = true;
            }
        }
        Ok(changed)
    }

    /// The stream ended without a `finishReason`: the held texts, in chunks of their own.
    pub(super) fn finish(&mut self, run: &mut Run<'_, '_>, out: &mut Vec<u8>) -> Result<(), Stop> {
        for key in run.open() {
            self.flush(run, key, out)?;
        }
        Ok(())
    }

    /// Ends the text of `key`: what it held, as a chunk of its own.
    fn flush(&self, run: &mut Run<'_, '_>, key: Key, out: &mut Vec<u8>) -> Result<(), Stop> {
        let Some((_, text)) = run.flush(key)? else { return Ok(()) };
        if text.is_empty() {
            return Ok(());
        }
        let mut chunk = self.template.clone();
        let content = json!({"role": "model", "parts": [{"text": text}]});
        chunk.insert("candidates".into(), json!([{"content": content, "index": key.a}]));
        run.write(out, None, &Value::Object(chunk));
        Ok(())
    }
}

/// Redacts every string of a function call's `args`: Gemini sends a call whole, so each string
/// is a whole text (numbered by `n`).
fn call_args(run: &mut Run<'_, '_>, index: usize, value: &mut Value, n: &mut usize) -> Result<bool, Stop> {
    match value {
        Value::String(text) => {
            let key = Key { kind: CALL, a: index, b: *n };
            *n += 1;
            apply(run, key, 0, true, text)
        }
        Value::Array(items) => {
            let mut changed = false;
            for item in items {
                changed |= call_args(run, index, item, n)?;
            }
            Ok(changed)
        }
        Value::Object(fields) => {
            let mut changed = false;
            for item in fields.values_mut() {
                changed |= call_args(run, index, item, n)?;
            }
            Ok(changed)
        }
        _ => Ok(false),
    }
}
