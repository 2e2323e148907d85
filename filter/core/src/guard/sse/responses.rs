//! OpenAI Responses streams: `response.output_text.delta` (per `output_index` and
//! `content_index`) and `response.function_call_arguments.delta` (per `output_index`) carry
//! the texts. A text ends at its `.done` event: what was held goes in a delta event written
//! just before it. The events that repeat a whole text (`response.output_text.done`,
//! `response.function_call_arguments.done`, `response.content_part.done`,
//! `response.output_item.done`, `response.completed`, `response.incomplete`) are rebuilt from
//! the text the client actually received, so they never carry what the deltas redacted.
//!
//! Every event written here takes the `sequence_number` of the event it precedes, and every
//! later event's number is raised by one, so the numbers stay consecutive.
//!
//! Memory: the text received per output is kept until the end (the closing events repeat
//! it), as the translator keeps it: bounded by the answer's own size.

use serde_json::{json, Value};

use super::chat::apply;
use super::{Event, Key, Run, Stop};

/// `Key::kind` of an output text (`a`: output index, `b`: content index).
const TEXT: u8 = 0;
/// `Key::kind` of a call's arguments (`a`: output index).
const ARGS: u8 = 1;

/// What the client received of one text.
#[derive(Debug)]
struct Sent {
    key: Key,
    item_id: Value,
    text: String,
}

/// Responses stream state.
#[derive(Debug, Default)]
pub(super) struct State {
    /// Events inserted so far: added to every later `sequence_number`.
    shift: u64,
    /// The `sequence_number` the next event would carry.
    next: u64,
    sent: Vec<Sent>,
    /// The `response` of `response.created`, for `response.failed`.
    response: Option<Value>,
}

impl State {
    pub(super) fn event(&mut self, run: &mut Run<'_, '_>, ev: &Event<'_>, out: &mut Vec<u8>) -> Result<(), Stop> {
        let Some(mut data) = ev.json() else {
            out.extend_from_slice(ev.raw);
            return Ok(());
        };
        let kind = data.get("type").and_then(Value::as_str).unwrap_or_default().to_string();
        let number = data.get("sequence_number").and_then(Value::as_u64);
        if let Some(n) = number {
            // Events written before this one take its number (and the ones after it).
            self.next = n.saturating_add(self.shift);
        }
        let at = |data: &Value, field: &str| data.get(field).and_then(Value::as_u64).unwrap_or(0) as usize;
        let (output, content) = (at(&data, "output_index"), at(&data, "content_index"));
        let mut changed = match kind.as_str() {
            "response.created" => {
                self.response = data.get("response").cloned();
                false
            }
            "response.output_text.delta" => self.delta(run, Key { kind: TEXT, a: output, b: content }, &mut data)?,
            "response.function_call_arguments.delta" => {
                self.delta(run, Key { kind: ARGS, a: output, b: 0 }, &mut data)?
            }
            "response.output_text.done" => {
                let key = Key { kind: TEXT, a: output, b: content };
                self.flush(run, key, out)?;
                self.set(key, data.get_mut("text"))
            }
            "response.function_call_arguments.done" => {
                let key = Key { kind: ARGS, a: output, b: 0 };
                self.flush(run, key, out)?;
                self.set(key, data.get_mut("arguments"))
            }
            "response.content_part.done" => {
                let key = Key { kind: TEXT, a: output, b: content };
                self.flush(run, key, out)?;
                self.set(key, data.get_mut("part").and_then(|p| p.get_mut("text")))
            }
            "response.output_item.done" => {
                // Normally the item's texts ended at their own `.done` events already.
                for key in run.open().into_iter().filter(|k| k.a == output) {
                    self.flush(run, key, out)?;
                }
                data.get_mut("item").is_some_and(|item| self.item(output, item))
            }
            "response.completed" | "response.incomplete" => self.completed(run, &mut data, out)?,
            _ => false,
        };
        changed |= self.renumber(number, &mut data);
        if changed {
            ev.rewrite(&data, out);
        } else {
            out.extend_from_slice(ev.raw);
        }
        Ok(())
    }

    /// The stream ended early: the held texts, as delta events.
    pub(super) fn finish(&mut self, run: &mut Run<'_, '_>, out: &mut Vec<u8>) -> Result<(), Stop> {
        for key in run.open() {
            self.flush(run, key, out)?;
        }
        Ok(())
    }

