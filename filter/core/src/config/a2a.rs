//! The `a2a_agents:` block and the `a2a` grants of keys and groups: which A2A agents the
//! gateway fronts at `/a2a/{agent}`, with which credential, and which keys may reach them.
//! Indexed here on its own, like `mcp_servers:` ([`super::mcp`]), whose credential rules it
//! shares.

use serde::{Deserialize, Serialize};

use super::mcp::{credential, timeout, Auth, McpCredential};
use super::syntax::{self, BaseUrl};
use super::validate::Problems;

/// The prefix of an agent's upstream cluster name (`a2a:<name>`).
pub const CLUSTER_PREFIX: &str = "a2a:";

/// One entry of `a2a_agents:` as written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RawA2aAgent {
    /// Slug: the `{agent}` of `/a2a/{agent}`.
    #[cfg_attr(feature = "schema", schemars(regex(pattern = super::syntax::SLUG_PATTERN)))]
    pub name: String,
    /// The agent's JSON-RPC endpoint, `scheme://host[:port][/path]`; its card is read at
    /// `/.well-known/agent-card.json` on the same origin.
    pub url: String,
    /// How the agent's credential is sent: `bearer` (default), `header` or `none`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<String>,
    /// The header of `auth: header`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_header: Option<String>,
    /// Name of the environment variable holding the agent's credential.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// The credential, filled in from `api_key_env` by the sidecar; never written in a file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    /// Deadline of a whole POST exchange with the agent (answer streamed or not), in
    /// milliseconds; absent: the proxy's route timeout. GET streams are never cut by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// A cap on every caller of the agent together, as an MCP server's `limits`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<super::RawLimits>,
}

/// A validated A2A agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct A2aAgent {
    /// Name.
    pub name: String,
    /// Its JSON-RPC endpoint; `path_prefix` is the endpoint's path.
    pub url: BaseUrl,
    /// `:authority` to send.
    pub authority: String,
    /// The credential sent in place of the caller's.
    pub credential: Option<McpCredential>,
    /// Environment variable the credential comes from.
    pub api_key_env: Option<String>,
    /// The upstream cluster: `a2a:<name>`.
    pub cluster: String,
    /// Deadline of a POST exchange in milliseconds ([`super::mcp::McpServer::timeout_ms`]).
    pub timeout_ms: Option<u64>,
    /// Its agent-wide limits, counting every caller together.
    pub limits: super::AgentLimits,
}

/// Every A2A agent, indexed by name.
pub type A2aAgents = super::named::Named<A2aAgent>;

/// Checks `a2a_agents:`.
pub(super) fn validate(raw: &[RawA2aAgent], p: &mut Problems) -> A2aAgents {
    A2aAgents::validate("a2a_agents", raw, |r| r.name.as_str(), agent, p)
}

fn agent(i: usize, raw: &RawA2aAgent, p: &mut Problems) -> Option<A2aAgent> {
    let at = |field: &str| format!("a2a_agents[{i}].{field}");
    p.check(at("name"), syntax::check_slug(&raw.name));
    let url = p.check(at("url"), syntax::parse_base_url(&raw.url));
    if let Some(var) = &raw.api_key_env {
        p.check(at("api_key_env"), syntax::check_env_name(var));
    }
    if raw.auth.as_deref() == Some("oauth_client_credentials") {
        p.add(at("auth"), "unknown auth \"oauth_client_credentials\" (expected bearer, header or none)");
    }
    let auth = Auth { auth: raw.auth.as_deref(), header: raw.auth_header.as_deref(), key: raw.api_key.as_deref() };
    let credential = credential(auth, &at, p);
    let limits = super::validate::server_limits(&at("limits"), raw.limits.as_ref(), p);
    let url = url?;
    Some(A2aAgent {
        name: raw.name.clone(),
        authority: url.authority(),
        url,
        credential,
        api_key_env: raw.api_key_env.clone(),
        cluster: format!("{CLUSTER_PREFIX}{}", raw.name),
        timeout_ms: timeout(raw.timeout_ms, &at, p),
        limits,
    })
}

