//! Translation between API dialects, for requests whose client and provider speak different
//! ones. Same-dialect traffic never comes here: it is forwarded verbatim.
//!
//! Every dialect has a decoder into the neutral form of [`ir`] and an encoder out of it, for
//! requests and for answers; a [`Pair`] (picked by [`pair`]) is one client dialect with one
//! provider dialect. The neutral form holds the union of what the dialects carry, so going
//! through it loses only what the target itself cannot express — and that is refused with a
//! 400 naming the parameter ([`TranslateError::Unsupported`]), never dropped silently. The
//! few documented exceptions (reasoning shown in earlier turns, OpenAI's image `detail` hint,
//! Anthropic citations) are listed in the README.
//!
//! Time is passed in (`created` of OpenAI answers); nothing here reads a clock.

use crate::config::ProviderKind;
use crate::error::ApiError;

pub mod anthropic;
pub mod converse;
pub mod count;
pub mod gemini;
pub mod ir;
mod json;
pub mod openai_chat;
pub mod responses;
pub mod stream;

/// Why a body could not be translated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TranslateError {
    /// Not JSON.
    #[error("the body is not valid JSON: {0}")]
    Json(String),
    /// A parameter of the wrong shape.
    #[error("invalid `{param}`: {message}")]
    Invalid {
        /// Path of the parameter, e.g. `messages[2].content[0].image_url`.
        param: String,
        /// What was expected.
        message: String,
    },
    /// A parameter the other dialect cannot express.
    #[error("`{param}` cannot be translated")]
    Unsupported {
        /// Path of the parameter.
        param: String,
    },
}

/// A client dialect the gateway translates from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inbound {
    /// OpenAI Chat Completions.
    OpenAiChat,
    /// Anthropic Messages.
    Anthropic,
    /// Gemini `generateContent`: the body names no model (it is in the URL), so the router
    /// uses [`Pair::request_for_model`].
    Gemini,
    /// OpenAI Responses (`POST /v1/responses`), stateless: see [`responses`].
    Responses,
}

/// A provider dialect the gateway translates to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outbound {
    /// Chat Completions (`openai`, `openai_compatible`).
    OpenAiChat,
    /// Messages (`anthropic`).
    Anthropic,
    /// `generateContent` (`gemini`).
    Gemini,
    /// AWS Bedrock's Converse / ConverseStream (see [`converse`]).
    Converse,
}

impl Outbound {
    /// The dialect a provider kind speaks, when this module can translate to it.
    pub fn of(kind: ProviderKind) -> Option<Outbound> {
        match kind {
            ProviderKind::OpenAi | ProviderKind::OpenAiCompatible => Some(Outbound::OpenAiChat),
            ProviderKind::Anthropic => Some(Outbound::Anthropic),
            ProviderKind::Gemini => Some(Outbound::Gemini),
            // Azure speaks OpenAI; Bedrock Converse; Vertex Gemini, except for its Anthropic
            // models (the router's `route::cloud::outbound` knows the model).
            ProviderKind::AzureOpenAi => Some(Outbound::OpenAiChat),
            ProviderKind::Vertex => Some(Outbound::Gemini),
            ProviderKind::Bedrock => Some(Outbound::Converse),
        }
    }

    /// The API path requests in this dialect go to. Gemini's and Converse's are only the
    /// prefix: the model and method follow it (see [`Outbound::upstream_path`]).
    pub fn path(self) -> &'static str {
        match self {
            Outbound::OpenAiChat => "/v1/chat/completions",
            Outbound::Anthropic => "/v1/messages",
            Outbound::Gemini => "/v1beta/models",
            Outbound::Converse => "/model",
        }
    }

    /// The whole API path for `model`: [`Outbound::path`], except that Gemini and Converse
    /// name the model and streaming in the path: `/v1beta/models/{model}:generateContent`, or
    /// `:streamGenerateContent?alt=sse` for server-sent events; `/model/{model}/converse`, or
    /// `/converse-stream` (an AWS event stream), the model id escaped by
    /// [`converse::escape_model_id`].
    pub fn upstream_path(self, model: &str, stream: bool) -> String {
        match (self, stream) {
            (Outbound::Gemini, false) => format!("/v1beta/models/{model}:generateContent"),
            (Outbound::Gemini, true) => format!("/v1beta/models/{model}:streamGenerateContent?alt=sse"),
            (Outbound::Converse, false) => format!("/model/{}/converse", converse::escape_model_id(model)),
            (Outbound::Converse, true) => format!("/model/{}/converse-stream", converse::escape_model_id(model)),
            _ => self.path().to_string(),
        }
    }

    /// The API's name in refusals.
    fn name(self) -> &'static str {
        match self {
            Outbound::OpenAiChat => "openai",
            Outbound::Anthropic => "anthropic",
            Outbound::Gemini => "gemini",
            Outbound::Converse => "bedrock",
        }
    }
}

