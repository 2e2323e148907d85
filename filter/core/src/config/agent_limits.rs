//! [`AgentLimits`]: the limits that count MCP and A2A traffic, kept apart from the model
//! limits ([`crate::limits::agent`]).

use super::Limits;

/// The limits that count MCP and A2A traffic: a part of [`Limits`] (keys, groups, the org), and
/// the whole `limits` block an MCP server or an A2A agent takes (a cap on all its callers).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AgentLimits {
    /// MCP and A2A requests per minute (sliding 60 s).
    pub mcp_requests_per_minute: Option<u64>,
    /// MCP and A2A requests per day (sliding 24 h).
    pub mcp_requests_per_day: Option<u64>,
    /// MCP `tools/call`s and A2A message sends per minute (sliding 60 s).
    pub tool_calls_per_minute: Option<u64>,
    /// MCP `tools/call`s and A2A message sends per day (sliding 24 h).
    pub tool_calls_per_day: Option<u64>,
    /// As [`Limits::max_wait_ms`].
    pub max_wait_ms: u64,
}

impl Limits {
    /// The part of these limits that counts MCP and A2A traffic.
    pub fn agent(&self) -> AgentLimits {
        AgentLimits {
            mcp_requests_per_minute: self.mcp_requests_per_minute,
            mcp_requests_per_day: self.mcp_requests_per_day,
            tool_calls_per_minute: self.tool_calls_per_minute,
            tool_calls_per_day: self.tool_calls_per_day,
            max_wait_ms: self.max_wait_ms,
        }
    }
}
