//! The Conversations API in the data path ([`ferrogate_core::stored::conversations`]): once the
//! key is authenticated, a call goes to the sidecar's store as the client made it (path, query,
//! and for a create, update or append its JSON body, buffered first), with the key's digest as
//! the owner, and the store's answer (OpenAI's shapes) is the client's. Another key's
//! conversation is 404, like one that never existed. Without a sidecar there is no store: 501.

use std::time::Duration;

use ferrogate_core::openai::ApiError;
use ferrogate_core::stored;
use ferrogate_core::stored::conversations::Call;
use proxy_wasm::traits::HttpContext;
use proxy_wasm::types::Action;

use super::Stream;
use crate::sidecar_call;

/// How long a call to the store may take.
const TIMEOUT: Duration = Duration::from_secs(5);

/// A call waiting for its body: the method and the client's path.
pub(crate) struct Pending {
    method: String,
    path: String,
}

impl Stream {
    /// At the request's head: asks the store at once, or waits for the body to send with it.
    pub(super) fn start_conversations(&mut self, call: Call<'_>, method: &str, path: &str, eos: bool) -> Action {
        if self.shared.plugin.as_ref().is_none_or(|p| p.sidecar.is_none()) {
            let (bare, _) = ferrogate_core::route::split_query(path);
            return self.reply_error(&ApiError::response_lifecycle_unsupported(method, bare));
        }
        if !call.has_body() || eos {
            return self.ask_store(method, path, None);
        }
        self.conversation = Some(Box::new(Pending { method: method.to_string(), path: path.to_string() }));
        Action::Pause
    }

    /// The body of a call waiting for it; `None` when this request is not one.
    pub(super) fn conversation_body(&mut self, body_size: usize, end_of_stream: bool) -> Option<Action> {
        self.conversation.as_ref()?;
        let max = self.shared.plugin.as_ref().map_or(0, |p| p.max_body_bytes);
        if body_size > max {
            return Some(self.reply_error(&ApiError::payload_too_large(max)));
        }
        if !end_of_stream {
            return Some(Action::Pause);
        }
        let pending = self.conversation.take()?;
        let body = self.get_http_request_body(0, body_size).unwrap_or_default();
        Some(self.ask_store(&pending.method, &pending.path, Some(&body)))
    }

    fn ask_store(&mut self, method: &str, path: &str, body: Option<&[u8]>) -> Action {
        let Some(config) = self.config.clone() else { return Action::Continue };
        let Some(sidecar) = self.shared.plugin.as_ref().and_then(|p| p.sidecar.clone()) else {
            return Action::Continue;
        };
        let mut extra = stored::owner_headers(&config, self.caller);
        if body.is_some() {
            extra.push(("content-type", "application/json"));
        }
        match sidecar_call::call(&sidecar, method, path, &extra, body, TIMEOUT) {
            Ok(token) => {
                self.lifecycle_call = Some(token);
                Action::Pause
            }
            Err(_) => self.reply_error(&ApiError::unavailable("The conversation store cannot be reached.")),
        }
    }
}
