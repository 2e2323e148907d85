//! Requests to token endpoints: bounded answers, and errors that name the endpoint, the status
//! and the error code it gave, never a body (a misconfigured endpoint could echo the form,
//! client secret included).

use reqwest::StatusCode;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::{check_token, CloudError, Credential};

/// Largest answer read from a token endpoint.
pub(super) const BODY_LIMIT: usize = 64 << 10;
/// Lifetime assumed when an OAuth answer gives none (RFC 6749 leaves `expires_in` optional).
const DEFAULT_LIFETIME_SECS: u64 = 3600;
/// Longest error description kept from an answer.
const DESCRIPTION_LIMIT: usize = 300;

/// Sends `request` (to `what`, for errors) and reads the status and body.
pub(super) async fn send(request: reqwest::RequestBuilder, what: &str) -> Result<(StatusCode, Vec<u8>), CloudError> {
    let mut resp = request.send().await.map_err(|e| CloudError::Endpoint(format!("{what}: {}", cause(&e))))?;
    let status = resp.status();
    let too_large = || CloudError::Endpoint(format!("{what}: answer larger than {BODY_LIMIT} bytes"));
    if resp.content_length().is_some_and(|n| n > BODY_LIMIT as u64) {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) =
        resp.chunk().await.map_err(|e| CloudError::Endpoint(format!("{what}: reading the answer: {}", cause(&e))))?
    {
        if body.len() + chunk.len() > BODY_LIMIT {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok((status, body))
}

/// A transport error's kind and cause chain (reqwest's own message names the URL, which is
/// already said).
fn cause(e: &reqwest::Error) -> String {
    let what = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "cannot connect"
    } else if e.is_redirect() {
        "redirected (not followed)"
    } else {
        "request failed"
    };
    let mut chain = vec![what.to_string()];
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        chain.push(s.to_string());
        source = s.source();
    }
    chain.join(": ")
}

/// An OAuth 2.0 token answer (Google's token endpoint and metadata server, Entra ID).
#[derive(Deserialize)]
struct TokenAnswer {
    access_token: String,
    /// A number, or a numeric string (Entra's v1 endpoints and some proxies send one).
    #[serde(default, deserialize_with = "lenient_secs")]
    expires_in: Option<u64>,
}

fn lenient_secs<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let bad = || serde::de::Error::custom("expires_in is not a number of seconds");
    match Option::<Value>::deserialize(d)? {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => {
            n.as_u64().or_else(|| n.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64)).map(Some).ok_or_else(bad)
        }
        Some(Value::String(s)) => s.trim().parse().map(Some).map_err(|_| bad()),
        Some(_) => Err(bad()),
    }
}

/// The bearer token of an OAuth answer from `what`, and when it ends (Unix seconds).
pub(super) fn bearer(
    what: &str,
    status: StatusCode,
    body: &[u8],
    now: u64,
) -> Result<(Credential, Option<u64>), CloudError> {
    if !status.is_success() {
        return Err(CloudError::Endpoint(format!("{what}: {}", oauth_error(status, body))));
    }
    let answer: TokenAnswer = serde_json::from_slice(body)
        .map_err(|e| CloudError::Answer(format!("{what}: not an OAuth token answer: {e}")))?;
    check_token(&answer.access_token)?;
    let lifetime = answer.expires_in.unwrap_or(DEFAULT_LIFETIME_SECS);
    Ok((Credential::Bearer(answer.access_token), Some(now.saturating_add(lifetime))))
}

/// An OAuth error answer as `status: error: description` (RFC 6749 §5.2), or the status and
/// size alone when the body is not one.
fn oauth_error(status: StatusCode, body: &[u8]) -> String {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let field = |name: &str| parsed.as_ref().and_then(|v| v.get(name)).and_then(Value::as_str).map(str::to_string);
    match (field("error"), field("error_description")) {
        (Some(code), Some(description)) => format!("{status}: {code}: {}", clip(&description)),
        (Some(code), None) => format!("{status}: {code}"),
        _ => format!("{status} ({}-byte answer)", body.len()),
    }
}

/// `text` cut to [`DESCRIPTION_LIMIT`] characters, on a character boundary.
pub(super) fn clip(text: &str) -> String {
    match text.char_indices().nth(DESCRIPTION_LIMIT) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// A form body of `pairs`.
pub(super) fn form(pairs: &[(&str, &str)]) -> String {
    let mut f = form_urlencoded::Serializer::new(String::new());
    for (name, value) in pairs {
        f.append_pair(name, value);
    }
    f.finish()
}

/// POSTs the form `body` to `url`; the status and answer.
pub(super) async fn post_form(
    http: &reqwest::Client,
    url: &str,
    body: String,
) -> Result<(StatusCode, Vec<u8>), CloudError> {
    let request = http.post(url).header(reqwest::header::CONTENT_TYPE, "application/x-www-form-urlencoded").body(body);
    send(request, url).await
}
