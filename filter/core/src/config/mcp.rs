//! The `mcp_servers:` block and the `mcp` grants of keys and groups: which MCP servers the
//! gateway fronts at `/mcp/{server}`, with which credential, and which tools each key may call.
//!
//! The section is validated and indexed here on its own (it takes names and patterns, never
//! the whole configuration), so the filter's MCP path depends on this file and
//! [`crate::mcp`] only.
//!
//! Grant patterns, in a key's or group's `mcp` list:
//!
//! | pattern | covers |
//! |---|---|
//! | `*` | every tool of every server |
//! | `server` or `server/*` | every tool of that server |
//! | `server/<glob>` | the tools of that server whose names match (`*` any run, `?` one character) |
//!
//! A key with no pattern (its own or its groups') may use no server.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::syntax::{self, BaseUrl};
use super::validate::Problems;

mod oauth;
pub use oauth::{McpOauth, RawMcpOauth};

/// The prefix of an MCP server's upstream cluster name (`mcp:<name>`), apart from providers'.
pub const CLUSTER_PREFIX: &str = "mcp:";

/// One entry of `mcp_servers:` as written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RawMcpServer {
    /// Slug: the `{server}` of `/mcp/{server}` and the prefix of its tools when federated.
    #[cfg_attr(feature = "schema", schemars(regex(pattern = super::syntax::SLUG_PATTERN)))]
    pub name: String,
    /// The server's MCP endpoint, `scheme://host[:port]/path` (e.g. `http://tools:8000/mcp`).
    pub url: String,
    /// `streamable_http` (default) or `sse` (the 2024-11-05 HTTP+SSE transport).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<String>,
    /// How the server's credential is sent: `bearer` (default), `header`, `none`, or
    /// `oauth_client_credentials` (a bearer token the sidecar fetches, see `oauth`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<String>,
    /// The header that carries the credential with `auth: header` (e.g. `x-api-key`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_header: Option<String>,
    /// Name of the environment variable that holds the server's credential.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// The credential itself, filled in from `api_key_env` by the sidecar (as for providers);
    /// never written in a config file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    /// Where tokens come from with `auth: oauth_client_credentials`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth: Option<RawMcpOauth>,
    /// Deadline of a whole POST exchange with the server (answer streamed or not), in
    /// milliseconds; absent: the proxy's route timeout. GET streams are never cut by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// A cap on every caller of the server together: `mcp_requests_per_*`, `tool_calls_per_*`
    /// and `max_wait_ms` only ([`crate::limits`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<super::RawLimits>,
}

/// The MCP transport a server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// One endpoint taking POSTs (2025-03-26 and later).
    StreamableHttp,
    /// A GET event stream naming a POST endpoint (2024-11-05).
    Sse,
}

/// The header and value that carry a server's credential.
#[derive(Clone, PartialEq, Eq)]
pub struct McpCredential {
    /// Lower-case header name.
    pub name: String,
    /// Full header value (`Bearer <token>` for `authorization`).
    pub value: String,
}

impl fmt::Debug for McpCredential {
    // Credentials must never reach logs, even through `{:?}` of a whole config.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "McpCredential {{ name: {:?}, value: <redacted> }}", self.name)
    }
}

/// A validated MCP server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServer {
    /// Name.
    pub name: String,
    /// Where it listens; `path_prefix` is the endpoint's path.
    pub url: BaseUrl,
    /// `:authority` to send.
    pub authority: String,
    /// Its transport.
    pub transport: Transport,
    /// The credential sent in place of the caller's, when it has one.
    pub credential: Option<McpCredential>,
    /// Environment variable the credential comes from.
    pub api_key_env: Option<String>,
    /// Where the sidecar fetches its tokens (`auth: oauth_client_credentials`).
    pub oauth: Option<McpOauth>,
    /// The upstream cluster: `mcp:<name>`.
    pub cluster: String,
    /// Deadline of a POST exchange in milliseconds, sent to the proxy as
    /// [`crate::headers::UPSTREAM_TIMEOUT`]; `None`: the route timeout applies.
    pub timeout_ms: Option<u64>,
    /// Its server-wide limits, counting every caller together.
    pub limits: super::AgentLimits,
}

/// Every MCP server, indexed by name.
pub type McpServers = super::named::Named<McpServer>;

/// Checks `mcp_servers:`.
pub(super) fn validate(raw: &[RawMcpServer], p: &mut Problems) -> McpServers {
    McpServers::validate("mcp_servers", raw, |r| r.name.as_str(), server, p)
}

