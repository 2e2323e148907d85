//! Response pacing for the simulated engine: per-request timing (time to first token and
//! inter-token latency) and streamed bodies that really stream, one flushed frame per chunk,
//! sleeping between chunks like a decoding engine. The frames carry each dialect's framing:
//! OpenAI's `data:` lines ending in `[DONE]`, Anthropic's named events, Gemini's CRLF-framed
//! `data:` lines or JSON array.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::Response;
use serde_json::Value;

use super::error::SimError;
use super::faults::{
    header_count, header_ms, ConnectionReset, ExtraDelay, ITL_HEADER, STREAM_END_AFTER_HEADER,
    STREAM_RESET_AFTER_HEADER, TTFT_HEADER,
};
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
    /// A streamed answer stops early (`x-sim-stream-reset-after`, `x-sim-stream-end-after`).
    pub stop: Option<Stop>,
}

/// How a streamed answer stops before its end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// The connection drops after this many frames.
    ResetAfter(usize),
    /// The body ends cleanly after this many frames, its final events never sent.
    EndAfter(usize),
}

impl Timing {
    /// The sim's defaults, overridden by `x-sim-ttft-ms` / `x-sim-itl-ms`, plus any delay the
    /// slow fault added.
    pub fn for_request(state: &SimState, headers: &HeaderMap, extra: Option<ExtraDelay>) -> Result<Self, SimError> {
        let ttft = header_ms(headers, TTFT_HEADER)?.unwrap_or(state.ttft);
        let itl = header_ms(headers, ITL_HEADER)?.unwrap_or(state.itl);
        let extra = extra.map_or(Duration::ZERO, |ExtraDelay(delay)| delay);
        let stop = match header_count(headers, STREAM_RESET_AFTER_HEADER)? {
            Some(n) => Some(Stop::ResetAfter(n)),
            None => header_count(headers, STREAM_END_AFTER_HEADER)?.map(Stop::EndAfter),
        };
        Ok(Self { ttft: ttft.saturating_add(extra), itl, stop })
    }

    /// The timing once the prompt's prefill is known: the prefill model's time adds to the
    /// time to first token.
    pub fn after_prefill(self, hit: &super::prefix::PrefixHit) -> Self {
        Self { ttft: self.ttft.saturating_add(Duration::from_micros(hit.prefill_us)), ..self }
    }

    /// Time to produce `tokens` tokens: the first after `ttft`, each next after `itl`.
    pub fn total(&self, tokens: u32) -> Duration {
        self.ttft.saturating_add(self.itl.saturating_mul(tokens.saturating_sub(1)))
    }
}

/// One piece of a streamed body and the generated tokens it carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The bytes written for this piece, framing included.
    pub data: String,
    /// Generated tokens this piece carries (for pacing and the metrics).
    pub tokens: u32,
}

impl Frame {
    /// An OpenAI-style SSE frame `data: <payload>\n\n`.
    pub fn sse(payload: &str, tokens: u32) -> Self {
        Self { data: format!("data: {payload}\n\n"), tokens }
    }

    /// A named SSE event `event: <name>\ndata: <payload>\n\n` (Anthropic).
    pub fn event(name: &str, payload: &Value, tokens: u32) -> Self {
        Self { data: format!("event: {name}\ndata: {payload}\n\n"), tokens }
    }

    /// Raw bytes (Gemini's CRLF-framed SSE and JSON-array streams).
    pub fn raw(data: String, tokens: u32) -> Self {
        Self { data, tokens }
    }
}

/// When to send each frame. The first frame waits `ttft`; the first token comes with it and
/// every later token `itl` after the one before, so a frame carrying `n` tokens waits `n`
/// gaps (one fewer for the first token). Frames without tokens go out back to back.
fn schedule(timing: Timing, frames: &[Frame]) -> Vec<Duration> {
    let mut pending_ttft = Some(timing.ttft);
    let mut seen_token = false;
    frames
        .iter()
        .map(|frame| {
            let gaps = if seen_token { frame.tokens } else { frame.tokens.saturating_sub(1) };
            seen_token |= frame.tokens > 0;
            let wait = timing.itl.saturating_mul(gaps);
            pending_ttft.take().unwrap_or(Duration::ZERO).saturating_add(wait)
        })
        .collect()
}

