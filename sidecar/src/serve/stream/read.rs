//! Reading a body the way Envoy's HTTP/1 codec hands it to the filters.
//!
//! Envoy parses everything one socket read brought, buffering the body of every chunk it
//! finds, and calls the filter chain once for the lot (`dispatchBufferedBody`); its writes go
//! out once per event-loop pass. hyper gives a body one frame per chunk instead, so an upstream
//! that sends a burst of small SSE chunks would cost one filter call and one client write per
//! chunk. Here the frames the upstream connection hands over within one scheduler pass are
//! joined into one, which is what Envoy's filter would have seen.

use bytes::{Bytes, BytesMut};
use futures_util::FutureExt;
use http_body::Frame;
use http_body_util::BodyExt;
use hyper::body::Incoming;

/// One step of a body: a frame, an error, or `None` at its end.
pub(super) type FrameResult = Option<Result<Frame<Bytes>, hyper::Error>>;

/// Joined data stops growing here (a read of Envoy's is bounded the same way, by its buffer).
const MAX_JOINED: usize = 64 * 1024;

/// The next frame of `body`, or never without one.
pub(super) async fn next_frame(body: &mut Option<Incoming>) -> FrameResult {
    match body {
        Some(b) => b.frame().await,
        None => std::future::pending().await,
    }
}

/// The next frame if the connection hands it over within one scheduler pass; `None` when it
/// is not there yet (a body still being generated upstream).
pub(super) async fn frame_in_same_pass(body: &mut Incoming) -> Option<FrameResult> {
    let mut next = std::pin::pin!(body.frame());
    if let Some(frame) = next.as_mut().now_or_never() {
        return Some(frame);
    }
    // One pass of the scheduler lets the connection's task parse what it has already read.
    tokio::task::yield_now().await;
    next.as_mut().now_or_never()
}

/// `first` and the data frames that follow it within the same pass, joined. The second value
/// is what stopped the run when that was not "nothing more yet": the body's end, an error or
/// trailers, left for the caller to handle after the data.
pub(super) async fn rest_of_read(body: &mut Incoming, first: Bytes) -> (Bytes, Option<FrameResult>) {
    let mut joined: Option<BytesMut> = None;
    let mut stopped = None;
    while joined.as_ref().map_or(first.len(), BytesMut::len) < MAX_JOINED {
        let Some(next) = frame_in_same_pass(body).await else { break };
        match next {
            Some(Ok(frame)) if frame.is_data() => {
                let data = frame.into_data().unwrap_or_default();
                joined.get_or_insert_with(|| BytesMut::from(&first[..])).extend_from_slice(&data);
            }
            other => {
                stopped = Some(other);
                break;
            }
        }
    }
    (joined.map_or(first, BytesMut::freeze), stopped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    /// The client side of a response whose body is `body`, served by hyper over loopback.
    async fn over_loopback<B>(body: B) -> Incoming
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let body = std::sync::Arc::new(std::sync::Mutex::new(Some(body)));
        tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let service = hyper::service::service_fn(move |_req| {
                let body = body.lock().unwrap().take().unwrap();
                async move { Ok::<_, std::convert::Infallible>(http::Response::new(body)) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(tcp), service)
                .await;
        });
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (mut send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp)).await.unwrap();
        tokio::spawn(conn);
        let req = http::Request::new(http_body_util::Empty::<Bytes>::new());
        send.send_request(req).await.unwrap().into_body()
    }

    /// A body of `parts` written back to back (each its own chunk), then ending.
    async fn chunked_body(parts: &'static [&'static str]) -> Incoming {
        let frames: Vec<Result<Frame<Bytes>, std::convert::Infallible>> =
            parts.iter().map(|p| Ok(Frame::data(Bytes::from_static(p.as_bytes())))).collect();
        over_loopback(http_body_util::StreamBody::new(futures_util::stream::iter(frames))).await
    }

    #[tokio::test]
    async fn chunks_read_together_become_one_frame_and_the_end_is_reported() {
        let mut body = chunked_body(&["data: a\n\n", "data: b\n\n", "data: c\n\n"]).await;
        // Let the whole answer arrive, so it is all in one read.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        let (joined, stopped) = rest_of_read(&mut body, first).await;
        assert_eq!(&joined[..], b"data: a\n\ndata: b\n\ndata: c\n\n");
        assert!(matches!(stopped, Some(None)), "the end is reported after the data");
    }

    #[tokio::test]
    async fn a_body_still_being_written_is_not_waited_for() {
        let (tx, body) = crate::serve::body::ChannelBody::channel();
        let mut body = over_loopback(body).await;
        assert!(tx.data(b"data: a\n\n".to_vec()).await);
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        let (joined, stopped) = rest_of_read(&mut body, first).await;
        assert_eq!(&joined[..], b"data: a\n\n");
        assert!(stopped.is_none(), "nothing more yet: the caller goes back to waiting");
        assert!(tx.data(b"data: b\n\n".to_vec()).await);
        drop(tx);
        let next = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(&next[..], b"data: b\n\n");
    }
}
