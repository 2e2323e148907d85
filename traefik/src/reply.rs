//! Local answers: the guest writes the response itself and the request goes no further.

use ferrogate_core::dialect::Dialect;
use ferrogate_core::headers::REQUEST_ID;
use ferrogate_core::openai::ApiError;

use crate::abi::{self, Kind};

/// Answers `status` with a JSON `body`; the headers go first, since without response
/// buffering Traefik sends them with the status.
pub(crate) fn json(status: u16, body: &[u8], request_id: &str, extra: Option<(&str, &str)>) -> u64 {
    abi::set_header(Kind::Response, "content-type", b"application/json");
    abi::set_header(Kind::Response, "content-length", body.len().to_string().as_bytes());
    abi::set_header(Kind::Response, REQUEST_ID, request_id.as_bytes());
    if let Some((name, value)) = extra {
        abi::set_header(Kind::Response, name, value.as_bytes());
    }
    abi::set_status(status);
    abi::set_body(Kind::Response, body);
    // Exactly 0: a context with "stop" would keep the instance out of Traefik's pool.
    0
}

/// Answers `e` in the caller's `dialect`.
pub(crate) fn error(e: &ApiError, dialect: Dialect, request_id: &str) -> u64 {
    error_with(e, dialect, request_id, None)
}

/// [`error`] with one more header (`retry-after`).
pub(crate) fn error_with(e: &ApiError, dialect: Dialect, request_id: &str, extra: Option<(&str, &str)>) -> u64 {
    abi::log_line(abi::Level::Debug, &format!("{request_id} {} {}", e.status, e.message));
    json(e.status, &e.body_in(dialect), request_id, extra)
}