fn server(i: usize, raw: &RawMcpServer, p: &mut Problems) -> Option<McpServer> {
    let at = |field: &str| format!("mcp_servers[{i}].{field}");
    p.check(at("name"), syntax::check_slug(&raw.name));
    let url = p.check(at("url"), syntax::parse_base_url(&raw.url));
    let transport = match raw.transport.as_deref() {
        None | Some("streamable_http") => Transport::StreamableHttp,
        Some("sse") => Transport::Sse,
        Some(other) => {
            p.add(at("transport"), format!("unknown transport {other:?} (expected streamable_http or sse)"));
            Transport::StreamableHttp
        }
    };
    if let Some(var) = &raw.api_key_env {
        p.check(at("api_key_env"), syntax::check_env_name(var));
    }
    let credential = credential(
        Auth { auth: raw.auth.as_deref(), header: raw.auth_header.as_deref(), key: raw.api_key.as_deref() },
        &at,
        p,
    );
    let oauth_auth = raw.auth.as_deref() == Some("oauth_client_credentials");
    let oauth = oauth::validate(raw.oauth.as_ref(), oauth_auth, &raw.url, &at, p);
    if oauth_auth && raw.api_key_env.is_some() {
        p.add(at("api_key_env"), "is not read with auth: oauth_client_credentials (the sidecar fetches the tokens)");
    }
    let limits = super::validate::server_limits(&at("limits"), raw.limits.as_ref(), p);
    let url = url?;
    Some(McpServer {
        name: raw.name.clone(),
        authority: url.authority(),
        url,
        transport,
        credential,
        api_key_env: raw.api_key_env.clone(),
        oauth,
        cluster: format!("{CLUSTER_PREFIX}{}", raw.name),
        timeout_ms: timeout(raw.timeout_ms, &at, p),
        limits,
    })
}

/// The longest `timeout_ms` of an MCP server or an A2A agent: an hour.
pub const MAX_TIMEOUT_MS: u64 = 3_600_000;

/// An upstream's `timeout_ms`: between 1 and [`MAX_TIMEOUT_MS`] (0 would mean "none" to the
/// proxy, and a day-long call is a mistake rather than a deadline).
pub(super) fn timeout(raw: Option<u64>, at: &dyn Fn(&str) -> String, p: &mut Problems) -> Option<u64> {
    let ms = raw?;
    if (1..=MAX_TIMEOUT_MS).contains(&ms) {
        Some(ms)
    } else {
        p.add(at("timeout_ms"), format!("{ms} is not between 1 and {MAX_TIMEOUT_MS} ms"));
        None
    }
}

/// An upstream's `auth`, `auth_header` and resolved `api_key`, as written.
pub(super) struct Auth<'a> {
    pub(super) auth: Option<&'a str>,
    pub(super) header: Option<&'a str>,
    pub(super) key: Option<&'a str>,
}

/// The credential header of an MCP server or an A2A agent.
pub(super) fn credential(raw: Auth<'_>, at: &dyn Fn(&str) -> String, p: &mut Problems) -> Option<McpCredential> {
    let name = match (raw.auth, raw.header) {
        (None | Some("bearer" | "oauth_client_credentials"), None) => Some("authorization".to_string()),
        (Some("none"), None) => None,
        (Some("header"), Some(h)) => p.check(at("auth_header"), header_name(h)),
        (Some("header"), None) => {
            p.add(at("auth_header"), "auth: header needs the header's name");
            None
        }
        (_, Some(_)) => {
            p.add(at("auth_header"), "is only read with auth: header");
            None
        }
        (Some(other), None) => {
            let expected = "expected bearer, header, none or oauth_client_credentials";
            p.add(at("auth"), format!("unknown auth {other:?} ({expected})"));
            None
        }
    };
    let key = raw.key?;
    if key.is_empty() || key.bytes().any(|b| b.is_ascii_control() || b == b' ') {
        p.add(at("api_key"), "key is empty or contains spaces or control characters");
        return None;
    }
    let name = name?;
    let value = if name == "authorization" { format!("Bearer {key}") } else { key.to_string() };
    Some(McpCredential { name, value })
}

/// A header name the credential may go in: an RFC 9110 token, and not one the gateway or
/// the MCP transport owns.
fn header_name(h: &str) -> Result<String, String> {
    let lower = h.to_ascii_lowercase();
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if lower.is_empty() || !lower.bytes().all(token) {
        return Err(format!("{h:?} is not a header name"));
    }
    if lower.starts_with("mcp-") || lower.starts_with("x-ferrogate-") || lower == "host" || lower == "content-type" {
        return Err(format!("{h:?} is used by MCP or the gateway"));
    }
    Ok(lower)
}

/// What one key may reach: servers and, per server, tool-name patterns.
pub type McpGrants = super::grants::Scoped;

/// The tools a key may call on one server.
pub type ToolAccess<'a> = super::grants::Access<'a>;

/// Checks the `mcp` patterns at `section` against the configured servers.
pub(super) fn check_grants(section: &str, patterns: &[String], servers: &McpServers, p: &mut Problems) {
    super::grants::check(section, patterns, servers, ("MCP server", "tool"), p);
}

#[cfg(test)]
#[path = "mcp_tests.rs"]
mod tests;
