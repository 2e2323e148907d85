//! Single sign-on with an OpenID provider (`admin.oidc`): authorization code + PKCE.
//!
//! `GET /api/v1/session/oidc/login` keeps a login in flight (state, nonce, PKCE verifier, where to
//! go after) in PostgreSQL, bound to the browser by a pre-session cookie, and sends the browser
//! to the provider; `GET /api/v1/session/oidc/callback` takes it back (single use), trades the code
//! for an ID token, verifies the token against the provider's published keys, maps the user's
//! groups to a role and opens a session. The provider's discovery document and keys are
//! fetched at the first login and cached ([`discovery`], [`jwks`]); a token signed with a key
//! not seen yet makes the keys be fetched again (how a key rotation is followed).

use std::time::Duration;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Json;
use ferrogate_core::config::admin::Oidc;
use serde_json::json;

use super::Identity;
use crate::services::admin::Admin;
use crate::services::openapi::{Access, Answer, Operation};

pub mod claims;
pub mod discovery;
pub mod flow;
mod http;
pub mod jwks;
pub mod pkce;
mod store;
#[cfg(test)]
mod tests;

/// Longest wait for any request to the provider.
pub const TIMEOUT: Duration = Duration::from_secs(10);
/// Where the login routes live (the pre-session cookie's `Path`).
pub const ROUTES: &str = "/api/v1/session/oidc";

/// The OpenID relying party: settings, and (once fetched) discovery and keys.
#[derive(Debug)]
pub struct OidcClient {
    /// `admin.oidc`, validated.
    pub settings: Oidc,
    /// Requests to the provider: 10 s timeouts, no redirects followed.
    http: reqwest::Client,
    /// The provider's discovery document.
    discovery: discovery::Cache,
    /// The provider's signing keys.
    keys: jwks::Cache,
}

impl OidcClient {
    /// A client for `settings`; nothing is fetched until the first login.
    pub fn new(settings: Oidc) -> OidcClient {
        let http = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .connect_timeout(TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("ferrogate/", env!("CARGO_PKG_VERSION")))
            .build()
            .unwrap_or_default();
        OidcClient { settings, http, discovery: discovery::Cache::default(), keys: jwks::Cache::default() }
    }

    /// The provider's discovery document (cached; fetched when absent, after a failure, or
    /// when older than an hour).
    ///
    /// # Errors
    /// [`OidcError::Unavailable`] naming why the document could not be had or is refused.
    pub async fn discovery(&self) -> Result<std::sync::Arc<discovery::Discovery>, OidcError> {
        self.discovery.get(&self.http, &self.settings.issuer).await.map_err(OidcError::Unavailable)
    }
}

/// Why a login step failed; answered as `{"error": ...}` with the status of its kind. Messages
/// never hold a code, token, cookie or secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OidcError {
    /// `admin.oidc` is not configured (404).
    #[error("single sign-on is not configured (admin.oidc)")]
    NotConfigured,
    /// The file store: no users, so no SSO (409).
    #[error("single sign-on needs store: {{ kind: postgres }} (the file store has no users)")]
    FileStore,
    /// A malformed, unknown, expired or replayed request (400).
    #[error("{0}")]
    BadRequest(String),
    /// The provider refused the login, or its answer did not verify (401).
    #[error("{0}")]
    Refused(String),
    /// The user is known but may not use the admin API (403).
    #[error("{0}")]
    Forbidden(String),
    /// The provider or the database cannot be reached, or the provider is misconfigured (503).
    #[error("{0}")]
    Unavailable(String),
}

impl OidcError {
    /// The HTTP status of this failure.
    pub fn status(&self) -> StatusCode {
        match self {
            OidcError::NotConfigured => StatusCode::NOT_FOUND,
            OidcError::FileStore => StatusCode::CONFLICT,
            OidcError::BadRequest(_) => StatusCode::BAD_REQUEST,
            OidcError::Refused(_) => StatusCode::UNAUTHORIZED,
            OidcError::Forbidden(_) => StatusCode::FORBIDDEN,
            OidcError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

impl IntoResponse for OidcError {
    fn into_response(self) -> Response {
        (self.status(), Json(json!({"error": self.to_string()}))).into_response()
    }
}

/// Where to send the browser to end its session at the provider (RP-initiated logout), when
/// the provider offers it: its `end_session_endpoint` with `id_token_hint` (the session's ID
/// token, when known), `client_id` and `post_logout_redirect_uri` (when configured).
pub async fn end_session_url(identity: &Identity, id_token: Option<&str>) -> Option<String> {
    let client = identity.oidc.as_ref()?;
    let doc = match client.discovery().await {
        Ok(doc) => doc,
        Err(e) => {
            tracing::warn!(error = %e, "OIDC logout: no discovery document, so no end-session URL");
            return None;
        }
    };
    let endpoint = doc.end_session_endpoint.as_deref()?;
    let mut url = reqwest::Url::parse(endpoint).ok()?;
    {
        let mut q = url.query_pairs_mut();
        if let Some(token) = id_token {
            q.append_pair("id_token_hint", token);
        }
        q.append_pair("client_id", &client.settings.client_id);
        if let Some(uri) = &client.settings.post_logout_redirect_uri {
            q.append_pair("post_logout_redirect_uri", uri);
        }
    }
    Some(url.into())
}

/// The login routes (`/api/v1/session/oidc/...`).
pub fn router() -> axum::Router<Admin> {
    axum::Router::new()
        .route("/api/v1/session/oidc/login", get(flow::login))
        .route("/api/v1/session/oidc/callback", get(flow::callback))
}

/// The login routes' operations.
pub fn operations() -> Vec<Operation> {
    let login_query = json!({"type": "object", "properties": {
        "return_to": {"type": "string", "pattern": "^/([^/\\\\].*)?$", "maxLength": pkce::RETURN_TO_MAX,
            "description": "where to go after the login: a path on this host (default /)"}
    }});
    let callback_query = json!({"type": "object", "properties": {
        "code": {"type": "string", "description": "the authorization code"},
        "state": {"type": "string", "description": "the state sent with the login"},
        "iss": {"type": "string", "description": "the issuer (RFC 9207), checked when the provider advertises it"},
        "error": {"type": "string", "description": "the provider's refusal (answered 401)"},
        "error_description": {"type": "string"}
    }});
    vec![
        Operation {
            method: "get",
            path: format!("{ROUTES}/login"),
            summary: "Single sign-on: a new login (state, nonce, PKCE S256) and a 302 to the OpenID provider \
                      (404 without admin.oidc, 409 with the file store, 400 for a return_to that is not a path \
                      of this host, 503 when the provider's discovery fails)"
                .into(),
            access: Access::Public,
            request: None,
            query: Some(login_query),
            answer: Answer::Redirect,
            errors: vec![400, 404, 409, 503],
        },
        Operation {
            method: "get",
            path: format!("{ROUTES}/callback"),
            summary: "Single sign-on: the provider's answer; verifies the ID token, maps its groups to a role, \
                      opens a session (Set-Cookie) and 302s to return_to (400 unknown or replayed state, 401 \
                      refused or unverifiable, 403 no role or a disabled user, 409 file store, 503 provider or \
                      database unreachable)"
                .into(),
            access: Access::Public,
            request: None,
            query: Some(callback_query),
            answer: Answer::Redirect,
            errors: vec![400, 401, 403, 404, 409, 503],
        },
    ]
}
