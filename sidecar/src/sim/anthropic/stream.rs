//! The streamed Messages answer: Anthropic's named SSE events in their documented order —
//! `message_start` (empty content, the input usage), `content_block_start`, `ping`, one
//! `content_block_delta` per token (`text_delta`, or `input_json_delta` fragments of a tool
//! call's input), `content_block_stop`, `message_delta` (stop reason, cumulative
//! `output_tokens`) and `message_stop`.

use serde_json::{json, Value};

use super::Answer;
use crate::sim::reply::Reply;
use crate::sim::stream::Frame;

/// The frames of `answer`'s event stream.
pub(super) fn frames(answer: &Answer) -> Vec<Frame> {
    // Anthropic reports the first output token already in `message_start`.
    let start = answer.message(json!([]), (Value::Null, Value::Null), answer.reply.tokens().min(1));
    let (block, deltas) = match &answer.reply {
        Reply::Tool(call) => {
            let block = json!({ "type": "tool_use", "id": answer.tool_use_id, "name": call.name, "input": {} });
            let deltas =
                call.fragments().into_iter().map(|part| json!({ "type": "input_json_delta", "partial_json": part }));
            (block, deltas.collect::<Vec<_>>())
        }
        Reply::Text { deltas, .. } => {
            let deltas = deltas.iter().map(|text| json!({ "type": "text_delta", "text": text }));
            (json!({ "type": "text", "text": "" }), deltas.collect())
        }
    };
    let (reason, sequence) = answer.stop();
    let mut frames = vec![
        Frame::event("message_start", &json!({ "type": "message_start", "message": start }), 0),
        Frame::event(
            "content_block_start",
            &json!({ "type": "content_block_start", "index": 0, "content_block": block }),
            0,
        ),
        Frame::event("ping", &json!({ "type": "ping" }), 0),
    ];
    frames.extend(deltas.into_iter().map(|delta| {
        Frame::event("content_block_delta", &json!({ "type": "content_block_delta", "index": 0, "delta": delta }), 1)
    }));
    let delta = json!({
        "type": "message_delta",
        "delta": { "stop_reason": reason, "stop_sequence": sequence },
        "usage": { "output_tokens": answer.reply.tokens() },
    });
    frames.extend([
        Frame::event("content_block_stop", &json!({ "type": "content_block_stop", "index": 0 }), 0),
        Frame::event("message_delta", &delta, 0),
        Frame::event("message_stop", &json!({ "type": "message_stop" }), 0),
    ]);
    frames
}
