//! The parts of the request phase that depend on the API dialects: which dialect the
//! upstream answers in (for the usage tracker), and `count_tokens`, which is answered here.

use ferrogate_core::config::Config;
use ferrogate_core::openai::ApiError;
use ferrogate_core::route::Api;
use ferrogate_core::translate::{self, Outbound};
use ferrogate_core::usage::UsageDialect;
use proxy_wasm::types::Action;

use super::Stream;

impl Stream {
    /// `count_tokens`: answered here (an estimate), for a model the caller may use.
    pub(super) fn count_tokens(&mut self, config: &Config, body: &[u8]) -> Action {
        match translate::count::estimate(body) {
            Ok((model, tokens)) => match config.authorize(self.caller, &model) {
                Ok(_) => self.reply(200, &translate::count::answer(tokens)),
                Err(e) => self.reply_error(&e),
            },
            Err(e) => self.reply_error(&ApiError::bad_request(e.to_string())),
        }
    }
}

/// The dialect the upstream answers in.
pub(super) fn upstream_dialect(api: Api, translated_to: Option<Outbound>) -> UsageDialect {
    match (translated_to, api) {
        (Some(Outbound::Anthropic), _) | (None, Api::Messages) => UsageDialect::Anthropic,
        (Some(Outbound::Gemini), _) | (None, Api::GenerateContent | Api::StreamGenerateContent) => UsageDialect::Gemini,
        _ => UsageDialect::OpenAi,
    }
}
