//! Anthropic message streams: `content_block_delta` events carry the texts, `delta.text` of a
//! `text_delta` or `delta.partial_json` of an `input_json_delta` (a tool call's input), one
//! chain per content block `index`. A block's text ends at its `content_block_stop` (what was
//! held goes in a `content_block_delta` written just before it); `message_delta`,
//! `message_stop` and the end of the stream end any block still open.

use serde_json::{json, Value};

use super::chat::apply;
use super::{Event, Key, Run, Stop};

/// `Key::kind` of a content block (`a`: its index).
const BLOCK: u8 = 0;
/// Chain shapes: the delta type to write.
const TEXT: u8 = 0;
const JSON: u8 = 1;

/// Anthropic stream state (the open blocks are the open chains).
#[derive(Debug, Default)]
pub(super) struct State;

impl State {
    pub(super) fn event(&mut self, run: &mut Run<'_, '_>, ev: &Event<'_>, out: &mut Vec<u8>) -> Result<(), Stop> {
        let Some(mut data) = ev.json() else {
            out.extend_from_slice(ev.raw);
            return Ok(());
        };
        let index = data.get("index").and_then(Value::as_u64).map_or(0, |i| i as usize);
        let key = Key { kind: BLOCK, a: index, b: 0 };
        let changed = match data.get("type").and_then(Value::as_str) {
            Some("content_block_delta") => delta(run, key, &mut data)?,
            Some("content_block_stop") => {
                flush(run, key, out)?;
                false
            }
            Some("message_delta" | "message_stop") => {
                for key in run.open() {
                    flush(run, key, out)?;
                }
                false
            }
            _ => false,
        };
        if changed {
            ev.rewrite(&data, out);
        } else {
            out.extend_from_slice(ev.raw);
        }
        Ok(())
    }

    /// The stream ended early: the held texts.
    pub(super) fn finish(&mut self, run: &mut Run<'_, '_>, out: &mut Vec<u8>) -> Result<(), Stop> {
        for key in run.open() {
            flush(run, key, out)?;
        }
        Ok(())
    }
}

/// Redacts the text of one `content_block_delta`; true when it changed.
fn delta(run: &mut Run<'_, '_>, key: Key, data: &mut Value) -> Result<bool, Stop> {
    let Some(delta) = data.get_mut("delta") else { return Ok(false) };
    let (field, shape) = match delta.get("type").and_then(Value::as_str) {
        Some("text_delta") => ("text", TEXT),
        Some("input_json_delta") => ("partial_json", JSON),
        _ => return Ok(false),
    };
    match delta.get_mut(field) {
        Some(Value::String(text)) => apply(run, key, shape, false, text),
        _ => Ok(false),
    }
}

/// Ends the block of `key`: what it held, as a `content_block_delta` of its type.
fn flush(run: &mut Run<'_, '_>, key: Key, out: &mut Vec<u8>) -> Result<(), Stop> {
    let Some((shape, text)) = run.flush(key)? else { return Ok(()) };
    if text.is_empty() {
        return Ok(());
    }
    let delta = match shape {
        JSON => json!({"type": "input_json_delta", "partial_json": text}),
        _ => json!({"type": "text_delta", "text": text}),
    };
    let data = json!({"type": "content_block_delta", "index": key.a, "delta": delta});
    run.write(out, Some("content_block_delta"), &data);
    Ok(())
}
