//! OpenAI's Conversations API (`/v1/conversations`): the calls, classified and checked here so
//! a malformed id or a wrong method is answered before the sidecar's store is asked.
//!
//! A conversation holds items (messages, function calls and outputs, reasoning) and metadata.
//! A `POST /v1/responses` naming it in `conversation` is sent its items before its own input,
//! and its input and output are appended to it once it completed ([`super::chain`]).

use crate::error::ApiError;

/// The sidecar route prefix (the client's paths are kept as they are).
pub const PATH: &str = "/v1/conversations";
/// On the store call: the conversation the response's turn is appended to.
pub const CONVERSATION_HEADER: &str = "x-ferrogate-conversation";
/// The most items one create or append call may carry (OpenAI's bound).
pub const MAX_ITEMS_PER_CALL: usize = 20;

/// What a Conversations call asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call<'p> {
    /// `POST /v1/conversations`.
    Create,
    /// `GET /v1/conversations/{id}`.
    Retrieve(&'p str),
    /// `POST /v1/conversations/{id}` (metadata).
    Update(&'p str),
    /// `DELETE /v1/conversations/{id}`.
    Delete(&'p str),
    /// `POST /v1/conversations/{id}/items`.
    AddItems(&'p str),
    /// `GET /v1/conversations/{id}/items`.
    ListItems(&'p str),
    /// `GET /v1/conversations/{id}/items/{item_id}`.
    GetItem(&'p str, &'p str),
    /// `DELETE /v1/conversations/{id}/items/{item_id}`.
    DeleteItem(&'p str, &'p str),
}

impl Call<'_> {
    /// Whether the call carries a JSON body the store needs.
    pub fn has_body(&self) -> bool {
        matches!(self, Call::Create | Call::Update(_) | Call::AddItems(_))
    }
}

/// Classifies `method` on `bare` (`/v1/conversations` or a path under it, query cut).
///
/// # Errors
/// 400 for a malformed id, 405 for a wrong method, 404 for an unknown sub-path.
pub fn classify<'p>(method: &str, bare: &'p str) -> Result<Call<'p>, ApiError> {
    let rest = match bare.strip_prefix(PATH) {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => rest,
        _ => return Err(ApiError::unknown_url(method, bare)),
    };
    let parts: Vec<&str> = rest.split('/').skip(1).collect();
    let call = match (parts.as_slice(), method) {
        ([], "POST") => Call::Create,
        ([id], "GET") => Call::Retrieve(id),
        ([id], "POST") => Call::Update(id),
        ([id], "DELETE") => Call::Delete(id),
        ([id, "items"], "POST") => Call::AddItems(id),
        ([id, "items"], "GET") => Call::ListItems(id),
        ([id, "items", item], "GET") => Call::GetItem(id, item),
        ([id, "items", item], "DELETE") => Call::DeleteItem(id, item),
        ([] | [_] | [_, "items"] | [_, "items", _], _) => return Err(ApiError::method_not_allowed(method, bare)),
        _ => return Err(ApiError::unknown_url(method, bare)),
    };
    let (id, item) = match call {
        Call::Create => return Ok(call),
        Call::Retrieve(id) | Call::Update(id) | Call::Delete(id) | Call::AddItems(id) | Call::ListItems(id) => {
            (id, None)
        }
        Call::GetItem(id, item) | Call::DeleteItem(id, item) => (id, Some(item)),
    };
    if !valid_id(id) {
        return Err(bad_id("conversation_id", id, "Expected an ID that begins with 'conv_'."));
    }
    if let Some(item) = item.filter(|i| !valid_item_id(i)) {
        return Err(bad_id("item_id", item, "Expected an item ID."));
    }
    Ok(call)
}

fn bad_id(param: &'static str, id: &str, expected: &str) -> ApiError {
    let shown: String = id.chars().take(64).collect();
    let e = ApiError::bad_request(format!("Invalid '{param}': '{shown}'. {expected}"));
    ApiError { param: Some(param), code: Some("invalid_value"), ..e }
}

/// Whether `id` looks like a conversation id: `conv_` and then 1 to 251 letters, digits, `_`
/// or `-`.
pub fn valid_id(id: &str) -> bool {
    let Some(tail) = id.strip_prefix("conv_") else { return false };
    !tail.is_empty()
        && id.len() <= super::MAX_ID_LEN
        && tail.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Whether `id` can be an item id: 1 to 256 letters, digits, `_`, `-`, `.` or `:`.
pub fn valid_item_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= super::MAX_ID_LEN
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'))
}

/// The conversation a Responses request names in `conversation` (`"conv_…"` or `{"id": …}`).
///
/// # Errors
/// 400 naming `conversation` when it is neither, or not a conversation id.
pub fn named(value: &serde_json::Value) -> Result<Option<String>, ApiError> {
    let id = match value {
        serde_json::Value::Null => return Ok(None),
        serde_json::Value::String(id) => id.as_str(),
        serde_json::Value::Object(o) => o.get("id").and_then(serde_json::Value::as_str).unwrap_or_default(),
        _ => "",
    };
    if valid_id(id) {
        Ok(Some(id.to_string()))
    } else {
        Err(bad_id("conversation", id, "Expected a conversation ID that begins with 'conv_', or {\"id\": ...}."))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn calls_are_classified_and_ids_checked() {
        assert_eq!(classify("POST", "/v1/conversations"), Ok(Call::Create));
        assert_eq!(classify("GET", "/v1/conversations/conv_1"), Ok(Call::Retrieve("conv_1")));
        assert_eq!(classify("POST", "/v1/conversations/conv_1"), Ok(Call::Update("conv_1")));
        assert_eq!(classify("DELETE", "/v1/conversations/conv_1"), Ok(Call::Delete("conv_1")));
        assert_eq!(classify("POST", "/v1/conversations/conv_1/items"), Ok(Call::AddItems("conv_1")));
        assert_eq!(classify("GET", "/v1/conversations/conv_1/items"), Ok(Call::ListItems("conv_1")));
        assert_eq!(classify("GET", "/v1/conversations/conv_1/items/msg_2"), Ok(Call::GetItem("conv_1", "msg_2")));
        assert_eq!(classify("DELETE", "/v1/conversations/conv_1/items/m"), Ok(Call::DeleteItem("conv_1", "m")));
        for (method, path, status) in [
            ("GET", "/v1/conversations", 405),
            ("PUT", "/v1/conversations/conv_1", 405),
            ("GET", "/v1/conversations/conv_1/other", 404),
            ("GET", "/v1/conversations/resp_1", 400),
            ("GET", "/v1/conversations/conv_a%2F..", 400),
            ("GET", "/v1/conversations/conv_1/items/a%2Fb", 400),
            ("GET", "/v1/conversationsx", 404),
        ] {
            assert_eq!(classify(method, path).map_err(|e| e.status), Err(status), "{method} {path}");
        }
        assert!(Call::Create.has_body() && !Call::ListItems("conv_1").has_body());
    }

    #[test]
    fn a_responses_request_names_its_conversation_either_way() {
        assert_eq!(named(&json!("conv_1")), Ok(Some("conv_1".into())));
        assert_eq!(named(&json!({"id": "conv_1"})), Ok(Some("conv_1".into())));
        assert_eq!(named(&json!(null)), Ok(None));
        for bad in [json!("resp_1"), json!(3), json!({"x": 1})] {
            assert_eq!(named(&bad).unwrap_err().param, Some("conversation"), "{bad}");
        }
    }
}
