//! A2A (Agent2Agent) agent cards as the gateway serves them: every URL a client could send to
//! is the gateway's `/a2a/{agent}`, in both card generations — 1.0's `supportedInterfaces[]`
//! and 0.3's `url` with `additionalInterfaces[]` — so a client never learns, or reaches, the
//! agent behind it. gRPC interfaces are dropped (the gateway proxies HTTP). A signed card's
//! URLs changed, its `signatures` no longer hold and are dropped.

use serde_json::{Map, Value};

/// Why an agent's card could not be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CardError {
    /// Not a JSON object.
    #[error("the agent card is not a JSON object: {0}")]
    NotAnObject(String),
}

/// The JSON-RPC methods that send a message to an agent, in both generations (1.0's
/// `SendMessage`, `SendStreamingMessage`; 0.3's `message/send`, `message/stream`): each is one
/// tool call to the limits ([`crate::limits::agent`]).
pub const SEND_METHODS: [&str; 4] = ["SendMessage", "SendStreamingMessage", "message/send", "message/stream"];

/// Whether `method` sends a message to the agent ([`SEND_METHODS`]).
pub fn is_send(method: &str) -> bool {
    SEND_METHODS.contains(&method)
}

fn is_grpc(entry: &Map<String, Value>, field: &str) -> bool {
    entry.get(field).and_then(Value::as_str).is_some_and(|b| b.eq_ignore_ascii_case("grpc"))
}

/// Keeps the HTTP entries of `list` (`binding` names an entry's protocol field), each pointed
/// at `url`.
fn repoint(list: &mut Value, binding: &str, url: &str) {
    if let Value::Array(entries) = list {
        entries.retain(|e| e.as_object().is_some_and(|e| !is_grpc(e, binding)));
        for entry in entries.iter_mut().filter_map(Value::as_object_mut) {
            entry.insert("url".into(), Value::from(url));
        }
    }
}

/// The card `body` as the gateway serves it at `gateway_url` (`scheme://host/a2a/{agent}`).
///
/// # Errors
/// [`CardError`] when `body` is not a JSON object.
pub fn rewrite_card(body: &[u8], gateway_url: &str) -> Result<Vec<u8>, CardError> {
    let mut card: Value = serde_json::from_slice(body).map_err(|e| CardError::NotAnObject(e.to_string()))?;
    let Some(obj) = card.as_object_mut() else {
        return Err(CardError::NotAnObject("another JSON value".into()));
    };
    if let Some(list) = obj.get_mut("supportedInterfaces") {
        repoint(list, "protocolBinding", gateway_url);
    }
    if let Some(list) = obj.get_mut("additionalInterfaces") {
        repoint(list, "transport", gateway_url);
    }
    if obj.get("url").is_some_and(Value::is_string) {
        obj.insert("url".into(), Value::from(gateway_url));
        if is_grpc(obj, "preferredTransport") {
            obj.insert("preferredTransport".into(), Value::from("JSONRPC"));
        }
    }
    obj.remove("signatures");
    serde_json::to_vec(&card).map_err(|e| CardError::NotAnObject(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const GW: &str = "https://gw.example/a2a/echo";

    fn rewrite(card: Value) -> Value {
        serde_json::from_slice(&rewrite_card(card.to_string().as_bytes(), GW).unwrap()).unwrap()
    }

    #[test]
    fn a_1_0_card_points_every_http_interface_at_the_gateway() {
        let card = json!({
            "name": "echo",
            "supportedInterfaces": [
                {"url": "http://10.0.0.7:9999/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0", "tenant": "t"},
                {"url": "http://10.0.0.7:9999/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
                {"url": "10.0.0.7:50051", "protocolBinding": "GRPC", "protocolVersion": "1.0"}
            ],
            "signatures": [{"protected": "eyJ", "signature": "sig"}],
            "skills": [{"id": "echo"}]
        });
        let out = rewrite(card);
        let interfaces = out["supportedInterfaces"].as_array().unwrap();
        assert_eq!(interfaces.len(), 2, "gRPC is not proxied");
        assert!(interfaces.iter().all(|i| i["url"] == GW));
        assert_eq!(interfaces[0]["tenant"], "t");
        assert!(out.get("signatures").is_none(), "changed URLs void the signatures");
        assert_eq!(out["skills"], json!([{"id": "echo"}]));
        assert!(!out.to_string().contains("10.0.0.7"));
    }

    #[test]
    fn a_0_3_card_moves_its_url_and_additional_interfaces() {
        let card = json!({
            "url": "http://10.0.0.7:9999/", "preferredTransport": "GRPC",
            "additionalInterfaces": [{"url": "http://10.0.0.7:9999/", "transport": "JSONRPC"},
                                     {"url": "10.0.0.7:50051", "transport": "GRPC"}]
        });
        let out = rewrite(card);
        assert_eq!((out["url"].as_str(), out["preferredTransport"].as_str()), (Some(GW), Some("JSONRPC")));
        assert_eq!(out["additionalInterfaces"], json!([{"url": GW, "transport": "JSONRPC"}]));
    }

    #[test]
    fn what_is_not_a_card_is_an_error() {
        assert!(rewrite_card(b"[1]", GW).is_err());
        assert!(rewrite_card(b"{", GW).is_err());
    }
}
