//! The simulated model, dialect-neutral: what one generation request answers, before any
//! dialect renders it.
//!
//! Each dialect turns its request into an [`Ask`] (the conversation as `role: text` turns, the
//! output cap, stop sequences, tools, JSON output) and renders the [`Reply`]. So the same
//! text-only conversation gets the same text and the same token counts over OpenAI, Anthropic
//! and Gemini, which lets translation tests compare a translated answer with a direct one.
//!
//! Text comes from one of three sources: the tool-result mention ("The tool returned: ...")
//! when the last turn hands back tool results, JSON built from the requested output schema,
//! or the prompt-hashed words of [`text::completion_words`]; with `x-sim-echo-tools`, it is
//! the conversation's tool traffic instead ([`Traffic`]), and with `x-sim-echo-prompt` the
//! prompt itself ([`Knobs`]). The text is cut at the first stop sequence, then at the output
//! cap; its streamed deltas are whitespace-led words (one delta, one token) that concatenate to
//! the text exactly, or with `x-sim-chunk-chars` pieces of that many characters.

use serde_json::Value;

use super::error::SimError;
use super::text::{self, FinishReason};
use super::tools::{self, ToolCall, ToolChoice, ToolSpec, Traffic};

/// One turn of a conversation: a role (`system`, `user`, `assistant`, `tool`) and its text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Turn {
    /// Role as OpenAI spells it (Gemini's `model` is `assistant`).
    pub role: String,
    /// The turn's text parts joined by spaces.
    pub text: String,
}

impl Turn {
    /// A turn of `role` with `text`.
    pub fn new(role: &str, text: String) -> Self {
        Self { role: role.to_owned(), text }
    }
}

/// What a request asks of the simulated model.
#[derive(Clone, Debug, Default)]
pub struct Ask {
    /// What the output is derived from (see [`prompt`]).
    pub prompt: String,
    /// The request's output cap, if any.
    pub max_tokens: Option<u32>,
    /// Stop sequences; the text ends before the first one found.
    pub stop: Vec<String>,
    /// Declared tools, in order.
    pub tools: Vec<ToolSpec>,
    /// The request's tool choice.
    pub choice: ToolChoice,
    /// The text of the tool results when the last turn hands them back.
    pub tool_result: Option<String>,
    /// JSON output: `Some(schema)` (`null` when JSON without a schema is asked).
    pub json_schema: Option<Value>,
    /// With `x-sim-echo-tools`: the conversation's tool traffic, which a text answer is.
    pub echo: Option<Traffic>,
}

/// Per-request test knobs on how a text answer is made and cut (`x-sim-echo-prompt`,
/// `x-sim-chunk-chars`; read by `super::faults::knobs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Knobs {
    /// The text is the prompt as the sim reads it (the `role: text` lines of [`prompt`]), so
    /// a test sees what a gateway delivered; a tool call is still a tool call.
    pub echo_prompt: bool,
    /// Deltas of this many characters (the last one shorter) instead of words; still one
    /// token each.
    pub chunk_chars: Option<usize>,
}

/// Why a text answer ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ending {
    /// The text reached its natural end.
    Natural,
    /// The output cap cut it.
    Length,
    /// It stopped before this stop sequence.
    StopSequence(String),
}

/// The simulated model's answer.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// Text, as streamed deltas, and why it ended.
    Text {
        /// Whitespace-led words; concatenated, they are the text.
        deltas: Vec<String>,
        /// Why the text ended.
        ending: Ending,
    },
    /// A call of one declared tool.
    Tool(ToolCall),
}

impl Reply {
    /// Output tokens: one per text delta, or one per fragment of the call's arguments.
    pub fn tokens(&self) -> u32 {
        match self {
            Reply::Text { deltas, .. } => u32::try_from(deltas.len()).unwrap_or(u32::MAX),
            Reply::Tool(call) => call.tokens(),
        }
    }

    /// The whole text (empty for a tool call).
    pub fn text(&self) -> String {
        match self {
            Reply::Text { deltas, .. } => deltas.concat(),
            Reply::Tool(_) => String::new(),
        }
    }

    /// The engine's finish reason, as vLLM's metrics count it: only a cut by the cap is
    /// `length`; stop sequences and tool calls are `stop`.
    pub fn engine_reason(&self) -> FinishReason {
        match self {
            Reply::Text { ending: Ending::Length, .. } => FinishReason::Length,
            _ => FinishReason::Stop,
        }
    }
}

