//! Local replies: JSON bodies in the client's dialect, with the request id.

use ferrogate_core::headers;
use ferrogate_core::openai::ApiError;
use proxy_wasm::traits::HttpContext;
use proxy_wasm::types::Action;

use super::Stream;

impl Stream {
    /// Sends a local JSON reply; the host ignores our return value after this (forced stop).
    pub(super) fn reply(&mut self, status: u16, body: &[u8]) -> Action {
        self.reply_with(status, body, None)
    }

    /// [`Stream::reply`] with one more header (e.g. `retry-after`).
    pub(super) fn reply_with(&mut self, status: u16, body: &[u8], extra: Option<(&str, &str)>) -> Action {
        let mut hdrs = vec![("content-type", "application/json")];
        hdrs.extend(extra);
        if let Some(id) = &self.request_id {
            hdrs.push((headers::REQUEST_ID, id.as_str()));
        }
        self.send_http_response(u32::from(status), hdrs, Some(body));
        self.local_status = Some(status);
        self.api = None;
        Action::Pause
    }

    pub(super) fn reply_error(&mut self, e: &ApiError) -> Action {
        self.reply_error_with(e, None)
    }

    pub(super) fn reply_error_with(&mut self, e: &ApiError, extra: Option<(&str, &str)>) -> Action {
        log::debug!("#{} {} {}", self.id, e.status, e.message);
        self.reason = Some(e.code.unwrap_or(e.kind));
        let body = e.body_in(self.dialect);
        self.reply_with(e.status, &body, extra)
    }
}
