//! Which counters a request is checked against, flattened once per configuration: per key,
//! its own limits, then each of its groups', then the org-wide default; for open mode (no
//! keys) the org-wide default alone. Model requests and MCP/A2A requests have plans of their
//! own ([`Plans::for_key`], [`Plans::for_agent`]), so neither is ever counted by the other's
//! limits.
//!
//! Counters are named `ferrogate.limit.<scope>.<name>.<metric>.<window>`. The MCP/A2A metrics
//! have names of their own (`mcp_requests`, `tool_calls`, never `requests`, `tokens` or
//! `usd`), and metric names hold no dot, so the counter of a key's `tool_calls_per_minute` can
//! never be one of its model counters; a server's cap has a scope of its own (`mcp_server`,
//! `a2a_agent`), so a server named like a key or a group does not share its counters either.

use std::sync::Arc;

use super::Window;
use crate::config::{Config, Limits};

/// What a counter counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Metric {
    /// Requests admitted.
    Requests,
    /// Prompt plus completion tokens.
    Tokens,
    /// Cost in micro-USD.
    MicroUsd,
    /// MCP and A2A requests admitted (every request on `/mcp/…` or `/a2a/…`).
    McpRequests,
    /// MCP `tools/call`s and A2A message sends admitted.
    ToolCalls,
}

impl Metric {
    /// Every metric, in the order of [`Metric::index`].
    pub const ALL: [Metric; 5] =
        [Metric::Requests, Metric::Tokens, Metric::MicroUsd, Metric::McpRequests, Metric::ToolCalls];

    /// Short name used in counter keys and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Metric::Requests => "requests",
            Metric::Tokens => "tokens",
            Metric::MicroUsd => "usd",
            Metric::McpRequests => "mcp_requests",
            Metric::ToolCalls => "tool_calls",
        }
    }

    /// The position in [`Metric::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// Whether it counts requests or calls (1 each, nothing to settle), not tokens or cost.
    pub fn counts_calls(self) -> bool {
        matches!(self, Metric::Requests | Metric::McpRequests | Metric::ToolCalls)
    }

    /// Whether it counts MCP/A2A traffic rather than model requests.
    pub fn is_agent(self) -> bool {
        matches!(self, Metric::McpRequests | Metric::ToolCalls)
    }

    /// What a limit's message calls the unit.
    fn unit(self) -> &'static str {
        match self {
            Metric::MicroUsd => "micro-USD",
            Metric::McpRequests => "MCP/A2A requests",
            Metric::ToolCalls => "tool calls",
            m => m.as_str(),
        }
    }
}

/// Whose limit it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The key's own.
    Key,
    /// One of its groups'.
    Group,
    /// The org-wide default.
    Org,
    /// An MCP server's own cap, on all its callers together.
    McpServer,
    /// An A2A agent's own cap, on all its callers together.
    A2aAgent,
}

impl Scope {
    /// Short name used in counter keys and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Key => "key",
            Scope::Group => "group",
            Scope::Org => "org",
            Scope::McpServer => "mcp_server",
            Scope::A2aAgent => "a2a_agent",
        }
    }

    /// How a limit's message names it.
    fn label(self) -> &'static str {
        match self {
            Scope::McpServer => "MCP server",
            Scope::A2aAgent => "A2A agent",
            s => s.as_str(),
        }
    }
}

/// One limit a request is checked against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitSpec {
    /// Shared-data key of its counter, e.g. `ferrogate.limit.group.dev.tokens.day`.
    pub counter: String,
    /// Whose limit.
    pub scope: Scope,
    /// The key's or group's name (`""` for the org).
    pub name: String,
    /// What it counts.
    pub metric: Metric,
    /// Over what span.
    pub window: Window,
    /// The most the window may hold (micro-USD for budgets).
    pub limit: u64,
    /// With leases (limits shared through Redis), how long a request may wait for a grant
    /// when this limit's lease is short.
    pub max_wait_ms: u64,
}

impl LimitSpec {
    /// Says what the limit allows, e.g. `key bob allows 1500 tokens per day` or
    /// `MCP server tools allows 100 tool calls per minute`.
    pub fn describe(&self) -> String {
        let whose = match self.name.as_str() {
            "" => self.scope.label().to_string(),
            name => format!("{} {name}", self.scope.label()),
        };
        format!("{whose} allows {} {} per {}", self.limit, self.metric.unit(), self.window.as_str())
    }
}

