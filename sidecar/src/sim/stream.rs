//! Response pacing for the simulated engine: per-request timing (time to first token and
//! inter-token latency) and Server-Sent-Events bodies that really stream, one flushed frame
//! per chunk, sleeping between chunks like a decoding engine.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::Response;
use serde_json::Value;

use super::error::SimError;
use super::faults::{header_ms, ExtraDelay, ITL_HEADER, TTFT_HEADER};
use super::metrics::RunningGuard;
use super::text::FinishReason;
use super::SimState;

/// When a request's tokens appear.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// Delay before the first token (includes a slow-fault delay).
    pub ttft: Duration,
    /// Delay between consecutive tokens.
    pub itl: Duration,
}

impl Timing {
    /// The sim's defaults, overridden by `x-sim-ttft-ms` / `x-sim-itl-ms`, plus any delay the
    /// slow fault added.
    pub fn for_request(state: &SimState, headers: &HeaderMap, extra: Option<ExtraDelay>) -> Result<Self, SimError> {
        let ttft = header_ms(headers, TTFT_HEADER)?.unwrap_or(state.ttft);
        let itl = header_ms(headers, ITL_HEADER)?.unwrap_or(state.itl);
        let extra = extra.map_or(Duration::ZERO, |ExtraDelay(delay)| delay);
        Ok(Self { ttft: ttft.saturating_add(extra), itl })
    }

    /// Time to produce `tokens` tokens: the first after `ttft`, each next after `itl`.
    pub fn total(&self, tokens: u32) -> Duration {
        self.ttft.saturating_add(self.itl.saturating_mul(tokens.saturating_sub(1)))
    }
}

/// One SSE frame and when to send it.
#[derive(Debug)]
struct SseEvent {
    delay: Duration,
    data: String,
    /// Generated tokens this frame carries (for the metrics).
    tokens: u32,
}

/// Lays out a stream: an optional `head` chunk (chat's role chunk), one chunk per token, the
/// `tail` chunks (finish reason, usage) and the `[DONE]` terminator. The first frame waits
/// `ttft`, later tokens `itl`; head, first token and tail go out back to back.
fn layout(timing: Timing, head: Option<Value>, tokens: Vec<Value>, tail: Vec<Value>) -> Vec<SseEvent> {
    let mut pending_ttft = Some(timing.ttft);
    let mut events = Vec::with_capacity(tokens.len() + tail.len() + 2);
    let mut push = |data: String, tokens: u32, gap: Duration| {
        let delay = pending_ttft.take().unwrap_or(gap);
        events.push(SseEvent { delay, data, tokens });
    };
    if let Some(head) = head {
        push(head.to_string(), 0, Duration::ZERO);
    }
    for (index, token) in tokens.into_iter().enumerate() {
        push(token.to_string(), 1, if index == 0 { Duration::ZERO } else { timing.itl });
    }
    for chunk in tail {
        push(chunk.to_string(), 0, Duration::ZERO);
    }
    push("[DONE]".to_owned(), 0, Duration::ZERO);
    events
}

/// An SSE response streaming the chunks laid out by [`layout`]. The running `guard` lives in
/// the stream, so a client that disconnects stops generation and frees its metrics slot.
pub fn sse_response(
    timing: Timing,
    chunks: (Option<Value>, Vec<Value>, Vec<Value>),
    guard: RunningGuard,
    reason: FinishReason,
) -> Response {
    let (head, tokens, tail) = chunks;
    let events = layout(timing, head, tokens, tail).into_iter().peekable();
    let stream = futures_util::stream::unfold((events, Some(guard)), move |(mut events, mut guard)| async move {
        let event = events.next()?;
        pause(event.delay).await;
        if let Some(guard) = guard.as_mut() {
            guard.generated(event.tokens);
        }
        if events.peek().is_none() {
            // Count success before the terminator goes out, so a client that has read the
            // whole stream also sees it in /metrics.
            if let Some(guard) = guard.take() {
                guard.succeed(reason);
            }
        }
        let frame = Bytes::from(format!("data: {}\n\n", event.data));
        Some((Ok::<_, std::convert::Infallible>(frame), (events, guard)))
    });
    let mut response = Response::new(Body::from_stream(stream));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// Waits out a non-streamed generation of `tokens` tokens and records it as finished.
pub async fn finish_plain(timing: Timing, tokens: u32, mut guard: RunningGuard, reason: FinishReason) {
    pause(timing.total(tokens)).await;
    guard.generated(tokens);
    guard.succeed(reason);
}

/// Sleeps for `d`, skipping the timer entirely for zero: tokio's timer has millisecond
/// granularity, so even `sleep(0)` would add up to a millisecond to every response.
async fn pause(d: std::time::Duration) {
    if !d.is_zero() {
        tokio::time::sleep(d).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn first_frame_waits_ttft_then_tokens_wait_itl() {
        let timing = Timing { ttft: MS(100), itl: MS(10) };
        let tokens = vec![json!(1), json!(2), json!(3)];
        let events = layout(timing, Some(json!("role")), tokens, vec![json!("finish")]);
        let delays: Vec<_> = events.iter().map(|e| e.delay).collect();
        assert_eq!(delays, [MS(100), MS(0), MS(10), MS(10), MS(0), MS(0)]);
        assert_eq!(events.iter().map(|e| e.tokens).sum::<u32>(), 3);
        assert_eq!(events.last().unwrap().data, "[DONE]");
        let no_head = layout(timing, None, vec![json!(1), json!(2)], vec![]);
        assert_eq!(no_head.iter().map(|e| e.delay).collect::<Vec<_>>(), [MS(100), MS(10), MS(0)]);
    }

    #[test]
    fn total_is_ttft_plus_gaps() {
        let timing = Timing { ttft: MS(100), itl: MS(10) };
        assert_eq!(timing.total(0), MS(100));
        assert_eq!(timing.total(1), MS(100));
        assert_eq!(timing.total(5), MS(140));
    }
}
