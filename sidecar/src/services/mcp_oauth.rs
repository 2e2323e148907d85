//! Tokens for MCP servers with `auth: oauth_client_credentials`: fetched from the server's
//! token endpoint with the client-credentials grant (RFC 6749 §4.4, the client secret in the
//! form body, RFC 8707 `resource` naming the server), kept until shortly before they expire,
//! then fetched again. Each new token is published in the snapshot as the server's `api_key`,
//! which the filter sends as `Authorization: Bearer`; the client secret never leaves the
//! sidecar.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ferrogate_core::config::mcp::RawMcpOauth;
use http::{header, Method, Request};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde::Deserialize;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::serve::egress::{GuardedConnector, PolicySource};
use crate::services::snapshot::Snapshots;

/// Longest wait for a token endpoint.
const TIMEOUT: Duration = Duration::from_secs(10);
/// Wait before trying a failed fetch again.
const RETRY: Duration = Duration::from_secs(2);
/// Lifetime assumed when the endpoint gives none (RFC 6749 leaves `expires_in` optional).
const DEFAULT_LIFETIME_SECS: u64 = 3600;
/// Largest token answer read.
const BODY_LIMIT: usize = 64 << 10;

/// Why a token could not be had.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The client secret's variable is not set.
    #[error("{0} is not set")]
    NoSecret(String),
    /// No answer, or not a 2xx.
    #[error("token endpoint: {0}")]
    Endpoint(String),
    /// A 2xx whose body is not a usable token.
    #[error("token endpoint answered without a usable access_token: {0}")]
    Answer(String),
}

#[derive(Deserialize)]
struct TokenAnswer {
    access_token: String,
    #[serde(default)]
    expires_in: Option<u64>,
}

/// When to fetch again after a token that lives `secs`: a minute before it expires, or after
/// four fifths of a short life, and never sooner than one second.
pub fn refresh_after(secs: u64) -> Duration {
    let ms = if secs > 300 { (secs - 60).saturating_mul(1000) } else { secs * 800 };
    Duration::from_millis(ms.max(1000))
}

/// The token request's form body.
fn form(oauth: &RawMcpOauth, secret: &str) -> String {
    let mut f = form_urlencoded::Serializer::new(String::new());
    f.append_pair("grant_type", "client_credentials");
    f.append_pair("client_id", &oauth.client_id);
    f.append_pair("client_secret", secret);
    if let Some(scope) = &oauth.scope {
        f.append_pair("scope", scope);
    }
    f.append_pair("resource", oauth.resource.as_deref().unwrap_or_default());
    f.finish()
}

type HttpClient = Client<hyper_rustls::HttpsConnector<GuardedConnector>, Full<Bytes>>;

/// Fetches one token: the token and its lifetime in seconds.
async fn fetch(client: &HttpClient, oauth: &RawMcpOauth) -> Result<(String, u64), TokenError> {
    let secret =
        std::env::var(&oauth.client_secret_env).map_err(|_| TokenError::NoSecret(oauth.client_secret_env.clone()))?;
    let request = Request::builder()
        .method(Method::POST)
        .uri(&oauth.token_url)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::ACCEPT, "application/json")
        .body(Full::new(Bytes::from(form(oauth, &secret))))
        .map_err(|e| TokenError::Endpoint(e.to_string()))?;
    let call = async {
        let response = client.request(request).await.map_err(|e| crate::serve::upstream::error_chain(&e))?;
        let status = response.status();
        let body = Limited::new(response.into_body(), BODY_LIMIT).collect().await.map_err(|e| e.to_string())?;
        Ok::<_, String>((status, body.to_bytes()))
    };
    let (status, body) = tokio::time::timeout(TIMEOUT, call)
        .await
        .map_err(|_| TokenError::Endpoint(format!("no answer within {TIMEOUT:?}")))?
        .map_err(TokenError::Endpoint)?;
    if !status.is_success() {
        let said = String::from_utf8_lossy(body.get(..body.len().min(200)).unwrap_or_default()).into_owned();
        return Err(TokenError::Endpoint(format!("{status} {said}")));
    }
    let answer: TokenAnswer = serde_json::from_slice(&body).map_err(|e| TokenError::Answer(e.to_string()))?;
    // It goes into a header: a value with spaces or control characters would break the whole
    // snapshot's validation, so it is refused here instead.
    let token = answer.access_token;
    if token.is_empty() || token.bytes().any(|b| b.is_ascii_control() || b == b' ') {
        return Err(TokenError::Answer("empty, or holds spaces or control characters".into()));
    }
    Ok((token, answer.expires_in.unwrap_or(DEFAULT_LIFETIME_SECS)))
}

/// One server's token schedule.
struct Held {
    oauth: RawMcpOauth,
    due: Instant,
}

/// Keeps every OAuth server of the published configuration supplied with a token, until
/// `shutdown`.
pub fn start(snapshots: Arc<Snapshots>, mut shutdown: watch::Receiver<bool>) {
    // The token endpoint is an upstream the configuration names: connections to it are
    // checked against the egress policy like the proxy's own.
    let served = snapshots.clone();
    let policy: PolicySource =
        Arc::new(move || served.current().map(|s| Arc::new(s.config.egress.clone())).unwrap_or_default());
    let tcp = GuardedConnector::new(policy, Some(TIMEOUT));
    let Some(connector) = crate::services::targets::probe::with_tls(tcp) else { return };
    let client: HttpClient = Client::builder(TokioExecutor::new()).build(connector);
    tokio::spawn(async move {
        let mut held: BTreeMap<String, Held> = BTreeMap::new();
        loop {
            let wanted = snapshots.oauth_wanted();
            held.retain(|name, h| wanted.iter().any(|(n, o)| n == name && *o == h.oauth));
            let mut changed = false;
            for (name, oauth) in wanted {
                if held.get(&name).is_some_and(|h| Instant::now() < h.due) {
                    continue;
                }
                let due = match fetch(&client, &oauth).await {
                    Ok((token, secs)) => {
                        tracing::info!(server = %name, expires_in = secs, "mcp: OAuth token fetched");
                        changed |= snapshots.set_oauth_token(&name, token);
                        Instant::now() + refresh_after(secs)
                    }
                    Err(e) => {
                        tracing::warn!(server = %name, error = %e, "mcp: no OAuth token; trying again");
                        Instant::now() + RETRY
                    }
                };
                held.insert(name, Held { oauth, due });
            }
            if changed {
                snapshots.republish();
            }
            let next = held.values().map(|h| h.due).min().unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
            tokio::select! {
                () = tokio::time::sleep_until(next) => {}
                () = snapshots.oauth_changed() => {}
                _ = shutdown.changed() => return,
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_fetched_again_before_they_expire() {
        assert_eq!(refresh_after(3600), Duration::from_secs(3540));
        assert_eq!(refresh_after(100), Duration::from_secs(80));
        assert_eq!(refresh_after(2), Duration::from_millis(1600));
        assert_eq!(refresh_after(0), Duration::from_secs(1), "never a busy loop");
    }

    #[test]
    fn the_form_names_the_grant_the_client_and_the_resource() {
        let oauth = RawMcpOauth {
            token_url: "http://idp/token".into(),
            client_id: "gate way".into(),
            client_secret_env: "S".into(),
            scope: Some("a b".into()),
            resource: Some("http://h/mcp".into()),
        };
        assert_eq!(
            form(&oauth, "s&cret"),
            "grant_type=client_credentials&client_id=gate+way&client_secret=s%26cret&scope=a+b&resource=http%3A%2F%2Fh%2Fmcp"
        );
    }
}
