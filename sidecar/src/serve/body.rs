//! Streaming bodies backed by a bounded channel.
//!
//! Both directions of a proxied request use [`ChannelBody`]: the stream driver pushes frames
//! as the filter releases them and awaits room in the channel, which is where backpressure
//! comes from — a slow client stops the driver from reading the upstream, and a slow upstream
//! stops it from reading the client.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use tokio::sync::mpsc;

/// Frames in flight per direction; small on purpose so memory stays bounded per stream.
const CHANNEL_FRAMES: usize = 4;

/// Error carried by a body whose producer gave up (reset, upstream failure).
#[derive(Debug, thiserror::Error)]
#[error("stream aborted: {0}")]
pub struct BodyAborted(pub String);

/// A body fed frame by frame through a channel.
#[derive(Debug)]
pub struct ChannelBody {
    rx: mpsc::Receiver<Result<Frame<Bytes>, BodyAborted>>,
    /// Known exact length (a header-only message is `Some(0)`).
    exact_len: Option<u64>,
}

/// The producing half of a [`ChannelBody`].
#[derive(Debug, Clone)]
pub struct BodySender {
    tx: mpsc::Sender<Result<Frame<Bytes>, BodyAborted>>,
}

impl ChannelBody {
    /// A body with a sender to feed it.
    pub fn channel() -> (BodySender, ChannelBody) {
        let (tx, rx) = mpsc::channel(CHANNEL_FRAMES);
        (BodySender { tx }, ChannelBody { rx, exact_len: None })
    }

    /// A body holding one complete chunk (used for callouts, whose bodies are buffered).
    pub fn full(data: Vec<u8>) -> ChannelBody {
        if data.is_empty() {
            return ChannelBody::empty();
        }
        let (tx, rx) = mpsc::channel(1);
        let len = data.len() as u64;
        // Capacity 1 and a fresh channel: this send cannot fail.
        let _ = tx.try_send(Ok(Frame::data(Bytes::from(data))));
        ChannelBody { rx, exact_len: Some(len) }
    }

    /// A body that is already complete and empty.
    pub fn empty() -> ChannelBody {
        let (_tx, rx) = mpsc::channel(1);
        ChannelBody { rx, exact_len: Some(0) }
    }
}

impl BodySender {
    /// Sends a data chunk; `false` when the receiver is gone (peer disconnected).
    pub async fn data(&self, data: Vec<u8>) -> bool {
        if data.is_empty() {
            return !self.tx.is_closed();
        }
        self.tx.send(Ok(Frame::data(Bytes::from(data)))).await.is_ok()
    }

    /// Sends trailers; `false` when the receiver is gone.
    pub async fn trailers(&self, trailers: HeaderMap) -> bool {
        self.tx.send(Ok(Frame::trailers(trailers))).await.is_ok()
    }

    /// Ends the body with an error so the peer sees an aborted message, not a short one.
    pub async fn abort(&self, why: &str) {
        let _ = self.tx.send(Err(BodyAborted(why.to_string()))).await;
    }
}

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = BodyAborted;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BodyAborted>>> {
        if self.exact_len == Some(0) {
            return Poll::Ready(None);
        }
        self.rx.poll_recv(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.exact_len == Some(0)
    }

    fn size_hint(&self) -> SizeHint {
        match self.exact_len {
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::default(),
        }
    }
}
