//! Fault injection and per-request test knobs for the simulated engine.
//!
//! Rate-based faults (`--reset-rate`, `--error-429-rate`, `--error-500-rate`, `--slow-rate`) are
//! drawn from one RNG seeded with `--seed`, so a given request sequence always sees the same
//! faults. Tests can force behaviour per request with headers: `x-sim-reset: 1`,
//! `x-sim-status: <code>`, `x-sim-ttft-ms`, `x-sim-itl-ms`. Injected 429s carry `Retry-After:
//! <--retry-after-secs>`; `x-sim-retry-after: <secs>` sets it on an injected 429 or 503.
//! `x-sim-kv-drop: 1` withholds the request's KV-cache event batch from the PUB socket (a
//! message ZMQ dropped; see `super::kv_events`).
//!
//! A reset must look like a dead upstream: the TCP connection closes with no HTTP response.
//! The middleware here answers with a response carrying a [`ConnectionReset`] extension (and a
//! body that fails at once); `sim::run`'s connection service turns that marker into a service
//! error, on which hyper drops the connection without writing anything.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::error::{Dialect, SimError};
use super::reply::Knobs;
use super::{SimArgs, SimState};

/// Header forcing a connection reset (`1` or `true`).
pub const RESET_HEADER: &str = "x-sim-reset";
/// Header withholding the KV-cache event batch of a request's prefix-cache changes from the
/// PUB socket (`1` or `true`): the batch is numbered and kept for replay but not sent, as when
/// ZMQ drops a message at its high-water mark, so subscribers see a gap in the sequence.
pub const KV_DROP_HEADER: &str = "x-sim-kv-drop";
/// Header forcing an error status (400..=599).
pub const STATUS_HEADER: &str = "x-sim-status";
/// Header overriding `--ttft-ms` for one request.
pub const TTFT_HEADER: &str = "x-sim-ttft-ms";
/// Header overriding `--itl-ms` for one request.
pub const ITL_HEADER: &str = "x-sim-itl-ms";
/// Header setting the `Retry-After` seconds of an injected 429 or 503 (`0`: none).
pub const RETRY_AFTER_HEADER: &str = "x-sim-retry-after";
/// Header making a streamed answer drop its connection after this many frames (an engine that
/// dies mid-answer).
pub const STREAM_RESET_AFTER_HEADER: &str = "x-sim-stream-reset-after";
/// Header making a streamed answer end cleanly after this many frames, without its final
/// events (an engine that stops early).
pub const STREAM_END_AFTER_HEADER: &str = "x-sim-stream-end-after";
/// Header (`1` or `true`) making a text answer the tool traffic of the conversation received
/// (`tools::Traffic`), so a test sees every call and result a gateway delivered.
pub const ECHO_TOOLS_HEADER: &str = "x-sim-echo-tools";
/// Header (`1` or `true`) making a text answer the prompt the sim read (`role: text` lines),
/// so a test sees the text a gateway delivered.
pub const ECHO_PROMPT_HEADER: &str = "x-sim-echo-prompt";
/// Header cutting a text answer into deltas of this many characters instead of words, so a
/// test can have a value split across streamed chunks.
pub const CHUNK_CHARS_HEADER: &str = "x-sim-chunk-chars";

/// What to do to one request instead of (or before) serving it normally.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Close the connection without a response.
    Reset,
    /// Answer with this error status.
    Status(StatusCode),
    /// Serve normally after an extra `--slow-ms` delay.
    Slow,
}

/// Marker (response extension) and body error of a simulated connection reset.
#[derive(Clone, Copy, Debug, thiserror::Error)]
#[error("simulated connection reset")]
pub struct ConnectionReset;

/// Extra time before the first token, set on slow requests (request extension).
#[derive(Clone, Copy, Debug)]
pub struct ExtraDelay(pub Duration);

/// Draws rate-based faults from the seeded RNG.
#[derive(Debug)]
pub struct FaultInjector {
    rng: Mutex<StdRng>,
    reset_rate: f64,
    error_429_rate: f64,
    error_500_rate: f64,
    slow_rate: f64,
    /// The `--slow-ms` delay of slow requests.
    pub slow: Duration,
    /// `Retry-After` seconds of injected 429s (0: none).
    retry_after_secs: u64,
}

impl FaultInjector {
    /// An injector configured from the sim's options.
    pub fn new(args: &SimArgs) -> Self {
        Self {
            rng: Mutex::new(StdRng::seed_from_u64(args.seed)),
            reset_rate: args.reset_rate,
            error_429_rate: args.error_429_rate,
            error_500_rate: args.error_500_rate,
            slow_rate: args.slow_rate,
            slow: Duration::from_millis(args.slow_ms),
            retry_after_secs: args.retry_after_secs,
        }
    }

    /// The fault for a request with `headers`: forced by header, else drawn by rate.
    pub fn decide(&self, headers: &HeaderMap) -> Result<Option<Fault>, SimError> {
        // Always draw, even when a header decides, so the RNG sequence depends only on the
        // number of requests and stays reproducible.
        let drawn = self.roll();
        if header_flag(headers, RESET_HEADER) {
            return Ok(Some(Fault::Reset));
        }
        if let Some(value) = header_str(headers, STATUS_HEADER) {
            return forced_status(value).map(|status| Some(Fault::Status(status)));
        }
        Ok(drawn)
    }

