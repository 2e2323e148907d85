//! Refusing a `tools/call` on the HTTP+SSE transport, where the answer to a POST travels on
//! another HTTP stream (the client's GET stream) and a POST answered by the gateway is never
//! read by the client.
//!
//! The refused call is replaced by a harmless `ping` whose id carries the original id and the
//! tool, hex-encoded; when the server's answer to it comes back on the GET stream, it is turned
//! into the refusal the client expects, under its own id. Nothing is kept in between, so it
//! works whichever worker or replica holds the GET stream.

use super::jsonrpc::{error_body, scan, Kind};

/// The id prefix of a stand-in `ping`.
const PREFIX: &str = "ferrogate-refused:";
/// JSON-RPC code of a refused tool (MCP's code for an unknown tool).
pub const UNKNOWN_TOOL: i64 = -32602;

use crate::hex;

fn unhex(text: &str) -> Option<String> {
    String::from_utf8(hex::decode(text.as_bytes())?).ok()
}

/// The message a refused `tools/call` (id text `id`, tool `tool`) is replaced with.
pub fn stand_in(id: &str, tool: &str) -> Vec<u8> {
    format!(
        r#"{{"jsonrpc":"2.0","id":"{PREFIX}{}:{}","method":"ping"}}"#,
        hex::encode(id.as_bytes()),
        hex::encode(tool.as_bytes())
    )
    .into_bytes()
}

/// The refusal for a server's answer to a stand-in; `None` for any other message.
pub fn restore(data: &[u8]) -> Option<Vec<u8>> {
    let message = scan(data).ok().filter(|m| m.kind == Kind::Response)?;
    let id: String = serde_json::from_str(message.id.as_deref()?).ok()?;
    let (id, tool) = id.strip_prefix(PREFIX)?.split_once(':')?;
    let (id, tool) = (unhex(id)?, unhex(tool)?);
    Some(error_body(Some(&id), UNKNOWN_TOOL, &format!("Unknown tool: {tool}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn a_stand_in_answer_becomes_the_refusal_under_the_original_id() {
        let ping = stand_in(r#""req-1""#, "delete_everything");
        let sent = scan(&ping).unwrap();
        assert_eq!(sent.method.as_deref(), Some("ping"));
        let answer = format!(r#"{{"jsonrpc":"2.0","id":{},"result":{{}}}}"#, sent.id.unwrap());
        let refusal: Value = serde_json::from_slice(&restore(answer.as_bytes()).unwrap()).unwrap();
        assert_eq!(refusal["id"], "req-1");
        assert_eq!(refusal["error"]["code"], UNKNOWN_TOOL);
        assert_eq!(refusal["error"]["message"], "Unknown tool: delete_everything");
        let numeric = scan(&stand_in("7", "x")).unwrap().id.unwrap();
        let answer = format!(r#"{{"jsonrpc":"2.0","id":{numeric},"error":{{"code":-1,"message":"m"}}}}"#);
        assert_eq!(serde_json::from_slice::<Value>(&restore(answer.as_bytes()).unwrap()).unwrap()["id"], 7);
    }

    #[test]
    fn other_messages_are_left_alone() {
        for data in [
            r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":"ferrogate-refused:zz:00","result":{}}"#,
            r#"{"jsonrpc":"2.0","id":"ferrogate-refused:31","result":{}}"#,
            r#"{"jsonrpc":"2.0","id":"ferrogate-refused:31:00","method":"ping"}"#,
            "not json",
        ] {
            assert_eq!(restore(data.as_bytes()), None, "{data}");
        }
    }
}