/// The hashed prompt and the prompt tokens of a conversation.
pub fn prompt(turns: &[Turn]) -> (String, u32) {
    let hashed: Vec<String> = turns.iter().map(|turn| format!("{}: {}", turn.role, turn.text)).collect();
    (hashed.join("\n"), text::chat_prompt_tokens(turns.iter().map(|turn| turn.text.as_str())))
}

/// The answer to `ask` without knobs (the handlers pass theirs to [`answer_with`]).
#[cfg(test)]
pub fn answer(ask: &Ask, natural_len: u32) -> Result<Reply, SimError> {
    answer_with(ask, natural_len, Knobs::default())
}

/// The answer to `ask` with a request's test [`Knobs`]; plain generated text has
/// `natural_len` tokens (`--output-tokens`).
///
/// # Errors
/// The tool choice names an undeclared tool.
pub fn answer_with(ask: &Ask, natural_len: u32, knobs: Knobs) -> Result<Reply, SimError> {
    if let Some(call) = tools::pick(&ask.tools, &ask.choice, ask.tool_result.is_some())? {
        return Ok(Reply::Tool(call));
    }
    let full = match (&ask.echo, &ask.tool_result, &ask.json_schema) {
        (Some(traffic), _, _) => traffic.text(),
        (None, _, _) if knobs.echo_prompt => ask.prompt.clone(),
        (None, Some(result), _) => format!("The tool returned: {result}"),
        (None, None, Some(schema)) => json_text(schema),
        (None, None, None) => text::completion_words(&ask.prompt, natural_len).join(" "),
    };
    Ok(cut(&full, &ask.stop, ask.max_tokens, knobs.chunk_chars))
}

/// JSON output: a sample of the schema, or `{}` when no schema was given.
fn json_text(schema: &Value) -> String {
    match tools::sample(schema) {
        Value::Null => "{}".to_owned(),
        value => value.to_string(),
    }
}

/// `full` cut at the earliest stop sequence, then at `max_tokens` deltas (words, or pieces of
/// `chunk_chars` characters).
fn cut(full: &str, stop: &[String], max_tokens: Option<u32>, chunk_chars: Option<usize>) -> Reply {
    let hit = stop
        .iter()
        .filter(|sequence| !sequence.is_empty())
        .filter_map(|sequence| full.find(sequence.as_str()).map(|at| (at, sequence)))
        .min_by_key(|(at, _)| *at);
    let (kept, mut ending) = match hit {
        Some((at, sequence)) => (&full[..at], Ending::StopSequence(sequence.clone())),
        None => (full, Ending::Natural),
    };
    let mut deltas = match chunk_chars {
        Some(n) => split_chars(kept, n),
        None => split_deltas(kept),
    };
    let cap = max_tokens.map_or(usize::MAX, |cap| usize::try_from(cap).unwrap_or(usize::MAX));
    if deltas.len() > cap {
        deltas.truncate(cap);
        ending = Ending::Length;
    }
    Reply::Text { deltas, ending }
}

/// `text` cut before every whitespace run that follows a non-space: `"a b  c"` is `["a",
/// " b", "  c"]`. The pieces concatenate to `text`.
pub fn split_deltas(text: &str) -> Vec<String> {
    let mut deltas = Vec::new();
    let mut current = String::new();
    let mut previous_was_word = false;
    for ch in text.chars() {
        if ch.is_whitespace() && previous_was_word {
            deltas.push(std::mem::take(&mut current));
        }
        previous_was_word = !ch.is_whitespace();
        current.push(ch);
    }
    if !current.is_empty() {
        deltas.push(current);
    }
    deltas
}