/// OpenAI's stream: an optional `head` chunk (chat's role chunk), one chunk per token, the
/// `tail` chunks (finish reason, usage) and the `[DONE]` terminator.
fn layout(head: Option<Value>, tokens: Vec<Value>, tail: Vec<Value>) -> Vec<Frame> {
    let head = head.map(|chunk| Frame::sse(&chunk.to_string(), 0));
    let tokens = tokens.into_iter().map(|chunk| Frame::sse(&chunk.to_string(), 1));
    let tail = tail.into_iter().map(|chunk| Frame::sse(&chunk.to_string(), 0));
    head.into_iter().chain(tokens).chain(tail).chain([Frame::sse("[DONE]", 0)]).collect()
}

/// An OpenAI SSE response streaming `chunks` = (head, one chunk per token, tail).
pub fn sse_response(
    timing: Timing,
    chunks: (Option<Value>, Vec<Value>, Vec<Value>),
    guard: RunningGuard,
    reason: FinishReason,
) -> Response {
    let (head, tokens, tail) = chunks;
    frames_response(timing, layout(head, tokens, tail), guard, reason, "text/event-stream")
}

/// A response streaming `frames` paced by `timing`, with `content_type`. The running `guard`
/// lives in the stream, so a client that disconnects stops generation and frees its metrics
/// slot; success is counted just before the last frame goes out.
pub fn frames_response(
    timing: Timing,
    frames: Vec<Frame>,
    guard: RunningGuard,
    reason: FinishReason,
    content_type: &'static str,
) -> Response {
    let delays = schedule(timing, &frames);
    let (keep, reset) = match timing.stop {
        Some(Stop::ResetAfter(n)) => (n, true),
        Some(Stop::EndAfter(n)) => (n, false),
        None => (usize::MAX, false),
    };
    let events = frames.into_iter().zip(delays).take(keep).peekable();
    let state = (events, Some(guard), reset);
    let stream = futures_util::stream::unfold(state, move |(mut events, mut guard, reset)| async move {
        let Some((frame, delay)) = events.next() else {
            if !reset {
                return None;
            }
            // Past the last frame kept: the body fails (once) and the connection drops, after a
            // pause that lets the frames already written leave (a dead engine's last bytes).
            pause(RESET_GRACE).await;
            return Some((Err(ConnectionReset), (events, None, false)));
        };
        pause(delay).await;
        if let Some(guard) = guard.as_mut() {
            guard.generated(frame.tokens);
        }
        if events.peek().is_none() && !reset {
            // Count success before the last frame goes out, so a client that has read the
            // whole stream also sees it in /metrics.
            if let Some(guard) = guard.take() {
                guard.succeed(reason);
            }
        }
        Some((Ok::<_, ConnectionReset>(Bytes::from(frame.data)), (events, guard, reset)))
    });
    let mut response = Response::new(Body::from_stream(stream));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// How long a stream told to reset waits after its last frame, so that frame is flushed first.
const RESET_GRACE: Duration = Duration::from_millis(50);

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
        let timing = Timing { ttft: MS(100), itl: MS(10), stop: None };
        let tokens = vec![json!(1), json!(2), json!(3)];
        let frames = layout(Some(json!("role")), tokens, vec![json!("finish")]);
        assert_eq!(schedule(timing, &frames), [MS(100), MS(0), MS(10), MS(10), MS(0), MS(0)]);
        assert_eq!(frames.iter().map(|f| f.tokens).sum::<u32>(), 3);
        assert_eq!(frames.last().unwrap().data, "data: [DONE]\n\n");
        let no_head = layout(None, vec![json!(1), json!(2)], vec![]);
        assert_eq!(schedule(timing, &no_head), [MS(100), MS(10), MS(0)]);
    }

    #[test]
    fn frames_with_many_tokens_wait_one_gap_per_token() {
        let timing = Timing { ttft: MS(100), itl: MS(10), stop: None };
        let frames = [Frame::raw("a".into(), 3), Frame::raw("b".into(), 2), Frame::raw("c".into(), 0)];
        assert_eq!(schedule(timing, &frames), [MS(120), MS(20), MS(0)]);
        let event = Frame::event("ping", &json!({"type": "ping"}), 0);
        assert_eq!(event.data, "event: ping\ndata: {\"type\":\"ping\"}\n\n");
    }

    #[test]
    fn total_is_ttft_plus_gaps() {
        let timing = Timing { ttft: MS(100), itl: MS(10), stop: None };
        assert_eq!(timing.total(0), MS(100));
        assert_eq!(timing.total(1), MS(100));
        assert_eq!(timing.total(5), MS(140));
    }
}