    /// The data of `response.failed` naming `message`.
    pub(super) fn failed(&self, message: &str) -> Value {
        let mut response = self.response.clone().unwrap_or_else(|| json!({"object": "response", "output": []}));
        if let Some(fields) = response.as_object_mut() {
            fields.insert("status".into(), json!("failed"));
            fields.insert("error".into(), json!({"code": "guardrail_blocked", "message": message}));
        }
        json!({"type": "response.failed", "sequence_number": self.next, "response": response})
    }

    /// Redacts a delta event's `delta`; true when it changed.
    fn delta(&mut self, run: &mut Run<'_, '_>, key: Key, data: &mut Value) -> Result<bool, Stop> {
        let item_id = data.get("item_id").cloned().unwrap_or(Value::Null);
        let Some(Value::String(text)) = data.get_mut("delta") else { return Ok(false) };
        let changed = apply(run, key, 0, false, text)?;
        self.received(key, item_id, text);
        Ok(changed)
    }

    /// Appends `text` to what the client received of `key`.
    fn received(&mut self, key: Key, item_id: Value, text: &str) {
        match self.sent.iter_mut().find(|s| s.key == key) {
            Some(s) => s.text.push_str(text),
            None => self.sent.push(Sent { key, item_id, text: text.to_string() }),
        }
    }

    /// Ends the text of `key`: what it held, as a delta event before the current one.
    fn flush(&mut self, run: &mut Run<'_, '_>, key: Key, out: &mut Vec<u8>) -> Result<(), Stop> {
        let Some((_, text)) = run.flush(key)? else { return Ok(()) };
        if text.is_empty() {
            return Ok(());
        }
        let item_id = self.sent.iter().find(|s| s.key == key).map_or(Value::Null, |s| s.item_id.clone());
        self.received(key, item_id.clone(), &text);
        let (kind, mut data) = match key.kind {
            ARGS => ("response.function_call_arguments.delta", json!({"item_id": item_id, "output_index": key.a})),
            _ => {
                let ids = json!({"item_id": item_id, "output_index": key.a, "content_index": key.b, "logprobs": []});
                ("response.output_text.delta", ids)
            }
        };
        if let Some(fields) = data.as_object_mut() {
            fields.insert("type".into(), json!(kind));
            fields.insert("delta".into(), json!(text));
            fields.insert("sequence_number".into(), json!(self.next));
        }
        self.next += 1;
        self.shift += 1;
        run.write(out, Some(kind), &data);
        Ok(())
    }

    /// Puts what the client received of `key` in `slot` (a string); true when that changed it.
    fn set(&self, key: Key, slot: Option<&mut Value>) -> bool {
        let (Some(Value::String(old)), Some(sent)) = (slot, self.sent.iter().find(|s| s.key == key)) else {
            return false;
        };
        if *old == sent.text {
            return false;
        }
        old.clone_from(&sent.text);
        true
    }

    /// Rebuilds the texts of the output item at `output`; true when one changed.
    fn item(&self, output: usize, item: &mut Value) -> bool {
        match item.get("type").and_then(Value::as_str) {
            Some("function_call") => self.set(Key { kind: ARGS, a: output, b: 0 }, item.get_mut("arguments")),
            Some("message") => {
                let parts =
                    item.get_mut("content").and_then(Value::as_array_mut).map(Vec::as_mut_slice).unwrap_or_default();
                let mut changed = false;
                for (content, part) in parts.iter_mut().enumerate() {
                    if part.get("type").and_then(Value::as_str) == Some("output_text") {
                        changed |= self.set(Key { kind: TEXT, a: output, b: content }, part.get_mut("text"));
                    }
                }
                changed
            }
            _ => false,
        }
    }

    /// The closing event: ends any open text, then rebuilds every output item.
    fn completed(&mut self, run: &mut Run<'_, '_>, data: &mut Value, out: &mut Vec<u8>) -> Result<bool, Stop> {
        for key in run.open() {
            self.flush(run, key, out)?;
        }
        let output = data.get_mut("response").and_then(|r| r.get_mut("output")).and_then(Value::as_array_mut);
        let mut changed = false;
        for (index, item) in output.map(Vec::as_mut_slice).unwrap_or_default().iter_mut().enumerate() {
            changed |= self.item(index, item);
        }
        Ok(changed)
    }

    /// Raises the event's `sequence_number` (`number`) by the events inserted before it; true
    /// when it did.
    fn renumber(&mut self, number: Option<u64>, data: &mut Value) -> bool {
        let Some(n) = number else { return false };
        let now = n.saturating_add(self.shift);
        self.next = now.saturating_add(1);
        match data.get_mut("sequence_number") {
            Some(slot) if self.shift > 0 => {
                *slot = json!(now);
                true
            }
            _ => false,
        }
    }
}