    /// One independent draw per fault kind, in a fixed order; the first hit wins.
    fn roll(&self) -> Option<Fault> {
        let mut rng = self.rng.lock().unwrap_or_else(PoisonError::into_inner);
        let draws: [f64; 4] = std::array::from_fn(|_| rng.random::<f64>());
        let faults = [
            (self.reset_rate, Fault::Reset),
            (self.error_429_rate, Fault::Status(StatusCode::TOO_MANY_REQUESTS)),
            (self.error_500_rate, Fault::Status(StatusCode::INTERNAL_SERVER_ERROR)),
            (self.slow_rate, Fault::Slow),
        ];
        draws.iter().zip(faults).find(|(draw, (rate, _))| **draw < *rate).map(|(_, (_, fault))| fault)
    }

    /// The `Retry-After` seconds of an injected `status`: `x-sim-retry-after` on a 429 or 503,
    /// else `--retry-after-secs` on a 429; `None` for no header.
    pub fn retry_after(&self, status: StatusCode, headers: &HeaderMap) -> Result<Option<u64>, SimError> {
        let pausing = status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::SERVICE_UNAVAILABLE;
        let forced = header_str(headers, RETRY_AFTER_HEADER).filter(|_| pausing);
        let secs = match forced {
            Some(value) => value
                .parse::<u64>()
                .map_err(|_| SimError::BadRequest(format!("{RETRY_AFTER_HEADER} must be an integer")))?,
            None if status == StatusCode::TOO_MANY_REQUESTS => self.retry_after_secs,
            None => 0,
        };
        Ok((secs > 0).then_some(secs))
    }
}

/// `response` with its `Retry-After` set to `secs`, or removed for `None`.
fn with_retry_after(mut response: Response, secs: Option<u64>) -> Response {
    let headers = response.headers_mut();
    match secs {
        Some(secs) => {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        None => {
            headers.remove(header::RETRY_AFTER);
        }
    }
    response
}

fn forced_status(value: &str) -> Result<StatusCode, SimError> {
    value
        .parse::<u16>()
        .ok()
        .filter(|code| (400..=599).contains(code))
        .and_then(|code| StatusCode::from_u16(code).ok())
        .ok_or_else(|| SimError::BadRequest(format!("{STATUS_HEADER} must be 400..=599")))
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim)
}

/// Whether a switch header such as `x-sim-reset` is on (`1` or `true`; anything else is off).
fn header_flag(headers: &HeaderMap, name: &str) -> bool {
    header_str(headers, name).is_some_and(|v| v == "1" || v == "true")
}

/// Whether the request asks for its KV-cache event batch to be dropped ([`KV_DROP_HEADER`]).
pub fn kv_drop(headers: &HeaderMap) -> bool {
    header_flag(headers, KV_DROP_HEADER)
}

/// Whether the request asks for its tool traffic back ([`ECHO_TOOLS_HEADER`]).
pub fn echo_tools(headers: &HeaderMap) -> bool {
    header_flag(headers, ECHO_TOOLS_HEADER)
}

/// The text knobs a request asks for ([`ECHO_PROMPT_HEADER`], [`CHUNK_CHARS_HEADER`]); a
/// malformed or zero chunk size is a 400.
pub fn knobs(headers: &HeaderMap) -> Result<Knobs, SimError> {
    let chunk_chars = header_count(headers, CHUNK_CHARS_HEADER)?;
    if chunk_chars == Some(0) {
        return Err(SimError::BadRequest(format!("{CHUNK_CHARS_HEADER} must be at least 1")));
    }
    Ok(Knobs { echo_prompt: header_flag(headers, ECHO_PROMPT_HEADER), chunk_chars })
}

/// A count header such as `x-sim-stream-end-after`; absent → `None`, malformed → 400.
pub fn header_count(headers: &HeaderMap, name: &str) -> Result<Option<usize>, SimError> {
    header_str(headers, name)
        .map(|value| value.parse::<usize>().map_err(|_| SimError::BadRequest(format!("{name} must be an integer"))))
        .transpose()
}

/// A millisecond header such as `x-sim-ttft-ms`; absent → `None`, malformed → 400.
pub fn header_ms(headers: &HeaderMap, name: &str) -> Result<Option<Duration>, SimError> {
    header_str(headers, name)
        .map(|value| {
            value
                .parse::<u64>()
                .map(Duration::from_millis)
                .map_err(|_| SimError::BadRequest(format!("{name} must be an integer")))
        })
        .transpose()
}

/// The response that makes the connection drop: marked for `sim::run`, and with a body that
/// errors before yielding a byte in case the router is served some other way.
pub fn reset_response() -> Response {
    let failing = futures_util::stream::once(async { Err::<Bytes, _>(ConnectionReset) });
    let mut response = Response::new(Body::from_stream(failing));
    response.extensions_mut().insert(ConnectionReset);
    response
}

