//! Lists fanned out to every member at once (tools, prompts, resources, resource templates):
//! each item's `name` prefixed with its server's (`<server>__<name>`, URIs kept as they are),
//! every page followed, and what answers within the member's deadline listed; the members
//! that failed are named in the result's `_meta`.

use std::time::Duration;

use ferrogate_core::mcp::federation::{qualified, split, Member};
use serde_json::{json, Value};

use super::upstream::Link;
use super::RpcError;

/// The most pages of one member's list followed.
const MAX_PAGES: usize = 50;
/// How long a member without a `timeout_ms` may take to list before the list goes out
/// without it (one slow server must not hold every client's list).
const LIST_TIMEOUT: Duration = Duration::from_secs(10);
/// Where a partial list names the members that did not answer.
const UNAVAILABLE_META: &str = "io.ferrogate/unavailable";
/// JSON-RPC "method not found": a member without prompts or resources, which is no failure.
const METHOD_NOT_FOUND: i64 = -32601;

/// A list method and the field of its result holding the items.
#[derive(Debug, Clone, Copy)]
pub struct Kind {
    /// The JSON-RPC method.
    pub method: &'static str,
    /// The result's field holding the items.
    pub field: &'static str,
}

/// `tools/list`.
pub const TOOLS: Kind = Kind { method: "tools/list", field: "tools" };
/// `prompts/list`.
pub const PROMPTS: Kind = Kind { method: "prompts/list", field: "prompts" };
/// `resources/list`.
pub const RESOURCES: Kind = Kind { method: "resources/list", field: "resources" };
/// `resources/templates/list`.
pub const TEMPLATES: Kind = Kind { method: "resources/templates/list", field: "resourceTemplates" };

/// The kinds a client may list, by method.
pub fn kind_of(method: &str) -> Option<Kind> {
    [TOOLS, PROMPTS, RESOURCES, TEMPLATES].into_iter().find(|k| k.method == method)
}

/// Every member's items, renamed, and the members that failed.
pub struct Listing {
    /// The items of every member that answered.
    pub items: Vec<Value>,
    /// `{"server", "error"}` of each member that did not.
    pub unavailable: Vec<Value>,
}

impl Listing {
    /// The list method's result.
    pub fn into_result(self, kind: Kind) -> Value {
        let mut result = json!({kind.field: self.items});
        if !self.unavailable.is_empty() {
            result["_meta"] = json!({UNAVAILABLE_META: self.unavailable});
        }
        result
    }

    /// The server of the listed item whose `uri` is `uri` (resources).
    pub fn owner_of(&self, uri: &str) -> Option<&str> {
        let item = self.items.iter().find(|i| i.get("uri").and_then(Value::as_str) == Some(uri))?;
        split(item.get("name").and_then(Value::as_str)?).map(|(server, _)| server)
    }
}

/// Asks every member at once.
pub async fn list(link: &Link<'_>, kind: Kind) -> Listing {
    let each = link.caller.members.iter().map(|m| list_member(link, m, kind));
    let answers = futures_util::future::join_all(each).await;
    let mut listing = Listing { items: Vec::new(), unavailable: Vec::new() };
    for (member, answer) in link.caller.members.iter().zip(answers) {
        match answer {
            Ok(items) => listing.items.extend(items),
            Err(e) if e.code == METHOD_NOT_FOUND && kind.method != TOOLS.method => {}
            Err(e) => {
                tracing::warn!(server = %member.name, error = %e.message, "mcp federation: {} failed", kind.method);
                listing.unavailable.push(json!({"server": member.name, "error": e.message}));
            }
        }
    }
    listing
}

/// One member's items, every page, within the member's timeout.
async fn list_member(link: &Link<'_>, member: &Member, kind: Kind) -> Result<Vec<Value>, RpcError> {
    let limit = member.timeout_ms.map_or(LIST_TIMEOUT, Duration::from_millis);
    tokio::time::timeout(limit, list_pages(link, member, kind)).await.unwrap_or_else(|_| {
        let why = format!("MCP server `{}` answered no {} within {} ms", member.name, kind.method, limit.as_millis());
        Err(RpcError::internal(why))
    })
}

async fn list_pages(link: &Link<'_>, member: &Member, kind: Kind) -> Result<Vec<Value>, RpcError> {
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let params = cursor.as_ref().map_or_else(|| json!({}), |c| json!({"cursor": c}));
        let page = link.call(member, kind.method, params).await?;
        for mut item in page.get(kind.field).and_then(Value::as_array).cloned().unwrap_or_default() {
            let Some(name) = item.get("name").and_then(Value::as_str) else { continue };
            item["name"] = Value::String(qualified(&member.name, name));
            items.push(item);
        }
        cursor = page.get("nextCursor").and_then(Value::as_str).map(str::to_string);
        if cursor.is_none() {
            break;
        }
    }
    Ok(items)
}