/// One client dialect with one provider dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pair {
    /// The client's.
    pub inbound: Inbound,
    /// The provider's.
    pub outbound: Outbound,
}

/// The translator for a client dialect and a provider; `None` when they speak the same dialect
/// (forward verbatim) or the provider's dialect has no translator yet.
pub fn pair(inbound: Inbound, kind: ProviderKind) -> Option<Pair> {
    pair_to(inbound, Outbound::of(kind)?)
}

/// The translator from a client dialect to a provider dialect; `None` when they are the same.
pub fn pair_to(inbound: Inbound, outbound: Outbound) -> Option<Pair> {
    let same = matches!(
        (inbound, outbound),
        (Inbound::OpenAiChat, Outbound::OpenAiChat)
            | (Inbound::Anthropic, Outbound::Anthropic)
            | (Inbound::Gemini, Outbound::Gemini)
    );
    // Responses to a chat completions provider is a translation, `openai` included: whether an
    // `openai` provider could take `/v1/responses` verbatim is the router's call, not this one.
    (!same).then_some(Pair { inbound, outbound })
}

/// What a translated request's answer needs to be translated back.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Context {
    /// The model name the client asked for (reported back to it).
    pub model: String,
    /// Structured output was emulated with a forced tool (Anthropic targets).
    pub structured: bool,
    /// Whether the client asked for a stream.
    pub stream: bool,
    /// The client asked for usage at the end of its stream (OpenAI `stream_options`).
    pub stream_usage: bool,
    /// What a Responses answer says of the gateway's state (`crate::stored`): set by the
    /// filter, nothing kept from the translator.
    pub kept: Kept,
    /// The id of an answer whose provider gives none (Bedrock's Converse): set by the filter
    /// (the provider's request id, else the gateway's), so every answer has one.
    pub answer_id: String,
}

/// What a translated Responses answer echoes of the state the gateway keeps for it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Kept {
    /// The gateway stores the response, so it says `store: true`.
    pub store: bool,
    /// The stored response it continues.
    pub previous_response_id: Option<String>,
    /// The conversation its turn is appended to.
    pub conversation: Option<String>,
}

impl Pair {
    /// Translates a request body for the provider, which receives `upstream_model`.
    ///
    /// # Errors
    /// The body cannot be read in the client's dialect, or asks for what the provider's
    /// dialect cannot express.
    pub fn request(self, body: &[u8], upstream_model: &str) -> Result<(Vec<u8>, Context), TranslateError> {
        self.request_for_model(body, "", false, upstream_model)
    }

    /// [`Pair::request`] for a client whose URL, not body, names the model and asks for a
    /// stream (Gemini: `/v1beta/models/{asked_model}:generateContent`, `stream` for
    /// `:streamGenerateContent`). A non-empty `asked_model` replaces the body's model (so it
    /// is [`Context::model`]); `stream` adds to the body's. For the other dialects the body
    /// says both and [`Pair::request`] is enough.
    ///
    /// # Errors
    /// As [`Pair::request`].
    pub fn request_for_model(
        self,
        body: &[u8],
        asked_model: &str,
        stream: bool,
        upstream_model: &str,
    ) -> Result<(Vec<u8>, Context), TranslateError> {
        let mut req = match self.inbound {
            Inbound::OpenAiChat => openai_chat::decode_request(body)?,
            Inbound::Anthropic => anthropic::decode_request(body)?,
            Inbound::Gemini => gemini::decode_request(body)?,
            Inbound::Responses => responses::decode_request(body)?,
        };
        if !asked_model.is_empty() {
            req.model = asked_model.to_string();
        }
        req.stream |= stream;
        let ctx = Context {
            model: std::mem::replace(&mut req.model, upstream_model.to_string()),
            structured: self.outbound == Outbound::Anthropic && req.output.is_some(),
            stream: req.stream,
            stream_usage: req.stream_usage,
            kept: Kept::default(),
            answer_id: String::new(),
        };
        let out = self.encode(req).map_err(|e| match self.inbound {
            // Refusals name what the client sent.
            Inbound::Responses => responses::client_param(e, body),
            _ => e,
        })?;
        Ok((out, ctx))
    }

