//! The pure logic of the response cache: what identifies a request ([`key`]), what the store
//! keeps ([`entry`]), how a streamed answer becomes one complete answer to keep
//! ([`assemble`]), and how a kept answer goes back to a client that asked for a stream
//! ([`replay`]).
//!
//! The store itself (proxy shared data, Redis), its clock and its policy are the filter's: an
//! entry is kept as one complete non-streamed answer in the client's dialect ([`Shape::Json`])
//! and served either as it is or replayed in the stream shape the client asked for, so one
//! entry answers streaming and non-streaming clients of the same family alike.

pub mod assemble;
mod canon;
pub mod entry;
pub mod key;
pub mod replay;
pub mod wire;

pub use assemble::Assembler;
pub use entry::{Entry, EntryError};
pub use key::{exact_key, semantic_parts, SemanticParts, Uncacheable};
pub use replay::{ReplayError, ReplayOptions};

/// How an answer travels to the client: one complete JSON body, or a stream in one of these
/// shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// A complete (non-streamed) answer body.
    Json,
    /// OpenAI `chat.completion.chunk` events, `data: [DONE]` at the end.
    ChatSse,
    /// Anthropic Messages events (`message_start` … `message_stop`).
    AnthropicSse,
    /// Gemini `streamGenerateContent?alt=sse`: `data: {GenerateContentResponse}` events.
    GeminiSse,
    /// Gemini `streamGenerateContent` without `alt=sse`: a JSON array of
    /// `GenerateContentResponse` objects.
    GeminiJsonArray,
    /// OpenAI Responses events (`response.created` … `response.completed`).
    ResponsesSse,
}

#[cfg(test)]
mod tests;
