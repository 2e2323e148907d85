//! OpenAI chat completion chunks: `choices[].delta.content` and
//! `choices[].delta.tool_calls[].function.arguments` are the texts, one chain per choice and
//! per (choice, tool call). A choice's texts end at its `finish_reason` (in that chunk when it
//! carries the text, else in a chunk written just before it) or at `data: [DONE]`.

use serde_json::{json, Map, Value};

use super::{Event, Key, Run, Stop};

/// `Key::kind` of a choice's content (`a`: choice index).
const CONTENT: u8 = 0;
/// `Key::kind` of a tool call's arguments (`a`: choice index, `b`: call index).
const TOOL: u8 = 1;

/// Chat stream state.
#[derive(Debug, Default)]
pub(super) struct State {
    /// The first chunk's fields but its choices (id, model, created...), for chunks written here.
    template: Map<String, Value>,
}

impl State {
    pub(super) fn event(&mut self, run: &mut Run<'_, '_>, ev: &Event<'_>, out: &mut Vec<u8>) -> Result<(), Stop> {
        if ev.data.as_ref() == b"[DONE]" {
            self.flush(run, None, out)?;
            out.extend_from_slice(ev.raw);
            return Ok(());
        }
        let Some(mut chunk) = ev.json() else {
            out.extend_from_slice(ev.raw);
            return Ok(());
        };
        if self.template.is_empty() && chunk.get("choices").is_some_and(Value::is_array) {
            if let Some(fields) = chunk.as_object() {
                let keep = fields.iter().filter(|(k, _)| *k != "choices" && *k != "usage");
                self.template = keep.map(|(k, v)| (k.clone(), v.clone())).collect();
            }
        }
        let mut changed = false;
        let mut before = Vec::new();
        let choices = chunk.get_mut("choices").and_then(Value::as_array_mut).map(Vec::as_mut_slice).unwrap_or_default();
        for (pos, choice) in choices.iter_mut().enumerate() {
            let index = choice.get("index").and_then(Value::as_u64).map_or(pos, |i| i as usize);
            let finished = choice.get("finish_reason").is_some_and(|f| !f.is_null());
            let mut seen = Vec::new();
            if let Some(delta) = choice.get_mut("delta") {
                changed |= texts(run, index, finished, delta, &mut seen)?;
            }
            if finished {
                // The choice's other texts end here too: their held text goes just before.
                let rest: Vec<Key> = run.open().into_iter().filter(|k| k.a == index && !seen.contains(k)).collect();
                for key in rest {
                    self.flush_one(run, key, &mut before)?;
                }
            }
        }
        out.extend_from_slice(&before);
        if changed {
            ev.rewrite(&chunk, out);
        } else {
            out.extend_from_slice(ev.raw);
        }
        Ok(())
    }

    /// The stream ended without `[DONE]`: the held texts.
    pub(super) fn finish(&mut self, run: &mut Run<'_, '_>, out: &mut Vec<u8>) -> Result<(), Stop> {
        self.flush(run, None, out)
    }

    /// Ends every open text (of choice `only`, if given), each in a chunk of its own.
    fn flush(&mut self, run: &mut Run<'_, '_>, only: Option<usize>, out: &mut Vec<u8>) -> Result<(), Stop> {
        for key in run.open().into_iter().filter(|k| only.is_none_or(|c| k.a == c)) {
            self.flush_one(run, key, out)?;
        }
        Ok(())
    }

    /// Ends the text of `key`; writes what it held as a chunk.
    fn flush_one(&self, run: &mut Run<'_, '_>, key: Key, out: &mut Vec<u8>) -> Result<(), Stop> {
        let Some((_, text)) = run.flush(key)? else { return Ok(()) };
        if text.is_empty() {
            return Ok(());
        }
        let delta = match key.kind {
            TOOL => json!({"tool_calls": [{"index": key.b, "function": {"arguments": text}}]}),
            _ => json!({ "content": text }),
        };
        let mut chunk = self.template.clone();
        chunk.insert("choices".into(), json!([{"index": key.a, "delta": delta, "finish_reason": null}]));
        run.write(out, None, &Value::Object(chunk));
        Ok(())
    }
}

/// Runs a delta's texts through their chains (ending them when the choice `finished`); true
/// when one changed. `seen` gets the keys of the texts present.
fn texts(
    run: &mut Run<'_, '_>,
    index: usize,
    finished: bool,
    delta: &mut Value,
    seen: &mut Vec<Key>,
) -> Result<bool, Stop> {
    let mut changed = false;
    if let Some(Value::String(text)) = delta.get_mut("content") {
        let key = Key { kind: CONTENT, a: index, b: 0 };
        changed |= apply(run, key, 0, finished, text)?;
        seen.push(key);
    }
    let calls = delta.get_mut("tool_calls").and_then(Value::as_array_mut).map(Vec::as_mut_slice).unwrap_or_default();
    for (pos, call) in calls.iter_mut().enumerate() {
        let b = call.get("index").and_then(Value::as_u64).map_or(pos, |i| i as usize);
        if let Some(Value::String(args)) = call.get_mut("function").and_then(|f| f.get_mut("arguments")) {
            let key = Key { kind: TOOL, a: index, b };
            changed |= apply(run, key, 0, finished, args)?;
            seen.push(key);
        }
    }
    Ok(changed)
}

/// Replaces `text` with what the chain of `key` sends (ending the text when `last`); true when
/// that differs.
pub(super) fn apply(run: &mut Run<'_, '_>, key: Key, shape: u8, last: bool, text: &mut String) -> Result<bool, Stop> {
    let sent = if last { run.last(key, shape, text)? } else { run.text(key, shape, text)? };
    if sent == *text {
        return Ok(false);
    }
    *text = sent;
    Ok(true)
}
