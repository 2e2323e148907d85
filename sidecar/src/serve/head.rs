//! Request heads too large for `serve`, refused in the caller's dialect.
//!
//! hyper reads an HTTP/1 request head into a bounded buffer and answers a head that does not
//! fit with a bare 431 (no body), before any path is known. `serve` lets hyper read heads up to
//! [`READ_BUFFER_BYTES`] and refuses those over [`HEAD_LIMIT_BYTES`] itself, as JSON in the
//! dialect of their path, so an SDK raises its own error type instead of failing to parse.
//! Only a head past the larger buffer still gets hyper's bare 431: its path was never read.
//! (HTTP/2 header lists are bounded by hyper's h2 settings, well below either figure.)

use ferrogate_core::dialect::Dialect;
use ferrogate_core::error::ApiError;
use http::{header, Request, Response, Uri};

use super::body::ChannelBody;

/// The largest request head `serve` accepts: hyper's default read buffer, the bound `serve`
/// has always had (docs/kv-routing.md counts token ids against it).
pub const HEAD_LIMIT_BYTES: usize = 8192 + 4096 * 100;

/// How much of a head hyper may buffer: room to read a head over the limit far enough to
/// answer it in the caller's dialect.
pub const READ_BUFFER_BYTES: usize = 2 * HEAD_LIMIT_BYTES;

/// The head's size on the wire as HTTP/1.1 writes it: request line, `name: value` lines, the
/// blank line.
fn head_len<B>(req: &Request<B>) -> usize {
    let line = req.method().as_str().len() + target_len(req.uri()) + " HTTP/1.1\r\n".len() + 1;
    let fields: usize = req.headers().iter().map(|(n, v)| n.as_str().len() + v.len() + 4).sum();
    line + fields + 2
}

/// The request target's length (origin form, or absolute form with scheme and authority).
fn target_len(uri: &Uri) -> usize {
    let origin = uri.path_and_query().map_or(1, |p| p.as_str().len());
    match (uri.scheme_str(), uri.authority()) {
        (Some(scheme), Some(authority)) => scheme.len() + 3 + authority.as_str().len() + origin,
        _ => origin,
    }
}

/// The 431 answer for a head over [`HEAD_LIMIT_BYTES`], or `None` when it fits.
pub fn refuse_oversized<B>(req: &Request<B>) -> Option<Response<ChannelBody>> {
    if head_len(req) <= HEAD_LIMIT_BYTES {
        return None;
    }
    let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
    tracing::debug!(path = req.uri().path(), "request head over {HEAD_LIMIT_BYTES} bytes: 431");
    let body = ApiError::headers_too_large(HEAD_LIMIT_BYTES).body_in(Dialect::from_path(path));
    Response::builder()
        .status(431)
        .header(header::CONTENT_TYPE, "application/json")
        // The body, if any, is never read: the connection cannot be reused.
        .header(header::CONNECTION, "close")
        .body(ChannelBody::full(body))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(uri: &str, headers: &[(&str, String)]) -> Request<()> {
        let mut builder = Request::builder().method("POST").uri(uri);
        for (name, value) in headers {
            builder = builder.header(*name, value.as_str());
        }
        builder.body(()).unwrap()
    }

    #[test]
    fn the_head_is_measured_as_written() {
        let req = request("/v1/chat/completions", &[("host", "x".into())]);
        let wire = "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n\r\n";
        assert_eq!(head_len(&req), wire.len());
        let absolute = request("http://example.com/v1/models", &[]);
        assert_eq!(head_len(&absolute), "POST http://example.com/v1/models HTTP/1.1\r\n\r\n".len());
    }

    #[test]
    fn a_head_at_the_limit_passes_and_one_byte_more_is_refused() {
        let base = head_len(&request("/v1/messages", &[("x-big", String::new())]));
        let fits = request("/v1/messages", &[("x-big", "a".repeat(HEAD_LIMIT_BYTES - base))]);
        assert!(refuse_oversized(&fits).is_none());
        let over = request("/v1/messages", &[("x-big", "a".repeat(HEAD_LIMIT_BYTES - base + 1))]);
        let answer = refuse_oversized(&over).unwrap();
        assert_eq!(answer.status(), 431);
        assert_eq!(answer.headers()[header::CONNECTION], "close");
    }
}
