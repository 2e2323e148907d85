//! Single sign-on with an OpenID provider (`admin.oidc`): authorization code + PKCE.

use ferrogate_core::config::admin::Oidc;

use super::Identity;
use crate::services::admin::Admin;
use crate::services::openapi::Operation;

/// The OpenID relying party: settings, and (once fetched) discovery and keys.
#[derive(Debug)]
pub struct OidcClient {
    /// `admin.oidc`, validated.
    pub settings: Oidc,
}

impl OidcClient {
    /// A client for `settings`; nothing is fetched until the first login.
    pub fn new(settings: Oidc) -> OidcClient {
        OidcClient { settings }
    }
}

/// Where to send the browser to end its session at the provider (RP-initiated logout), when
/// the provider offers it.
pub async fn end_session_url(_identity: &Identity, _id_token: Option<&str>) -> Option<String> {
    None
}

/// The login routes (`/api/v1/auth/oidc/...`).
pub fn router() -> axum::Router<Admin> {
    axum::Router::new()
}

/// The login routes' operations.
pub fn operations() -> Vec<Operation> {
    Vec::new()
}
