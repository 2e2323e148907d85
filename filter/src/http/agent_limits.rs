//! Limits on `/mcp/{server}` and `/a2a/{agent}` ([`ferrogate_core::limits::agent`]): the same
//! counters, windows, leases and refusals as model requests, on the MCP/A2A plan of the key
//! (its own, its groups', the org's) followed by the server's or agent's own cap.
//!
//! Two steps, each counting 1 and nothing to settle:
//!
//! - **At the headers**, once the server and the grant are known, every request takes its
//!   `mcp_requests` counters ([`Stream::admit_agent_request`]), so a GET stream or a DELETE
//!   counts like a POST and a refused request never reaches the server.
//! - **At the body**, a granted `tools/call` (MCP) or message send (A2A) takes its
//!   `tool_calls` counters ([`Stream::admit_tool_call`]); a call the grant refuses is answered
//!   before, and counts nothing.
//!
//! With leases either step may wait for a grant ([`super::lease_wait`]), as a model request
//! does. A POST's body keeps arriving while its headers wait: when it ends first it is held
//! (the wait's `body_held`) and read once the request is admitted ([`Stream::agent_resumed`]).
//! A refusal is the 429 (with `Retry-After`) a model limit gives, written as a JSON-RPC error
//! with the request's id when the body was read, and counted in the metrics by what it counts.

use std::borrow::Cow;

use ferrogate_core::config::Config;
use ferrogate_core::limits::agent::Target;
use ferrogate_core::limits::{Amounts, LimitSpec};
use proxy_wasm::types::Action;

use super::admission::Admission;
use super::Stream;

impl Stream {
    /// Whether the stream is an MCP or A2A one.
    pub(super) fn is_agent(&self) -> bool {
        self.mcp.is_some() || self.a2a.is_some()
    }

    /// The limits this stream is checked against: its MCP/A2A plan on an MCP or A2A path,
    /// else its key's model plan.
    pub(super) fn limit_plan<'c>(&self, config: &'c Config) -> Cow<'c, [LimitSpec]> {
        let key = self.caller.key_index();
        let target = match (&self.mcp, &self.a2a) {
            (Some(mcp), _) => Target::Mcp(mcp.server),
            (None, Some(a2a)) => Target::A2a(a2a.agent),
            (None, None) => return Cow::Borrowed(config.limit_plans.for_key(key)),
        };
        config.limit_plans.for_agent(key, target)
    }

    /// The JSON-RPC id of the MCP/A2A message being answered, once its body was read.
    pub(super) fn agent_rpc_id(&self) -> Option<String> {
        let mcp = self.mcp.as_ref().and_then(|s| s.id.clone());
        mcp.or_else(|| self.a2a.as_ref().and_then(|s| s.id.clone()))
    }

    /// The end of an MCP/A2A request's head (its stream state set): the request is counted,
    /// then goes on at once without a body, or once its body is read (held, as the model APIs
    /// are); or it waits for a lease grant, or is refused.
    pub(super) fn agent_head_done(&mut self, config: &Config, eos: bool) -> Action {
        match self.admit_agent_request(config) {
            Err(action) => action,
            Ok(true) => Action::Pause,
            Ok(false) if eos => Action::Continue,
            Ok(false) => Action::Pause,
        }
    }

    /// The request's own count, at its headers (the stream's MCP/A2A state is set). `Ok(true)`:
    /// it waits for a lease grant, and goes on from [`Stream::agent_resumed`].
    pub(super) fn admit_agent_request(&mut self, config: &Config) -> Result<bool, Action> {
        let now_ms = self.started_ns / 1_000_000;
        self.admit_agent(config, Amounts::AGENT_REQUEST, now_ms).map(|a| a == Admission::Wait)
    }

    /// A granted tool call's count, at the body: `Continue` when admitted (or under no such
    /// limit), `Pause` while it waits for a grant, or the refusal's action. The usage record's
    /// `admitted` then says whether the call was counted.
    pub(super) fn admit_tool_call(&mut self, config: &Config) -> Action {
        let request = self.reservation.take();
        let now_ms = self.callback_start_ns / 1_000_000;
        match self.admit_agent(config, Amounts::TOOL_CALL, now_ms) {
            Ok(Admission::Now) => {
                // No tool-call limit: the request's own admission stands.
                self.reservation = self.reservation.take().or(request);
                Action::Continue
            }
            Ok(Admission::Wait) => Action::Pause,
            Err(action) => action,
        }
    }

    /// Takes `amounts` from the stream's MCP/A2A limits, locally or from the leases (the
    /// same rules as a model request's admission, `redis.fail_closed` included).
    fn admit_agent(&mut self, config: &Config, amounts: Amounts, now_ms: u64) -> Result<Admission, Action> {
        let plan = self.limit_plan(config);
        if !plan.iter().any(|s| amounts.of(s.metric).is_some()) {
            return Ok(Admission::Now);
        }
        if self.admission_mode(config, now_ms)? {
            return self.admit_leased(config, amounts, now_ms);
        }
        self.admit_local(&plan, amounts, now_ms).map(|()| Admission::Now)
    }

    /// Goes on after a lease wait: a body that ended meanwhile is read and checked now (which
    /// may count a tool call in turn); a body still coming goes on when it ends.
    pub(super) fn agent_resumed(&mut self, body_held: bool) -> Action {
        if body_held {
            return self.agent_body_end();
        }
        if self.agent_awaits_body() {
            return Action::Pause;
        }
        Action::Continue
    }
}
