//! The federated `/mcp`: one MCP server over every server the key may use, answered by the
//! sidecar ([`ferrogate_core::mcp::federation`]).
//!
//! Here the key is authenticated and the servers it is granted are named to the sidecar; the
//! request then flows to the sidecar's cluster unbuffered. The sidecar reaches each server
//! through the gateway's own `/mcp/{server}` with the caller's key, so every check, swap and
//! record of [`super`] applies to those calls too: this endpoint adds no second policy.

use ferrogate_core::config::mcp::{McpCredential, Transport};
use ferrogate_core::config::Config;
use ferrogate_core::mcp::federation::{self, Member};
use ferrogate_core::openai::ApiError;
use proxy_wasm::traits::HttpContext;
use proxy_wasm::types::Action;

use super::super::head::Head;
use super::super::Stream;
use super::Upstream;

impl Stream {
    /// The request head of `/mcp`: the key's servers named, its key handed on, and the
    /// request sent to the sidecar.
    pub(in crate::http) fn start_mcp_federated(&mut self, config: &Config, head: &Head) -> Action {
        let Some(sidecar) = self.shared.plugin.as_ref().and_then(|p| p.sidecar.clone()) else {
            return self.reply_error(&ApiError::mcp_federation_unavailable());
        };
        let mut members = self.federation_members(config);
        // The sidecar takes this many; more would be refused there as a whole.
        members.truncate(federation::MAX_MEMBERS);
        if members.is_empty() {
            return self.reply_error(&ApiError::mcp_no_servers());
        }
        let key = head.client_key().and_then(|k| std::str::from_utf8(k).ok()).map(str::to_string);
        let (_, query) = ferrogate_core::route::split_query(head.path);
        let path = match query {
            Some(q) => format!("{}?{q}", federation::PATH),
            None => federation::PATH.to_string(),
        };
        let internal = sidecar
            .internal_token
            .as_ref()
            .map(|t| McpCredential { name: "authorization".into(), value: format!("Bearer {t}") });
        let to = Upstream { cluster: &sidecar.cluster, authority: &sidecar.authority, path: &path };
        self.route_upstream(head, internal.as_ref(), &to);
        // Set after the swap, so a client's own copy of either header is replaced.
        self.set_http_request_header(federation::MEMBERS_HEADER, Some(&federation::members_header(&members)));
        self.set_http_request_header(federation::CLIENT_KEY_HEADER, key.as_deref());
        // No deadline of the client's: the sidecar's answer is bounded by the members' own.
        self.set_upstream_timeout(head.method, None);
        self.federated_mcp = true;
        Action::Continue
    }

    /// The servers the caller may use, in the configuration's order.
    fn federation_members(&self, config: &Config) -> Vec<Member> {
        let granted = config.mcp.items.iter().enumerate().filter(|(i, _)| config.mcp_access(self.caller, *i).is_some());
        granted
            .map(|(_, s)| Member { name: s.name.clone(), sse: s.transport == Transport::Sse, timeout_ms: s.timeout_ms })
            .collect()
    }

    /// The answer's head on a federated stream: the proxy's own text error (the sidecar
    /// down) is held to become a JSON-RPC error. `None` when the stream is not federated.
    pub(in crate::http) fn federated_response_headers(&mut self, end_of_stream: bool) -> Option<Action> {
        if !self.federated_mcp {
            return None;
        }
        let head = self.answer_head(end_of_stream);
        Some(if self.hold_agent_proxy_error(head.plain, end_of_stream) { Action::Pause } else { Action::Continue })
    }

    /// The answer's body on a federated stream: passed on as it comes, or the held proxy
    /// error rewritten. `None` when the stream is not federated.
    pub(in crate::http) fn federated_response_body(&mut self, body_size: usize, end_of_stream: bool) -> Option<Action> {
        if !self.federated_mcp {
            return None;
        }
        if end_of_stream {
            self.response_complete = true;
        }
        Some(if self.proxy_error { self.rewrite_proxy_error(body_size, end_of_stream) } else { Action::Continue })
    }
}
