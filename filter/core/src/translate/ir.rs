//! The neutral form every dialect decodes into and encodes from: one conversation model rich
//! enough for the union of what OpenAI Chat, Anthropic Messages and Gemini carry, so a pair
//! of dialects never loses what both sides have because a third one lacks it.
//!
//! Only translated requests pass through here; same-dialect traffic is forwarded verbatim.
//! What a target cannot express is refused by that target's encoder with a
//! [`TranslateError::Unsupported`](super::TranslateError::Unsupported) naming the parameter,
//! never dropped.

use serde_json::Value;

/// A chat request in neutral form.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Request {
    /// Model id as the upstream should receive it (set by the router before encoding).
    pub model: String,
    /// System instructions, in order (OpenAI `system`/`developer` messages, Anthropic
    /// `system`, Gemini `systemInstruction`).
    pub system: Vec<Text>,
    /// The conversation, oldest first.
    pub messages: Vec<Message>,
    /// Functions the model may call.
    pub tools: Vec<Tool>,
    /// How the model must use the tools.
    pub tool_choice: Option<ToolChoice>,
    /// `false` asks for at most one tool call per turn.
    pub parallel_tool_calls: Option<bool>,
    /// Longest completion, in tokens.
    pub max_tokens: Option<u64>,
    /// Sampling temperature.
    pub temperature: Option<f64>,
    /// Nucleus sampling.
    pub top_p: Option<f64>,
    /// Top-k sampling (Anthropic, Gemini).
    pub top_k: Option<u64>,
    /// Stop sequences.
    pub stop: Vec<String>,
    /// Whether the answer streams.
    pub stream: bool,
    /// The client wants usage at the end of its stream (OpenAI `stream_options.include_usage`;
    /// Anthropic streams always carry it).
    pub stream_usage: bool,
    /// Structured output.
    pub output: Option<OutputFormat>,
    /// Sampling seed (OpenAI, Gemini).
    pub seed: Option<i64>,
    /// Penalties (OpenAI, Gemini).
    pub presence_penalty: Option<f64>,
    /// Penalties (OpenAI, Gemini).
    pub frequency_penalty: Option<f64>,
    /// End-user id, for the provider's abuse tracking.
    pub user: Option<String>,
    /// Extended thinking / reasoning.
    pub reasoning: Option<Reasoning>,
    /// The portable prompt-cache request (a top-level `cache_control` object from an OpenAI
    /// client), turned into Anthropic breakpoints by that encoder and refused by others.
    pub cache: Option<PortableCache>,
}

/// `"cache_control": {"enabled": true, "ttl": "5m" | "1h", "breakpoints": [...]}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortableCache {
    /// `5m` or `1h`.
    pub ttl: String,
    /// Where breakpoints go (default: the system prompt only).
    pub breakpoints: Vec<Breakpoint>,
}

/// A place a portable cache breakpoint marks: the end of that part of the prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Breakpoint {
    /// The last system block.
    System,
    /// The last tool definition.
    Tools,
    /// The last block of the last message.
    Messages,
}

/// Who speaks a message. Tool results travel in user messages, as in Anthropic and Gemini.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The caller (and tool results).
    User,
    /// The model.
    Assistant,
}

/// One turn.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// Speaker.
    pub role: Role,
    /// Content, in order.
    pub content: Vec<Block>,
}

/// Text with an optional prompt-cache breakpoint after it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Text {
    /// The text.
    pub text: String,
    /// Anthropic `cache_control` on this block (carried as written).
    pub cache: Option<Value>,
}

/// A piece of message content.
#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    /// Plain text.
    Text(Text),
    /// An image.
    Image(Image),
    /// A call the model made.
    ToolCall(ToolCall),
    /// The answer to a call.
    ToolResult(ToolResult),
    /// Visible reasoning.
    Thinking(Thinking),
}

/// Image content: inline bytes or a remote URL (never fetched by the gateway).
#[derive(Debug, Clone, PartialEq)]
pub enum Image {
    /// Base64 data and its media type.
    Inline {
        /// e.g. `image/png`.
        media_type: String,
        /// Base64, as received.
        data: String,
        /// Cache breakpoint.
        cache: Option<Value>,
    },
    /// A URL the provider fetches.
    Url {
        /// The URL.
        url: String,
        /// Cache breakpoint.
        cache: Option<Value>,
    },
}

/// A function call made by the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// Call id (Gemini has none: the encoder makes one).
    pub id: String,
    /// Function name.
    pub name: String,
    /// Arguments as a JSON object.
    pub arguments: Value,
}

/// The result of a call, in the next user turn.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    /// The call answered.
    pub id: String,
    /// Content (text and images).
    pub content: Vec<Block>,
    /// The tool failed.
    pub is_error: bool,
    /// Cache breakpoint.
    pub cache: Option<Value>,
}

/// Reasoning text the model showed, with the provider's signature when it has one.
#[derive(Debug, Clone, PartialEq)]
pub struct Thinking {
    /// The reasoning.
    pub text: String,
    /// Anthropic's signature (must go back unchanged in later turns).
    pub signature: Option<String>,
}

/// A function the model may call.
#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    /// Name.
    pub name: String,
    /// What it does.
    pub description: Option<String>,
    /// JSON Schema of its arguments.
    pub parameters: Value,
    /// Cache breakpoint.
    pub cache: Option<Value>,
}

/// Tool use policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides.
    Auto,
    /// No tool calls.
    None,
    /// At least one tool call.
    Required,
    /// This function.
    Named(String),
}

/// Structured output.
#[derive(Debug, Clone, PartialEq)]
pub enum OutputFormat {
    /// Any JSON object.
    JsonObject,
    /// JSON matching a schema.
    JsonSchema {
        /// Schema name (OpenAI requires one).
        name: String,
        /// The schema.
        schema: Value,
        /// OpenAI `strict`.
        strict: Option<bool>,
    },
}

/// Reasoning request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reasoning {
    /// A token budget (Anthropic `budget_tokens`, Gemini `thinkingBudget`).
    Budget(u64),
    /// An effort level (OpenAI `reasoning_effort`: `low`, `medium`, `high`, ...).
    Effort(String),
}

/// A complete (non-streamed) answer in neutral form.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Response {
    /// Provider's response id.
    pub id: String,
    /// Model that answered (as the provider names it).
    pub model: String,
    /// Content: text, thinking and tool calls, in order.
    pub content: Vec<Block>,
    /// Why generation stopped.
    pub finish: Finish,
    /// Token counts.
    pub usage: Usage,
}

/// Why generation stopped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Finish {
    /// Natural end.
    #[default]
    Stop,
    /// A stop sequence matched (which one, when the provider says).
    StopSequence(Option<String>),
    /// The token limit.
    Length,
    /// The model called tools.
    ToolCalls,
    /// A safety or content filter.
    ContentFilter,
}

/// Token counts of one answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Prompt tokens, cached ones included.
    pub input: u64,
    /// Completion tokens (reasoning included).
    pub output: u64,
    /// Prompt tokens read from the provider's cache.
    pub cached: u64,
    /// Prompt tokens written to the provider's cache (Anthropic).
    pub cache_write: u64,
}