/// The flattened limits of a configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plans {
    /// Per key, in key order: the limits of its model requests.
    pub keys: Vec<Arc<[LimitSpec]>>,
    /// For callers without a key (open mode): the org-wide default.
    pub open: Arc<[LimitSpec]>,
    /// What counts MCP/A2A traffic ([`super::agent`]): per key, and for open callers.
    pub agents: super::agent::AgentPlans,
    /// Whether any caller has a limit, model or MCP/A2A (computed once).
    pub any: bool,
}

impl Plans {
    /// The limits of key `index`, or of an open caller.
    pub fn for_key(&self, index: Option<usize>) -> &[LimitSpec] {
        match index {
            Some(i) => self.keys.get(i).map_or(&[][..], |p| &p[..]),
            None => &self.open,
        }
    }

    /// The MCP/A2A limits of a request of key `index` (`None`: an open caller) to `target`
    /// ([`super::agent::AgentPlans::plan`]).
    pub fn for_agent(&self, index: Option<usize>, target: super::agent::Target) -> std::borrow::Cow<'_, [LimitSpec]> {
        self.agents.plan(index, target)
    }

    /// Every limit of the configuration, model and MCP/A2A alike; a group's or the org's once
    /// per key that has it.
    pub fn all_specs(&self) -> impl Iterator<Item = &LimitSpec> {
        let model = self.keys.iter().flat_map(|p| p.iter()).chain(self.open.iter());
        model.chain(self.agents.all_specs())
    }
}

/// The window a counter's name ends with (`ferrogate.limit.<scope>.<name>.<metric>.<window>`,
/// as [`build_plans`] names them).
pub fn window_of(counter: &str) -> Option<Window> {
    Window::parse(counter.rsplit('.').next()?)
}

/// Flattens the limits of every key of a validated configuration.
pub fn build_plans(config: &Config) -> Plans {
    let org = specs(Scope::Org, "", &config.limits);
    let keys = config
        .keys
        .iter()
        .map(|k| {
            let mut all = specs(Scope::Key, &k.name, &k.limits);
            for g in k.groups.iter().filter_map(|&g| config.groups.get(g)) {
                all.extend(specs(Scope::Group, &g.name, &g.limits));
            }
            all.extend(org.iter().cloned());
            Arc::from(all)
        })
        .collect::<Vec<Arc<[LimitSpec]>>>();
    let agents = super::agent::build(config);
    let any = !org.is_empty() || keys.iter().any(|p: &Arc<[LimitSpec]>| !p.is_empty()) || agents.any();
    Plans { keys, open: Arc::from(org), agents, any }
}

/// The model limits of one block (MCP/A2A ones are [`super::agent`]'s).
fn specs(scope: Scope, name: &str, l: &Limits) -> Vec<LimitSpec> {
    let usd = |v: Option<f64>| v.map(|d| (d * 1e6).round() as u64);
    let table = [
        (Metric::Requests, Window::Minute, l.requests_per_minute),
        (Metric::Requests, Window::Day, l.requests_per_day),
        (Metric::Tokens, Window::Minute, l.tokens_per_minute),
        (Metric::Tokens, Window::Day, l.tokens_per_day),
        (Metric::Tokens, Window::Month, l.tokens_per_month),
        (Metric::MicroUsd, Window::Day, usd(l.cost_usd_per_day)),
        (Metric::MicroUsd, Window::Month, usd(l.cost_usd_per_month)),
    ];
    table_specs(scope, name, &table, l.max_wait_ms)
}

/// The specs of `table`'s set limits, as `(metric, window, limit)`.
pub(super) fn table_specs(
    scope: Scope,
    name: &str,
    table: &[(Metric, Window, Option<u64>)],
    max_wait_ms: u64,
) -> Vec<LimitSpec> {
    table
        .iter()
        .filter_map(|&(metric, window, limit)| {
            let limit = limit?;
            let counter = format!("ferrogate.limit.{}.{name}.{}.{}", scope.as_str(), metric.as_str(), window.as_str());
            Some(LimitSpec { counter, scope, name: name.to_string(), metric, window, limit, max_wait_ms })
        })
        .collect()
}
