//! The federated endpoint's methods: `tools/list` fanned out to every member (whatever
//! answers in time is listed, the rest named as unavailable), `tools/call` routed by the
//! tool's prefix, and the opt-in search mode (`/mcp?tools=search`), where the list holds only
//! the `search_tools` and `call_tool` meta-tools.

use ferrogate_core::mcp::federation::search::{rank, Candidate};
use ferrogate_core::mcp::federation::{split, Member};
use serde_json::{json, Map, Value};

use super::listing::{self, list, RESOURCES, TOOLS};
use super::upstream::Link;
use super::RpcError;

/// `search_tools` answers this many tools unless asked otherwise, and never more than
/// [`MAX_FOUND`].
const DEFAULT_FOUND: usize = 5;
const MAX_FOUND: u64 = 20;
/// The search mode's meta-tool finding tools.
pub const SEARCH_TOOL: &str = "search_tools";
/// The search mode's meta-tool running a found tool.
pub const CALL_TOOL: &str = "call_tool";

/// Answers a request of the federated endpoint (not `initialize`, which needs no member).
pub async fn dispatch(link: &Link<'_>, method: &str, params: Value) -> Result<Value, RpcError> {
    match method {
        "ping" => Ok(json!({})),
        "tools/list" if link.caller.search => Ok(json!({"tools": meta_tools()})),
        "tools/call" => call(link, params).await,
        "prompts/get" => get_prompt(link, params).await,
        "resources/read" => read_resource(link, params).await,
        _ => match listing::kind_of(method) {
            Some(kind) => Ok(list(link, kind).await.into_result(kind)),
            None => Err(RpcError { code: -32601, message: format!("Method not found: {method}"), data: None }),
        },
    }
}

async fn call(link: &Link<'_>, params: Value) -> Result<Value, RpcError> {
    let name = params.get("name").and_then(Value::as_str).unwrap_or_default().to_string();
    let arguments = params.get("arguments").cloned().unwrap_or_else(|| json!({}));
    match name.as_str() {
        SEARCH_TOOL if link.caller.search => search(link, &arguments).await,
        CALL_TOOL if link.caller.search => {
            let inner = arguments.get("name").and_then(Value::as_str).unwrap_or_default();
            let args = arguments.get("arguments").cloned().unwrap_or_else(|| json!({}));
            call_member(link, inner, args, params.get("_meta").cloned()).await
        }
        _ => call_member(link, &name, arguments, params.get("_meta").cloned()).await,
    }
}

/// A `<server>__<tool>` call sent to its server; a name of no member server is an unknown
/// tool, as a server answers one.
async fn call_member(link: &Link<'_>, name: &str, arguments: Value, meta: Option<Value>) -> Result<Value, RpcError> {
    let (member, tool) = owner(link, name, "tool")?;
    let mut params = json!({"name": tool, "arguments": arguments});
    if let Some(meta) = meta {
        params["_meta"] = meta;
    }
    // The member's "unknown tool" names its own tool: the client asked for the federated one.
    link.call(member, "tools/call", params).await.map_err(|mut e| {
        if e.code == -32602 && e.message == format!("Unknown tool: {tool}") {
            e.message = format!("Unknown tool: {name}");
        }
        e
    })
}

/// The member a `<server>__<name>` names, and the name on that server; a name of no member is
/// unknown (`-32602 Unknown <what>: <name>`), as a server answers it.
fn owner<'l, 'n>(link: &Link<'l>, name: &'n str, what: &str) -> Result<(&'l Member, &'n str), RpcError> {
    let unknown = || RpcError { code: -32602, message: format!("Unknown {what}: {name}"), data: None };
    let (server, inner) = split(name).ok_or_else(unknown)?;
    Ok((link.caller.member(server).ok_or_else(unknown)?, inner))
}

/// `prompts/get` of `<server>__<prompt>`, sent to that server.
async fn get_prompt(link: &Link<'_>, mut params: Value) -> Result<Value, RpcError> {
    let name = params.get("name").and_then(Value::as_str).unwrap_or_default().to_string();
    let (member, prompt) = owner(link, &name, "prompt")?;
    params["name"] = Value::String(prompt.to_string());
    link.call(member, "prompts/get", params).await
}

/// `resources/read`: sent to the server that lists the URI (URIs are the servers' own, so the
/// lists are asked which one that is).
async fn read_resource(link: &Link<'_>, params: Value) -> Result<Value, RpcError> {
    let uri = params.get("uri").and_then(Value::as_str).unwrap_or_default();
    let listing = list(link, RESOURCES).await;
    let owner = listing.owner_of(uri).and_then(|s| link.caller.member(s));
    // -32002: "resource not found" in the revisions this endpoint speaks.
    let member =
        owner.ok_or_else(|| RpcError { code: -32002, message: format!("Resource not found: {uri}"), data: None })?;
    link.call(member, "resources/read", params).await
}

/// `search_tools`: the granted tools that best match the query, as a tool result.
async fn search(link: &Link<'_>, arguments: &Value) -> Result<Value, RpcError> {
    let query = arguments.get("query").and_then(Value::as_str).unwrap_or_default();
    if query.trim().is_empty() {
        return Ok(tool_error("search_tools needs a non-empty `query`"));
    }
    let limit =
        arguments.get("limit").and_then(Value::as_u64).map_or(DEFAULT_FOUND, |n| n.clamp(1, MAX_FOUND) as usize);
    let listing = list(link, TOOLS).await;
    let text = |t: &Value, field: &str| t.get(field).and_then(Value::as_str).unwrap_or_default().to_string();
    let fields: Vec<(String, String)> =
        listing.items.iter().map(|t| (text(t, "name"), text(t, "description"))).collect();
    let candidates: Vec<Candidate<'_>> =
        fields.iter().map(|(name, description)| Candidate { name, description }).collect();
    let found: Vec<Value> =
        rank(query, &candidates, limit).into_iter().filter_map(|i| listing.items.get(i)).map(summary).collect();
    let mut structured = Map::new();
    structured.insert("tools".into(), Value::Array(found));
    if !listing.unavailable.is_empty() {
        structured.insert("unavailable".into(), Value::Array(listing.unavailable));
    }
    let structured = Value::Object(structured);
    Ok(json!({
        "content": [{"type": "text", "text": structured.to_string()}],
        "structuredContent": structured,
        "isError": false,
    }))
}

/// What a found tool is shown with: enough to call it.
fn summary(tool: &Value) -> Value {
    let mut out = Map::new();
    for field in ["name", "title", "description", "inputSchema"] {
        if let Some(v) = tool.get(field) {
            out.insert(field.into(), v.clone());
        }
    }
    Value::Object(out)
}

fn tool_error(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": true})
}

/// The search mode's two tools.
fn meta_tools() -> Value {
    json!([
        {
            "name": SEARCH_TOOL,
            "description": "Find the tools for a task among every tool of the MCP servers this key may use. \
                            Returns the best matches with their names, descriptions and input schemas; \
                            run one with call_tool.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What the tool should do, in a few words"},
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_FOUND, "default": DEFAULT_FOUND}
                },
                "required": ["query"]
            }
        },
        {
            "name": CALL_TOOL,
            "description": "Run a tool found with search_tools, by its name, with its arguments.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "The tool's name as search_tools gave it"},
                    "arguments": {"type": "object", "description": "The tool's arguments, per its input schema"}
                },
                "required": ["name"]
            }
        }
    ])
}
