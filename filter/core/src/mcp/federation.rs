//! The federated `/mcp` endpoint: one MCP server over every server a key may use.
//!
//! The filter authenticates the key at `/mcp` and hands the request to the sidecar, naming in
//! [`MEMBERS_HEADER`] the servers the key is granted; the sidecar answers as an MCP server and
//! reaches each member through the gateway's own `/mcp/{server}`, with the caller's key, so
//! grants, credentials, sessions, limits and records are enforced in one place, the filter.
//! What both sides must agree on lives here: the header's format, how tool names carry their
//! server ([`qualified`], [`split`]), and the ranking behind the `search_tools` meta-tool.

pub mod search;

/// Where the filter sends a federated request on the sidecar's filter-facing listener.
pub const PATH: &str = "/v1/mcp/federated";
/// The servers the caller may use, written by the filter: `name[;sse][;t=<ms>],…`.
pub const MEMBERS_HEADER: &str = "x-ferrogate-mcp-servers";
/// The caller's virtual key, moved here by the filter so the sidecar can call `/mcp/{server}`
/// as the caller (the internal token takes `Authorization`).
pub const CLIENT_KEY_HEADER: &str = "x-ferrogate-client-key";
/// Between a server's name and its tool's: server names are slugs, never holding `_`, so the
/// first `__` always ends the server's name.
pub const SEPARATOR: &str = "__";
/// The name sessions of the federated endpoint are sealed under ([`super::session`]); not a
/// valid server name, so such a session can never be presented to `/mcp/{server}`.
pub const SESSION_SCOPE: &str = "/mcp";
/// The most servers a header may name (bounds the fan-out).
pub const MAX_MEMBERS: usize = 256;

/// One server of the federation, as the filter describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The server's name (`/mcp/{name}`).
    pub name: String,
    /// It speaks the HTTP+SSE transport (2024-11-05), not streamable HTTP.
    pub sse: bool,
    /// Its `timeout`, in milliseconds, when it has one.
    pub timeout_ms: Option<u64>,
}

/// Why a members header was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MembersError {
    /// An entry is empty or names no valid server.
    #[error("malformed MCP server entry `{0}`")]
    Entry(String),
    /// An entry carries an attribute this version does not know.
    #[error("unknown attribute `{0}` in an MCP server entry")]
    Attribute(String),
    /// More than [`MAX_MEMBERS`] entries.
    #[error("more than {MAX_MEMBERS} MCP servers")]
    TooMany,
}

/// Writes the members header.
pub fn members_header(members: &[Member]) -> String {
    let mut out = String::new();
    for (i, m) in members.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&m.name);
        if m.sse {
            out.push_str(";sse");
        }
        if let Some(t) = m.timeout_ms {
            out.push_str(";t=");
            out.push_str(&t.to_string());
        }
    }
    out
}

/// Reads the members header (empty: no server).
pub fn parse_members(header: &str) -> Result<Vec<Member>, MembersError> {
    let mut members = Vec::new();
    for entry in header.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        if members.len() == MAX_MEMBERS {
            return Err(MembersError::TooMany);
        }
        let mut parts = entry.split(';');
        let name = parts.next().unwrap_or_default();
        if !is_slug(name) {
            return Err(MembersError::Entry(entry.to_string()));
        }
        let mut member = Member { name: name.to_string(), sse: false, timeout_ms: None };
        for attribute in parts {
            match attribute.split_once('=') {
                None if attribute == "sse" => member.sse = true,
                Some(("t", ms)) => {
                    member.timeout_ms = Some(ms.parse().map_err(|_| MembersError::Entry(entry.to_string()))?);
                }
                _ => return Err(MembersError::Attribute(attribute.to_string())),
            }
        }
        members.push(member);
    }
    Ok(members)
}

/// A server's name as the config allows it: `[a-z0-9][a-z0-9-]*`.
fn is_slug(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// A member's tool as the federated endpoint names it: `<server>__<tool>`.
pub fn qualified(server: &str, tool: &str) -> String {
    format!("{server}{SEPARATOR}{tool}")
}

/// The server and the tool of a federated tool name; `None` when it names no server.
pub fn split(name: &str) -> Option<(&str, &str)> {
    let (server, tool) = name.split_once(SEPARATOR)?;
    (is_slug(server) && !tool.is_empty()).then_some((server, tool))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_round_trip() {
        let members = vec![
            Member { name: "tools".into(), sse: false, timeout_ms: None },
            Member { name: "legacy-2".into(), sse: true, timeout_ms: Some(1500) },
        ];
        let header = members_header(&members);
        assert_eq!(header, "tools,legacy-2;sse;t=1500");
        assert_eq!(parse_members(&header), Ok(members));
        assert_eq!(parse_members(""), Ok(vec![]));
    }

    #[test]
    fn bad_members_are_refused() {
        assert_eq!(parse_members("Tools"), Err(MembersError::Entry("Tools".into())));
        assert_eq!(parse_members("a;t=x"), Err(MembersError::Entry("a;t=x".into())));
        assert_eq!(parse_members("a;json"), Err(MembersError::Attribute("json".into())));
        let many = vec!["s"; MAX_MEMBERS + 1].join(",");
        assert_eq!(parse_members(&many), Err(MembersError::TooMany));
    }

    #[test]
    fn names_split_at_the_first_separator() {
        assert_eq!(qualified("files", "read"), "files__read");
        assert_eq!(split("files__read"), Some(("files", "read")));
        // The tool's own name may hold the separator; the server's cannot.
        assert_eq!(split("files__read__all"), Some(("files", "read__all")));
        assert_eq!(split("read"), None);
        assert_eq!(split("files__"), None);
        assert_eq!(split("Files__read"), None);
        assert_eq!(split("__read"), None);
    }
}
