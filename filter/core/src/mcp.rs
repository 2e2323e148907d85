//! MCP (Model Context Protocol) wire logic for the filter, which fronts MCP servers over
//! Streamable HTTP: reading what a client's JSON-RPC message asks for (method, id, and the
//! tool, prompt or resource it names) so the caller's grants can be checked before it reaches
//! the server; answering a refused message with a JSON-RPC error; and hiding ungranted tools
//! from a server's `tools/list` answer. Pure functions of bytes, like the rest of the crate.
//!
//! - [`jsonrpc`]: [`scan`] reads one client message, [`error_body`] writes an error answer.
//! - [`glob`]: [`glob_match`], the `*`/`?` patterns grants name tools with.
//! - [`tools`]: [`filter_list`] and [`filter_list_sse`] rewrite a `tools/list` answer, as JSON
//!   or as an event stream.
//! - [`session`]: `Mcp-Session-Id` sealed to the key and server that opened the session.
//! - [`sse`]: event streams rewritten event by event, the HTTP+SSE transport's endpoint.
//! - [`refusal`]: a refused `tools/call` on the HTTP+SSE transport, answered on its GET stream.
//! - [`path`]: [`upstream_path`], where a request to `/mcp/{server}…` goes on the server.
//! - [`federation`]: what the filter and the sidecar agree on for the federated `/mcp`.

pub mod federation;
pub mod glob;
pub mod jsonrpc;
pub mod path;
pub mod refusal;
pub mod session;
pub mod sse;
pub mod tools;

pub use glob::glob_match;
pub use jsonrpc::{error_body, scan, Kind, Message, ScanError};
pub use path::upstream_path;
pub use sse::{EventSplitter, SseError};
pub use tools::{filter_list, filter_list_sse, FilterError, MAX_TOOLS};

#[cfg(test)]
mod tests;