    /// The neutral request in the provider's dialect.
    fn encode(self, req: ir::Request) -> Result<Vec<u8>, TranslateError> {
        Ok(match self.outbound {
            Outbound::OpenAiChat => openai_chat::encode_request(&req)?,
            Outbound::Anthropic => anthropic::encode_request(&req)?,
            Outbound::Gemini => gemini::encode_request(&req)?,
            Outbound::Converse => converse::encode_request(&req)?,
        })
    }

    /// Translates a complete (non-streamed, successful) answer back to the client's dialect.
    /// `now_unix_secs` is the `created` time of OpenAI answers.
    ///
    /// # Errors
    /// The body is not an answer in the provider's dialect.
    pub fn response(self, body: &[u8], ctx: &Context, now_unix_secs: u64) -> Result<Vec<u8>, TranslateError> {
        let resp = match self.outbound {
            Outbound::OpenAiChat => openai_chat::decode_response(body)?,
            Outbound::Anthropic => anthropic::decode_response(body, ctx.structured)?,
            Outbound::Gemini => gemini::decode_response(body)?,
            Outbound::Converse => converse::decode_response(body)?,
        };
        let resp = if resp.id.is_empty() { ir::Response { id: ctx.answer_id.clone(), ..resp } } else { resp };
        Ok(match self.inbound {
            Inbound::OpenAiChat => openai_chat::encode_response(&resp, &ctx.model, now_unix_secs),
            Inbound::Anthropic => anthropic::encode_response(&resp, &ctx.model),
            Inbound::Gemini => gemini::encode_response(&resp, &ctx.model),
            Inbound::Responses => responses::encode_stored_response(&resp, &ctx.model, now_unix_secs, &ctx.kept),
        })
    }

    /// An upstream error answer (any non-2xx) in the client's dialect, status kept: the
    /// provider's message when its envelope has one, else the start of its body.
    pub fn error_body(self, status: u16, body: &[u8]) -> Vec<u8> {
        let parsed: Option<serde_json::Value> = serde_json::from_slice(body).ok();
        let message = parsed
            .as_ref()
            // Bedrock's envelope is `{"message"}`, or `{"Message"}` from its front door (auth).
            .and_then(|v| {
                v["error"]["message"].as_str().or_else(|| v["message"].as_str()).or_else(|| v["Message"].as_str())
            })
            .map(str::to_string)
            .unwrap_or_else(|| {
                let text = String::from_utf8_lossy(body);
                let end = text.char_indices().nth(500).map_or(text.len(), |(i, _)| i);
                format!("upstream answered {status}: {}", &text[..end])
            });
        let dialect = match self.inbound {
            Inbound::OpenAiChat | Inbound::Responses => crate::dialect::Dialect::OpenAi,
            Inbound::Anthropic => crate::dialect::Dialect::Anthropic,
            Inbound::Gemini => crate::dialect::Dialect::Gemini,
        };
        ApiError::from_upstream(status, message).body_in(dialect)
    }

    /// The 400 a failed request translation answers, naming the parameter and the provider's
    /// dialect.
    pub fn refusal(self, e: &TranslateError) -> ApiError {
        match e {
            TranslateError::Unsupported { param } => ApiError::bad_request(format!(
                "`{param}` is not supported for this model: its provider speaks the {} API, which has no equivalent",
                self.outbound.name()
            )),
            other => ApiError::bad_request(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests;
