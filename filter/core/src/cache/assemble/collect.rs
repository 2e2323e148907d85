//! Neutral stream [`Event`]s gathered back into one neutral [`Response`], the way a client
//! library joins the deltas it receives: consecutive text is one block, reasoning text joins
//! the open thinking block, a signature closes the thinking it follows, and each call's
//! argument fragments join into its JSON.

use serde_json::Value;

use crate::translate::ir::{Block, Finish, Response, Text, Thinking, ToolCall, Usage};
use crate::translate::stream::Event;

/// An answer being gathered.
#[derive(Debug, Default)]
pub(super) struct Collect {
    id: Option<String>,
    content: Vec<Block>,
    /// Per call: its stream index, its block's position, its argument text so far.
    calls: Vec<(usize, usize, String)>,
    finish: Option<Finish>,
    usage: Usage,
    /// The provider reported an error.
    pub(super) failed: bool,
    /// Bytes of text, reasoning and arguments held (for the caller's limit).
    pub(super) size: usize,
}

impl Collect {
    pub(super) fn event(&mut self, event: Event) {
        match event {
            Event::Start { id } => {
                self.id.get_or_insert(id);
            }
            Event::Text(text) => self.text(text),
            Event::Thinking(text) => self.thinking(text),
            Event::Signature(sig) => self.signature(sig),
            Event::ToolStart { index, id, name } => {
                self.calls.push((index, self.content.len(), String::new()));
                self.size += id.len() + name.len();
                self.content.push(Block::ToolCall(ToolCall { id, name, arguments: Value::Null }));
            }
            Event::ToolArgs { index, json } => {
                if let Some((_, _, args)) = self.calls.iter_mut().rev().find(|c| c.0 == index) {
                    self.size += json.len();
                    args.push_str(&json);
                }
            }
            Event::Finish(f) => self.finish = Some(f),
            Event::Usage(u) => {
                let into = &mut self.usage;
                into.input = into.input.max(u.input);
                into.output = into.output.max(u.output);
                into.cached = into.cached.max(u.cached);
                into.cache_write = into.cache_write.max(u.cache_write);
            }
            Event::Error(_) => self.failed = true,
        }
    }

    /// Whether a finish reason arrived.
    pub(super) fn finished(&self) -> bool {
        self.finish.is_some()
    }

    fn text(&mut self, text: String) {
        self.size += text.len();
        match self.content.last_mut() {
            Some(Block::Text(open)) => open.text.push_str(&text),
            _ => self.content.push(Block::Text(Text { text, cache: None })),
        }
    }

    fn thinking(&mut self, text: String) {
        self.size += text.len();
        match self.content.last_mut() {
            Some(Block::Thinking(open)) if open.signature.is_none() => open.text.push_str(&text),
            _ => self.content.push(Block::Thinking(Thinking { text, signature: None })),
        }
    }

    /// A signature belongs to the unsigned thinking just before it (Anthropic, Gemini thought
    /// parts); with none, it stands alone before what follows (a signed Gemini part), as
    /// [`crate::translate::gemini::decode_response`] reads it. A Gemini stream cannot tell a
    /// signed call right after unsigned thinking from signed thinking: it joins the thinking,
    /// as the buffered decoder joins a thought split over parts.
    fn signature(&mut self, sig: String) {
        self.size += sig.len();
        match self.content.last_mut() {
            Some(Block::Thinking(open)) if open.signature.is_none() => open.signature = Some(sig),
            _ => self.content.push(Block::Thinking(Thinking { text: String::new(), signature: Some(sig) })),
        }
    }

    /// The whole answer (`finish` when the stream gave none), or `None` when a call's arguments
    /// are not JSON (the client got them, but no complete answer can carry them: every
    /// dialect's carries them as JSON).
    pub(super) fn response(mut self, finish: Finish, model: String) -> Option<Response> {
        for (_, at, args) in self.calls {
            let arguments = serde_json::from_str::<Value>(if args.trim().is_empty() { "{}" } else { &args }).ok()?;
            if let Some(Block::ToolCall(call)) = self.content.get_mut(at) {
                call.arguments = arguments;
            }
        }
        let finish = self.finish.unwrap_or(finish);
        Some(Response { id: self.id.unwrap_or_default(), model, content: self.content, finish, usage: self.usage })
    }
}