/// Which agents one key may reach, and per agent which JSON-RPC methods.
pub type A2aGrants = super::grants::Scoped;

/// Checks the `a2a` patterns at `section` (`*`, `agent`, `agent/<method glob>`) against the
/// configured agents.
pub(super) fn check_grants(section: &str, patterns: &[String], agents: &A2aAgents, p: &mut Problems) {
    super::grants::check(section, patterns, agents, ("A2A agent", "method"), p);
}

#[cfg(test)]
mod tests {
    use crate::auth::Caller;
    use crate::config::{Config, RawConfig};

    fn config(yaml: &str) -> Result<Config, Vec<String>> {
        let raw: RawConfig = serde_saphyr::from_str(yaml).map_err(|e| vec![e.to_string()])?;
        Config::try_from(raw).map_err(|e| e.problems.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn agents_are_indexed_and_granted_by_name() {
        let c = config(
            "
a2a_agents:
  - {name: echo, url: 'http://127.0.0.1:9999/', api_key: t}
  - {name: open, url: 'https://agents.example/rpc', auth: none}
groups: [{name: g, a2a: [open]}]
keys:
  - {name: a, digest: 'sha256:0000000000000000000000000000000000000000000000000000000000000001', a2a: [echo]}
  - {name: b, digest: 'sha256:0000000000000000000000000000000000000000000000000000000000000002', groups: [g]}
  - {name: c, digest: 'sha256:0000000000000000000000000000000000000000000000000000000000000003', a2a: ['*']}
",
        )
        .unwrap();
        let (i, echo) = c.a2a.get("echo").unwrap();
        assert_eq!((i, echo.cluster.as_str(), echo.url.path_prefix.as_str()), (0, "a2a:echo", ""));
        assert_eq!(echo.credential.clone().unwrap().value, "Bearer t");
        let allows = |key: Caller, agent: usize| c.a2a_access(key, agent).is_some();
        assert!(allows(Caller::Key(0), 0) && !allows(Caller::Key(0), 1));
        assert!(allows(Caller::Key(1), 1) && !allows(Caller::Key(1), 0));
        assert!(allows(Caller::Key(2), 0) && allows(Caller::Key(2), 1));
        assert!(!allows(Caller::Open, 0));
    }

    #[test]
    fn methods_are_granted_by_glob_after_the_agent() {
        let c = config(
            "
a2a_agents: [{name: echo, url: 'http://127.0.0.1:9999/', auth: none}]
groups: [{name: readers, a2a: ['echo/Get*']}]
keys:
  - {name: a, digest: 'sha256:0000000000000000000000000000000000000000000000000000000000000001', a2a: ['echo/SendMessage', 'echo/message/*'], groups: [readers]}
  - {name: b, digest: 'sha256:0000000000000000000000000000000000000000000000000000000000000002', a2a: ['echo/*', 'echo/GetTask']}
",
        )
        .unwrap();
        let a = c.a2a_access(Caller::Key(0), 0).unwrap();
        assert!(!a.is_all());
        for (method, allowed) in [
            ("SendMessage", true),
            ("message/send", true),
            ("GetTask", true),
            ("CancelTask", false),
            ("tasks/cancel", false),
        ] {
            assert_eq!(a.allows(method), allowed, "{method}");
        }
        assert!(c.a2a_access(Caller::Key(1), 0).unwrap().is_all(), "echo/* is every method");
    }

    #[test]
    fn bad_agents_and_grants_are_reported() {
        let problems = config(
            "
a2a_agents:
  - {name: e, url: 'ws://h'}
  - {name: f, url: 'http://h', auth: oauth_client_credentials}
keys:
  - {name: a, digest: 'sha256:0000000000000000000000000000000000000000000000000000000000000001', a2a: [ghost, 'f/', 'ghost/GetTask']}
",
        )
        .unwrap_err();
        let paths: Vec<&str> = problems.iter().map(|p| p.split(": ").next().unwrap()).collect();
        let want = ["a2a_agents[0].url", "a2a_agents[1].auth", "keys[0].a2a[0]", "keys[0].a2a[1]", "keys[0].a2a[2]"];
        assert_eq!(paths, want, "{problems:#?}");
    }
}
