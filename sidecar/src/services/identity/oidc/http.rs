//! Requests to the provider: bounded answers, errors that name the URL and the cause but never
//! a body that could hold a token.

use serde::de::DeserializeOwned;

/// Largest discovery document or key set read.
pub const DOCUMENT_LIMIT: usize = 256 << 10;
/// Largest token answer read (an ID token with many groups can be large).
pub const TOKEN_LIMIT: usize = 1 << 20;

/// The body of `resp`, refused beyond `limit` bytes.
pub async fn read_limited(mut resp: reqwest::Response, limit: usize) -> Result<Vec<u8>, String> {
    if resp.content_length().is_some_and(|n| n > limit as u64) {
        return Err(format!("answer larger than {limit} bytes"));
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| format!("reading the answer: {}", cause(&e)))? {
        if body.len() + chunk.len() > limit {
            return Err(format!("answer larger than {limit} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// GET `url` and read its JSON answer (200 only, at most `limit` bytes).
pub async fn get_json<T: DeserializeOwned>(http: &reqwest::Client, url: &str, limit: usize) -> Result<T, String> {
    let resp = http
        .get(url)
        .header(reqwest::header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(|e| format!("GET {url}: {}", cause(&e)))?;
    let status = resp.status();
    if status != reqwest::StatusCode::OK {
        return Err(format!("GET {url}: status {status}"));
    }
    let body = read_limited(resp, limit).await.map_err(|e| format!("GET {url}: {e}"))?;
    serde_json::from_slice(&body).map_err(|e| format!("GET {url}: not the expected JSON: {e}"))
}

/// A transport error's cause, without the URL's query (reqwest names the URL; ours hold no
/// secrets, but the error chain is what helps).
pub fn cause(e: &reqwest::Error) -> String {
    let what = if e.is_timeout() {
        "timed out".to_string()
    } else if e.is_connect() {
        "cannot connect".to_string()
    } else if e.is_redirect() {
        "redirected (not followed)".to_string()
    } else {
        "request failed".to_string()
    };
    let mut source = std::error::Error::source(e);
    let mut chain = Vec::new();
    while let Some(s) = source {
        chain.push(s.to_string());
        source = s.source();
    }
    if chain.is_empty() {
        what
    } else {
        format!("{what}: {}", chain.join(": "))
    }
}
