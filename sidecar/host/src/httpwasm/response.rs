//! Turning the modelled `http.ResponseWriter` into the [`http::Response`] the client gets:
//! committed status and headers, the bytes written to the client, then (unbuffered, after
//! `next`) the upstream body streamed through, and `Trailer:`-prefixed headers as trailers.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderMap, Response, StatusCode};
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::{BodyExt, Full};

use super::header::GoHeader;
use super::state::ResponseWriter;
use super::Body;

/// Go's `http.TrailerPrefix`.
const TRAILER_PREFIX: &str = "Trailer:";

/// The client's response: what `w` committed (an implicit 200 with the current headers when
/// nothing was), the bytes written, then `upstream`'s body when given.
pub(crate) fn finish(mut w: ResponseWriter, upstream: Option<Body>) -> Response<Body> {
    w.write_header(200);
    let (status, header) = w.committed.take().unwrap_or((200, GoHeader::default()));
    let trailers = trailers_of(&w.header);
    let body = Tail { head: Some(Bytes::from(std::mem::take(&mut w.sent))), upstream, trailers };
    let mut response = Response::new(if body.is_full() { full(body) } else { body.boxed() });
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    *response.headers_mut() = header.to_map(|k| !k.starts_with(TRAILER_PREFIX));
    response
}

/// A plain response (errors of the host itself, before any guest code ran).
pub(crate) fn plain(status: StatusCode, text: String) -> Response<Body> {
    let mut response = Response::new(full_bytes(Bytes::from(text)));
    *response.status_mut() = status;
    response
}

/// A complete body, boxed.
pub(crate) fn full_bytes(bytes: Bytes) -> Body {
    Full::new(bytes).map_err(|never| match never {}).boxed()
}

fn full(tail: Tail) -> Body {
    match tail.trailers {
        None => full_bytes(tail.head.unwrap_or_default()),
        Some(_) => tail.boxed(),
    }
}

/// Trailers Go would send: the `Trailer:<name>` keys of `w.Header()`.
fn trailers_of(header: &GoHeader) -> Option<HeaderMap> {
    let mut trailers = GoHeader::default();
    for (key, values) in header.iter() {
        if let Some(name) = key.strip_prefix(TRAILER_PREFIX) {
            for value in values {
                trailers.add(name, value);
            }
        }
    }
    let map = trailers.to_map(|_| true);
    (!map.is_empty()).then_some(map)
}

/// The written head, the upstream body, then the guest's trailers (merged into the
/// upstream's own trailers frame, if it sends one).
struct Tail {
    head: Option<Bytes>,
    upstream: Option<Body>,
    trailers: Option<HeaderMap>,
}

impl Tail {
    fn is_full(&self) -> bool {
        self.upstream.is_none()
    }
}

impl HttpBody for Tail {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if let Some(head) = self.head.take().filter(|h| !h.is_empty()) {
            return Poll::Ready(Some(Ok(Frame::data(head))));
        }
        if let Some(upstream) = self.upstream.as_mut() {
            match Pin::new(upstream).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(frame))) => return Poll::Ready(Some(Ok(self.merge(frame)))),
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => self.upstream = None,
            }
        }
        Poll::Ready(self.trailers.take().map(|t| Ok(Frame::trailers(t))))
    }

    fn is_end_stream(&self) -> bool {
        self.head.as_ref().is_none_or(Bytes::is_empty) && self.upstream.is_none() && self.trailers.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        let head = self.head.as_ref().map_or(0, |h| h.len() as u64);
        match &self.upstream {
            Some(up) => {
                // Upper first: SizeHint refuses a lower bound above the upper one.
                let mut hint = up.size_hint();
                if let Some(upper) = hint.upper() {
                    hint.set_upper(upper.saturating_add(head));
                }
                hint.set_lower(hint.lower().saturating_add(head));
                hint
            }
            None => SizeHint::with_exact(head),
        }
    }
}

impl Tail {
    fn merge(&mut self, frame: Frame<Bytes>) -> Frame<Bytes> {
        match frame.into_trailers() {
            Ok(mut upstream) => {
                if let Some(ours) = self.trailers.take() {
                    upstream.extend(ours);
                }
                Frame::trailers(upstream)
            }
            Err(frame) => frame,
        }
    }
}
