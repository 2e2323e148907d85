//! The conversation of a Converse request: neutral messages as alternating `user` /
//! `assistant` turns of Converse content blocks (see the notes of [`super`]).

use serde_json::{json, Map, Value};

use super::super::ir::{Block, Image, Message, Role, ToolCall, ToolResult};
use super::super::json::{data_url, unsupported};
use super::super::TranslateError;
use super::{cache_point, tool_use_id};

/// Turns with same-role neighbours merged, the first one the user's. Blocks that carry nothing
/// (empty text, which Converse refuses) are left out, and so are turns left empty.
pub(super) fn encode(messages: &[Message]) -> Result<Vec<Value>, TranslateError> {
    let mut turns: Vec<(Role, Vec<Value>)> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let mut blocks = Vec::new();
        for (j, b) in m.content.iter().enumerate() {
            block(&format!("messages[{i}].content[{j}]"), b, &mut blocks)?;
        }
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((role, content)) if *role == m.role => content.extend(blocks),
            _ => turns.push((m.role, blocks)),
        }
    }
    if turns.first().is_some_and(|(role, _)| *role == Role::Assistant) {
        turns.insert(0, (Role::User, vec![json!({"text": "(continue)"})]));
    }
    Ok(turns
        .into_iter()
        .map(|(role, content)| json!({"role": if role == Role::User { "user" } else { "assistant" }, "content": content}))
        .collect())
}

/// Whether the conversation holds tool calls or results (Bedrock then requires `toolConfig`).
pub(super) fn has_tool_blocks(messages: &[Message]) -> bool {
    messages.iter().flat_map(|m| &m.content).any(|b| matches!(b, Block::ToolCall(_) | Block::ToolResult(_)))
}

/// Refuses a function name Converse does not accept (`[a-zA-Z0-9_-]{1,64}`).
pub(super) fn check_tool_name(name: &str, path: &str) -> Result<(), TranslateError> {
    let allowed = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'-';
    if (1..=64).contains(&name.len()) && name.bytes().all(allowed) {
        return Ok(());
    }
    let message = "a name of 1 to 64 letters, digits, `_` or `-` (the bedrock API's tool names)".to_string();
    Err(TranslateError::Invalid { param: path.to_string(), message: format!("expected {message}") })
}

/// One block (and the `cachePoint` after it, if it carries a breakpoint).
fn block(path: &str, b: &Block, out: &mut Vec<Value>) -> Result<(), TranslateError> {
    let cache = match b {
        Block::Text(t) if t.text.is_empty() => return Ok(()),
        Block::Text(t) => {
            out.push(json!({"text": t.text}));
            &t.cache
        }
        Block::Image(image) => {
            out.push(json!({"image": image_block(path, image)?}));
            match image {
                Image::Inline { cache, .. } | Image::Url { cache, .. } => cache,
            }
        }
        Block::ToolCall(c) => {
            out.push(tool_use(path, c)?);
            &None
        }
        Block::ToolResult(r) => {
            out.push(tool_result(path, r)?);
            &r.cache
        }
        Block::Thinking(t) => {
            let mut text = Map::new();
            text.insert("text".into(), json!(t.text));
            if let Some(sig) = &t.signature {
                text.insert("signature".into(), json!(sig));
            }
            out.push(json!({"reasoningContent": {"reasoningText": text}}));
            &None
        }
    };
    if let Some(cache) = cache {
        out.push(cache_point(cache, path)?);
    }
    Ok(())
}

/// An image as bytes: inline data, or a `data:` URL's; a remote URL is refused.
fn image_block(path: &str, image: &Image) -> Result<Value, TranslateError> {
    let (media_type, data) = match image {
        Image::Inline { media_type, data, .. } => (media_type.as_str(), data.as_str()),
        Image::Url { url, .. } => data_url(url).ok_or_else(|| unsupported(&format!("{path}.image_url")))?,
    };
    let format = match media_type.to_ascii_lowercase().as_str() {
        "image/png" => "png",
        "image/jpeg" | "image/jpg" => "jpeg",
        "image/gif" => "gif",
        "image/webp" => "webp",
        _ => return Err(unsupported(&format!("{path}.media_type"))),
    };
    Ok(json!({"format": format, "source": {"bytes": data}}))
}

fn tool_use(path: &str, c: &ToolCall) -> Result<Value, TranslateError> {
    check_tool_name(&c.name, &format!("{path}.name"))?;
    Ok(json!({"toolUse": {"toolUseId": tool_use_id(&c.id), "name": c.name, "input": c.arguments}}))
}

/// A result: its text and images, `status: "error"` when the tool failed.
fn tool_result(path: &str, r: &ToolResult) -> Result<Value, TranslateError> {
    let mut content = Vec::new();
    for (k, b) in r.content.iter().enumerate() {
        let at = format!("{path}.content[{k}]");
        match b {
            Block::Text(t) if t.text.is_empty() => {}
            Block::Text(t) => content.push(json!({"text": t.text})),
            Block::Image(image) => content.push(json!({"image": image_block(&at, image)?})),
            Block::ToolCall(_) | Block::ToolResult(_) | Block::Thinking(_) => return Err(unsupported(&at)),
        }
    }
    let mut result = Map::new();
    result.insert("toolUseId".into(), json!(tool_use_id(&r.id)));
    result.insert("content".into(), Value::Array(content));
    if r.is_error {
        result.insert("status".into(), json!("error"));
    }
    Ok(json!({"toolResult": result}))
}