/// Middleware on the inference routes applying the fault decided for each request; errors
/// are answered in the dialect of the request's path.
pub async fn inject(State(state): State<Arc<SimState>>, mut request: Request, next: Next) -> Response {
    let dialect = Dialect::of_path(request.uri().path());
    match state.faults.decide(request.headers()) {
        Err(error) => error.render(dialect),
        Ok(Some(Fault::Reset)) => reset_response(),
        Ok(Some(Fault::Status(status))) => match state.faults.retry_after(status, request.headers()) {
            Ok(secs) => with_retry_after(SimError::Injected(status).render(dialect), secs),
            Err(error) => error.render(dialect),
        },
        Ok(Some(Fault::Slow)) => {
            request.extensions_mut().insert(ExtraDelay(state.faults.slow));
            next.run(request).await
        }
        Ok(None) => next.run(request).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn injector(configure: impl FnOnce(&mut SimArgs)) -> FaultInjector {
        let mut args = SimArgs::default();
        configure(&mut args);
        FaultInjector::new(&args)
    }

    #[test]
    fn rates_zero_and_one_are_never_and_always() {
        let none = injector(|_| {});
        assert!((0..100).all(|_| none.decide(&HeaderMap::new()).unwrap().is_none()));
        let always = injector(|a| a.error_500_rate = 1.0);
        let fault = always.decide(&HeaderMap::new()).unwrap();
        assert_eq!(fault, Some(Fault::Status(StatusCode::INTERNAL_SERVER_ERROR)));
    }

    #[test]
    fn same_seed_same_fault_sequence() {
        let run = |seed| {
            let inj = injector(|a| {
                a.seed = seed;
                a.error_429_rate = 0.5;
            });
            (0..64).map(|_| inj.decide(&HeaderMap::new()).unwrap()).collect::<Vec<_>>()
        };
        let a = run(7);
        assert_eq!(a, run(7));
        assert_ne!(a, run(8));
        assert!(a.contains(&None) && a.contains(&Some(Fault::Status(StatusCode::TOO_MANY_REQUESTS))));
    }

    #[test]
    fn retry_after_defaults_on_429_and_is_set_per_request() {
        let (tmr, unavailable) = (StatusCode::TOO_MANY_REQUESTS, StatusCode::SERVICE_UNAVAILABLE);
        let inj = injector(|_| {});
        let mut headers = HeaderMap::new();
        assert_eq!(inj.retry_after(tmr, &headers).unwrap(), Some(1), "the old fixed value by default");
        assert_eq!(inj.retry_after(unavailable, &headers).unwrap(), None);
        headers.insert(RETRY_AFTER_HEADER, HeaderValue::from_static("20"));
        assert_eq!(inj.retry_after(tmr, &headers).unwrap(), Some(20));
        assert_eq!(inj.retry_after(unavailable, &headers).unwrap(), Some(20));
        assert_eq!(inj.retry_after(StatusCode::INTERNAL_SERVER_ERROR, &headers).unwrap(), None);
        headers.insert(RETRY_AFTER_HEADER, HeaderValue::from_static("0"));
        assert_eq!(inj.retry_after(tmr, &headers).unwrap(), None);
        headers.insert(RETRY_AFTER_HEADER, HeaderValue::from_static("soon"));
        assert!(inj.retry_after(tmr, &headers).is_err());
        let quiet = injector(|a| a.retry_after_secs = 0);
        assert_eq!(quiet.retry_after(tmr, &HeaderMap::new()).unwrap(), None);
        let long = injector(|a| a.retry_after_secs = 20);
        let response = with_retry_after(SimError::Injected(tmr).render(Dialect::OpenAi), Some(20));
        assert_eq!(response.headers()["retry-after"], "20");
        assert_eq!(long.retry_after(tmr, &HeaderMap::new()).unwrap(), Some(20));
    }

    #[test]
    fn headers_force_faults_and_reject_bad_values() {
        let inj = injector(|_| {});
        let mut headers = HeaderMap::new();
        headers.insert(STATUS_HEADER, HeaderValue::from_static("503"));
        let fault = inj.decide(&headers).unwrap();
        assert_eq!(fault, Some(Fault::Status(StatusCode::SERVICE_UNAVAILABLE)));
        headers.insert(STATUS_HEADER, HeaderValue::from_static("200"));
        assert!(inj.decide(&headers).is_err());
        headers.insert(RESET_HEADER, HeaderValue::from_static("1"));
        assert_eq!(inj.decide(&headers).unwrap(), Some(Fault::Reset));
        headers.insert(TTFT_HEADER, HeaderValue::from_static("x"));
        assert!(header_ms(&headers, TTFT_HEADER).is_err());
        assert!(!kv_drop(&headers));
        for (value, on) in [("1", true), ("true", true), ("0", false), ("yes", false)] {
            headers.insert(KV_DROP_HEADER, HeaderValue::from_static(value));
            assert_eq!(kv_drop(&headers), on, "{value}");
        }
        assert_eq!(header_ms(&headers, ITL_HEADER).unwrap(), None);
    }
}
