//! The limits of MCP and A2A traffic: `mcp_requests_per_*` (every request on `/mcp/…` or
//! `/a2a/…` counts 1) and `tool_calls_per_*` (each MCP `tools/call` and each A2A message send
//! counts 1), on keys, groups and the org like the model limits, and on each MCP server and A2A
//! agent (`mcp_servers[i].limits`, `a2a_agents[i].limits`) as a cap on all its callers together.
//!
//! They are counted by the same counters, windows and leases as the model limits, with plans of
//! their own: a request to `/mcp/{server}` is checked against its key's MCP/A2A plan (key,
//! groups, org) followed by the server's ([`AgentPlans::plan`]), never against a model plan,
//! and a model request never against these. A request takes `1` on the `mcp_requests` counters
//! when its headers arrive ([`Amounts::AGENT_REQUEST`]) and a granted tool call `1` on the
//! `tool_calls` counters once its body shows it ([`Amounts::TOOL_CALL`]); nothing is settled.

use std::borrow::Cow;
use std::sync::Arc;

use super::plan::table_specs;
use super::{Amounts, LimitSpec, Metric, Scope, Window};
use crate::config::{AgentLimits, Config};

/// What an MCP/A2A request is addressed to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The MCP server at this index of `mcp_servers`.
    Mcp(usize),
    /// The A2A agent at this index of `a2a_agents`.
    A2a(usize),
}

/// The MCP/A2A plans of a configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentPlans {
    /// Per key, in key order: its own limits, its groups', the org's.
    pub keys: Vec<Arc<[LimitSpec]>>,
    /// For callers without a key: the org's.
    pub open: Arc<[LimitSpec]>,
    /// Per MCP server, in `mcp_servers` order: its own cap.
    pub mcp_servers: Vec<Arc<[LimitSpec]>>,
    /// Per A2A agent, in `a2a_agents` order: its own cap.
    pub a2a_agents: Vec<Arc<[LimitSpec]>>,
}

impl AgentPlans {
    /// The limits a request of key `key` (`None`: an open caller) to `target` is checked
    /// against: the caller's, then the server's. Borrowed unless both have some (then the two
    /// are copied into one list, which the refusal's index points into).
    pub fn plan(&self, key: Option<usize>, target: Target) -> Cow<'_, [LimitSpec]> {
        let caller = match key {
            Some(i) => self.keys.get(i).map_or(&[][..], |p| &p[..]),
            None => &self.open[..],
        };
        let server = match target {
            Target::Mcp(i) => self.mcp_servers.get(i),
            Target::A2a(i) => self.a2a_agents.get(i),
        };
        let server = server.map_or(&[][..], |p| &p[..]);
        match (caller.is_empty(), server.is_empty()) {
            (_, true) => Cow::Borrowed(caller),
            (true, false) => Cow::Borrowed(server),
            (false, false) => Cow::Owned(caller.iter().chain(server).cloned().collect()),
        }
    }

    /// Whether any caller or server has one of these limits.
    pub fn any(&self) -> bool {
        self.all_specs().next().is_some()
    }

    /// Every MCP/A2A limit (a group's or the org's once per key that has it).
    pub fn all_specs(&self) -> impl Iterator<Item = &LimitSpec> {
        let callers = self.keys.iter().flat_map(|p| p.iter()).chain(self.open.iter());
        let servers = self.mcp_servers.iter().chain(&self.a2a_agents).flat_map(|p| p.iter());
        callers.chain(servers)
    }
}

/// The MCP/A2A plans of a validated configuration.
pub(super) fn build(config: &Config) -> AgentPlans {
    let org = specs(Scope::Org, "", &config.limits.agent());
    let keys = config
        .keys
        .iter()
        .map(|k| {
            let mut all = specs(Scope::Key, &k.name, &k.limits.agent());
            for g in k.groups.iter().filter_map(|&g| config.groups.get(g)) {
                all.extend(specs(Scope::Group, &g.name, &g.limits.agent()));
            }
            all.extend(org.iter().cloned());
            Arc::from(all)
        })
        .collect();
    let mcp_servers = config.mcp.items.iter().map(|s| Arc::from(specs(Scope::McpServer, &s.name, &s.limits))).collect();
    let a2a_agents = config.a2a.items.iter().map(|a| Arc::from(specs(Scope::A2aAgent, &a.name, &a.limits))).collect();
    AgentPlans { keys, open: Arc::from(org), mcp_servers, a2a_agents }
}

fn specs(scope: Scope, name: &str, l: &AgentLimits) -> Vec<LimitSpec> {
    let table = [
        (Metric::McpRequests, Window::Minute, l.mcp_requests_per_minute),
        (Metric::McpRequests, Window::Day, l.mcp_requests_per_day),
        (Metric::ToolCalls, Window::Minute, l.tool_calls_per_minute),
        (Metric::ToolCalls, Window::Day, l.tool_calls_per_day),
    ];
    table_specs(scope, name, &table, l.max_wait_ms)
}

/// What a usage record of an MCP or A2A call counted: its target, from the record's provider
/// (`mcp:<server>`, `a2a:<agent>`), and what it took of the limits (every MCP record is a
/// `tools/call`; an A2A one is a tool call when its method sends a message). `None` for a
/// model request's record, or a server no longer configured.
pub fn recorded(config: &Config, provider: &str, method: &str) -> Option<(Target, Amounts)> {
    use crate::config::{a2a, mcp};
    if let Some(name) = provider.strip_prefix(mcp::CLUSTER_PREFIX) {
        let (i, _) = config.mcp.get(name)?;
        return Some((Target::Mcp(i), Amounts { tool_calls: 1, ..Amounts::AGENT_REQUEST }));
    }
    let (i, _) = config.a2a.get(provider.strip_prefix(a2a::CLUSTER_PREFIX)?)?;
    let tool_calls = u64::from(crate::a2a::is_send(method));
    Some((Target::A2a(i), Amounts { tool_calls, ..Amounts::AGENT_REQUEST }))
}

#[cfg(test)]
#[path = "agent_tests.rs"]
mod tests;