/// `text` cut into pieces of `n` characters (at least one), the last one shorter; they
/// concatenate to `text`.
pub fn split_chars(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(n.max(1)).map(|piece| piece.iter().collect()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ask(prompt: &str) -> Ask {
        Ask { prompt: prompt.into(), ..Ask::default() }
    }

    #[test]
    fn plain_text_matches_the_word_model() {
        let reply = answer(&ask("user: hi"), 6).unwrap();
        let words = text::completion_words("user: hi", 6);
        assert_eq!(reply.text(), words.join(" "));
        assert_eq!(reply.tokens(), 6);
        // Later words carry their leading space, so the deltas concatenate to the text.
        let expected: Vec<String> =
            words.iter().enumerate().map(|(i, w)| if i == 0 { w.to_string() } else { format!(" {w}") }).collect();
        assert_eq!(reply, Reply::Text { deltas: expected, ending: Ending::Natural });
        // A cap at or above the natural length does not cut.
        let uncut = answer(&Ask { max_tokens: Some(6), ..ask("user: hi") }, 6).unwrap();
        assert_eq!(uncut.engine_reason(), FinishReason::Stop);
    }

    #[test]
    fn cap_cuts_with_length_and_stop_sequence_comes_first() {
        let capped = answer(&Ask { max_tokens: Some(3), ..ask("p") }, 6).unwrap();
        assert_eq!((capped.tokens(), capped.engine_reason()), (3, FinishReason::Length));
        let words = text::completion_words("p", 6);
        let stop = vec!["zzz".to_owned(), format!(" {}", words[2])];
        let stopped = answer(&Ask { stop: stop.clone(), ..ask("p") }, 6).unwrap();
        assert_eq!(stopped.text(), words[..2].join(" "));
        assert!(matches!(stopped, Reply::Text { ending: Ending::StopSequence(ref s), .. } if *s == stop[1]));
        // A stop sequence beyond the cap: the cap wins.
        let both = answer(&Ask { stop, max_tokens: Some(1), ..ask("p") }, 6).unwrap();
        assert!(matches!(both, Reply::Text { ending: Ending::Length, .. }));
    }

    #[test]
    fn tool_results_and_json_output_shape_the_text() {
        let after = Ask { tool_result: Some("{\"temp\":21}".into()), ..ask("p") };
        assert_eq!(answer(&after, 6).unwrap().text(), "The tool returned: {\"temp\":21}");
        let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]});
        let json_out = Ask { json_schema: Some(schema), ..ask("p") };
        assert_eq!(answer(&json_out, 6).unwrap().text(), "{\"a\":1}");
        assert_eq!(answer(&Ask { json_schema: Some(Value::Null), ..ask("p") }, 6).unwrap().text(), "{}");
    }

    #[test]
    fn deltas_keep_the_text_exactly() {
        assert_eq!(split_deltas("a b  c "), ["a", " b", "  c", " "]);
        assert_eq!(split_deltas("  lead"), ["  lead"]);
        assert!(split_deltas("").is_empty());
        assert_eq!(split_chars("abcdefg", 3), ["abc", "def", "g"]);
        assert_eq!(split_chars("héé", 2), ["hé", "é"]);
        assert!(split_chars("", 4).is_empty());
    }

    #[test]
    fn knobs_echo_the_prompt_in_pieces() {
        let knobs = Knobs { echo_prompt: true, chunk_chars: Some(4) };
        let echoed = answer_with(&ask("user: a@b.example"), 6, knobs).unwrap();
        assert_eq!(echoed.text(), "user: a@b.example");
        assert_eq!(
            echoed,
            Reply::Text {
                deltas: ["user", ": a@", "b.ex", "ampl", "e"].map(String::from).to_vec(),
                ending: Ending::Natural,
            }
        );
        // The output cap counts pieces; stop sequences still cut.
        let capped = answer_with(&Ask { max_tokens: Some(2), ..ask("user: a@b.example") }, 6, knobs).unwrap();
        assert_eq!((capped.text().as_str(), capped.engine_reason()), ("user: a@", FinishReason::Length));
        let stopped = Ask { stop: vec!["@".into()], ..ask("user: a@b.example") };
        assert_eq!(answer_with(&stopped, 6, Knobs { echo_prompt: true, chunk_chars: None }).unwrap().text(), "user: a");
        // Tool traffic and tool calls come first.
        let tools = Ask { tools: vec![ToolSpec { name: "t".into(), schema: json!({}) }], ..ask("user: hi") };
        assert!(matches!(answer_with(&tools, 6, knobs).unwrap(), Reply::Tool(_)));
    }

    #[test]
    fn prompt_joins_roles_and_counts_overheads() {
        let turns = [Turn::new("system", "be brief".into()), Turn::new("user", "hi".into())];
        assert_eq!(prompt(&turns), ("system: be brief\nuser: hi".to_owned(), 2 + 4 + 1 + 4 + 3));
    }
}
