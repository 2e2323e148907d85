//! `auth: oauth_client_credentials`: an MCP server whose tokens the sidecar fetches with the
//! OAuth 2.0 client-credentials grant (RFC 6749 §4.4), and hands to the filter as the server's
//! `api_key`, refreshed before they expire. The client secret stays with the sidecar: it is
//! read from `client_secret_env` when a token is fetched and never enters a snapshot.

use serde::{Deserialize, Serialize};

use super::super::syntax;
use super::super::validate::Problems;

/// A server's `oauth:` block as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RawMcpOauth {
    /// The authorization server's token endpoint.
    pub token_url: String,
    /// The gateway's client id there.
    pub client_id: String,
    /// The environment variable holding the client secret.
    pub client_secret_env: String,
    /// Space-separated scopes to ask for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// The RFC 8707 `resource` to ask a token for (default: the server's `url`, which MCP
    /// servers check as the token's audience).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
}

/// A validated `oauth:` block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpOauth {
    /// The token endpoint.
    pub token_url: String,
    /// The client id.
    pub client_id: String,
    /// Where the client secret is read from.
    pub client_secret_env: String,
    /// Scopes, if any.
    pub scope: Option<String>,
    /// The `resource` parameter.
    pub resource: String,
}

/// Checks `oauth:` against `auth` (`at` gives a field's path); the server's `url` is the
/// default resource.
pub(super) fn validate(
    raw: Option<&RawMcpOauth>,
    oauth_auth: bool,
    url: &str,
    at: &dyn Fn(&str) -> String,
    p: &mut Problems,
) -> Option<McpOauth> {
    let raw = match (raw, oauth_auth) {
        (Some(raw), true) => raw,
        (None, true) => {
            p.add(at("oauth"), "auth: oauth_client_credentials needs an oauth block");
            return None;
        }
        (Some(_), false) => {
            p.add(at("oauth"), "is only read with auth: oauth_client_credentials");
            return None;
        }
        (None, false) => return None,
    };
    p.check(at("oauth.token_url"), syntax::parse_base_url(&raw.token_url));
    p.check(at("oauth.client_secret_env"), syntax::check_env_name(&raw.client_secret_env));
    if raw.client_id.is_empty() || raw.client_id.chars().any(char::is_control) {
        p.add(at("oauth.client_id"), "must not be empty or hold control characters");
    }
    Some(McpOauth {
        token_url: raw.token_url.clone(),
        client_id: raw.client_id.clone(),
        client_secret_env: raw.client_secret_env.clone(),
        scope: raw.scope.clone(),
        resource: raw.resource.clone().unwrap_or_else(|| url.to_string()),
    })
}
