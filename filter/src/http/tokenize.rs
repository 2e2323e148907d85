//! `kv_tokenize` on the data path: a request for a `precise_cache_aware` model without
//! `x-ferrogate-token-ids` waits, its body buffered, while one replica of the pool answers
//! `POST /tokenize` ([`ferrogate_core::kv::tokenize`]); then it is routed with those ids. The
//! call has [`TIMEOUT`]: a failed, refused or slow answer routes the request by the
//! approximate `cache_aware` instead (counted as a tokenize fallback), never as an error.

use std::time::Duration;

use ferrogate_core::config::Config;
use ferrogate_core::kv::tokenize;
use ferrogate_core::route::Api;
use proxy_wasm::traits::HttpContext;
use proxy_wasm::types::Action;

use super::Stream;

/// How long a request waits for its token ids.
pub(super) const TIMEOUT: Duration = Duration::from_millis(50);

/// Where the request's `/tokenize` call stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tokenize {
    /// The call with this token is in flight; the request waits.
    Pending(u32),
    /// The ids arrived.
    Done,
    /// No usable answer: route without ids.
    Failed,
}

impl Stream {
    /// Starts the `/tokenize` call when the request needs one; true when it waits for it.
    pub(super) fn start_tokenize(&mut self, config: &Config, api: Api, body: &[u8]) -> bool {
        if !self.token_ids.is_empty() || self.tokenize.is_some() {
            return false;
        }
        let Some(call) = tokenize::plan(config, api, body) else { return false };
        let Some(provider) = config.providers.get(call.provider) else { return false };
        let mut headers = vec![
            (":method", "POST"),
            (":path", call.path.as_str()),
            (":authority", provider.authority.as_str()),
            ("content-type", "application/json"),
        ];
        headers.extend(self.traceparent.as_deref().map(|t| ("traceparent", t)));
        match proxy_wasm::hostcalls::dispatch_http_call(&provider.name, headers, Some(&call.body), vec![], TIMEOUT) {
            Ok(token) => {
                self.tokenize = Some(Tokenize::Pending(token));
                true
            }
            Err(e) => {
                log::debug!("#{} /tokenize on {} not sent: {e:?}", self.id, provider.name);
                self.tokenize = Some(Tokenize::Failed);
                false
            }
        }
    }

    /// The `/tokenize` answer (or its timeout): take the ids, route, let the request go on.
    pub(super) fn on_tokenized(&mut self, token: u32, num_headers: usize, body_size: usize) {
        if self.tokenize != Some(Tokenize::Pending(token)) {
            return;
        }
        let ids = crate::sidecar_call::ok_body(crate::sidecar_call::answer_status(num_headers), body_size);
        match ids.as_deref().and_then(tokenize::parse_answer) {
            Some(ids) => {
                self.token_ids = ids;
                self.tokenize = Some(Tokenize::Done);
            }
            None => self.tokenize = Some(Tokenize::Failed),
        }
        let Some(plugin) = self.shared.plugin.clone() else { return };
        if self.timed(|s| s.finish(&plugin)) == Action::Continue {
            self.resume_http_request();
        }
    }
}
