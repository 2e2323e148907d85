//! The parts of the request phase that depend on the API dialects: which dialect the
//! upstream answers in (for the usage tracker), asking OpenAI upstreams for stream usage, and
//! `count_tokens`, which is answered here.

use ferrogate_core::config::Config;
use ferrogate_core::route::{Api, RouteDecision};
use ferrogate_core::translate;
use ferrogate_core::usage::ensure_include_usage_in_valid;
use proxy_wasm::types::Action;

use super::Stream;

impl Stream {
    /// `count_tokens`: answered here (an estimate), for a model the caller may use.
    pub(super) fn count_tokens(&mut self, config: &Config, body: &[u8]) -> Action {
        match translate::count::answer_for(config, self.caller, body) {
            Ok(answer) => self.reply(200, &answer),
            Err(e) => self.reply_error(&e),
        }
    }
}

pub(super) use ferrogate_core::usage::upstream_dialect;

impl Stream {
    /// The body to send: for OpenAI chat and completions forwarded as they are, one that asks
    /// for usage on streams, so every request is accounted (the client that did not ask never
    /// sees the extra chunk). The router validated the JSON and a model rewrite keeps it valid;
    /// its validation pass also said whether the body can stream at all (`d.may_stream`).
    pub(super) fn with_usage_requested(
        &mut self,
        api: Api,
        original: &[u8],
        d: &mut RouteDecision<'_>,
    ) -> Option<Vec<u8>> {
        let body = d.body.take();
        if !d.may_stream || d.translation.is_some() || !matches!(api, Api::ChatCompletions | Api::Completions) {
            return body;
        }
        match ensure_include_usage_in_valid(body.as_deref().unwrap_or(original)) {
            Ok(Some(with_usage)) => {
                self.hide_usage = true;
                Some(with_usage)
            }
            _ => body,
        }
    }
}
