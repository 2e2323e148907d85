//! The Conversations API's routes on the filter-facing listener (behind the internal token),
//! at the client's own paths; the filter relays the answers, in OpenAI's shapes:
//!
//! - `POST /v1/conversations` `{metadata?, items?}` → the `conversation` object.
//! - `GET` / `POST` (metadata) / `DELETE /v1/conversations/{id}` → the object, or
//!   `{"id", "object": "conversation.deleted", "deleted": true}` (its items go with it).
//! - `POST /v1/conversations/{id}/items` `{items}` → the list of the items added.
//! - `GET /v1/conversations/{id}/items?limit&order&after&include` → a list page (newest first
//!   by default).
//! - `GET` / `DELETE /v1/conversations/{id}/items/{item_id}` → the item / the conversation.
//!
//! At most 20 items per call and 16 metadata pairs (OpenAI's bounds); an item without an id
//! gets one. Another key's conversation is 404, like one that never existed.

// The helpers return the answer itself as their error (it goes straight back to the filter,
// once per call), so its size costs nothing worth boxing for.
#![allow(clippy::result_large_err)]

use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use ferrogate_core::openai::ApiError;
use ferrogate_core::stored::chain::FAMILY_KEY;
use ferrogate_core::stored::conversations::{valid_id, MAX_ITEMS_PER_CALL};
use ferrogate_core::stored::{include, page};
use serde_json::{json, Map, Value};

use super::api::{api_error, json_answer, unavailable, ResponsesApi};
use super::conversations::Conversation;
use crate::services::auth::{bearer_ok, unauthorized};
use crate::services::now_ms;

/// The routes, to merge into the response store's router.
pub fn router(state: ResponsesApi) -> Router {
    Router::new()
        .route("/v1/conversations", post(create))
        .route("/v1/conversations/{id}", get(retrieve).post(update).delete(delete))
        .route("/v1/conversations/{id}/items", get(list_items).post(add_items))
        .route("/v1/conversations/{id}/items/{item}", get(get_item).delete(delete_item))
        .with_state(state)
}

fn not_found(id: &str) -> Response {
    let e = ApiError { param: Some("conversation_id"), ..ApiError::bad_request("") };
    let message = format!("Conversation with id '{id}' not found.");
    api_error(&ApiError { status: 404, message, ..e })
}

fn item_not_found(item: &str) -> Response {
    let e = ApiError { param: Some("item_id"), ..ApiError::bad_request("") };
    api_error(&ApiError { status: 404, message: format!("Item with id '{item}' not found."), ..e })
}

/// 400 for a conversation that would hold more than `max` items.
pub(super) fn full(max: u64) -> Response {
    let message = format!(
        "The conversation would hold more than {max} items, the most responses.max_conversation_items allows; \
         start a new conversation."
    );
    bad("items", message)
}

fn bad(param: &'static str, message: String) -> Response {
    api_error(&ApiError { param: Some(param), ..ApiError::bad_request(message) })
}

/// The metadata of a create or update: an object of at most 16 string pairs.
fn metadata(v: Option<&Value>) -> Result<Value, Response> {
    let Some(v) = v.filter(|v| !v.is_null()) else { return Ok(json!({})) };
    let Some(pairs) = v.as_object() else { return Err(bad("metadata", "'metadata' must be an object.".into())) };
    let fits = |(k, v): (&String, &Value)| k.len() <= 64 && v.as_str().is_some_and(|s| s.len() <= 512);
    if pairs.len() > 16 || !pairs.iter().all(fits) {
        let message = "'metadata' holds at most 16 pairs of strings (keys up to 64 characters, values up to 512).";
        return Err(bad("metadata", message.into()));
    }
    Ok(v.clone())
}

/// The items of a create or append, each with an id.
fn items(v: Option<&Value>, required: bool) -> Result<Vec<Value>, Response> {
    let items = match v {
        None | Some(Value::Null) if !required => return Ok(Vec::new()),
        Some(Value::Array(items)) => items.clone(),
        _ => return Err(bad("items", "'items' must be a list of items.".into())),
    };
    if items.len() > MAX_ITEMS_PER_CALL {
        return Err(bad("items", format!("'items' holds at most {MAX_ITEMS_PER_CALL} items per call.")));
    }
    items.into_iter().map(with_id).collect()
}

fn with_id(item: Value) -> Result<Value, Response> {
    let Value::Object(mut fields) = item else { return Err(bad("items", "Every item must be an object.".into())) };
    // Which family signed a reasoning item is the gateway's word, not the client's.
    fields.remove(FAMILY_KEY);
    if !fields.contains_key("type") && fields.contains_key("role") {
        fields.insert("type".into(), json!("message"));
    }
    if fields.get("type").and_then(Value::as_str) == Some("message") {
        super::build::message_form(&mut fields);
    }
    if !fields.contains_key("id") {
        let prefix = match fields.get("type").and_then(Value::as_str) {
            Some("message") => "msg",
            Some("function_call") => "fc",
            Some("function_call_output") => "fco",
            Some("reasoning") => "rs",
            _ => "item",
        };
        fields.insert("id".into(), json!(format!("{prefix}_{:032x}", rand::random::<u128>())));
    }
    Ok(Value::Object(fields))
}

fn body_object(body: &[u8]) -> Result<Map<String, Value>, Response> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(o)) => Ok(o),
        _ if body.is_empty() => Ok(Map::new()),
        _ => Err(api_error(&ApiError::bad_request("The request body is not a JSON object."))),
    }
}

fn checked(api: &ResponsesApi, headers: &HeaderMap) -> Result<(), Response> {
    if bearer_ok(headers, api.internal_token.as_deref()) {
        Ok(())
    } else {
        Err(unauthorized().into_response())
    }
}

async fn create(State(api): State<ResponsesApi>, headers: HeaderMap, body: axum::body::Bytes) -> Response {
    let made = async {
        checked(&api, &headers)?;
        let fields = body_object(&body)?;
        let owner = api.owner(&headers);
        let (kept, max) =
            (api.store.count_conversations(&owner).await, api.store.retention().max_conversations_per_key);
        if kept.as_ref().is_ok_and(|&n| n >= max) {
            let message = format!(
                "This key keeps {max} conversations, the most responses.max_conversations_per_key allows; delete some first."
            );
            return Err(bad("conversation", message));
        }
        kept.map_err(|e| unavailable(&e))?;
        let c = Conversation {
            id: format!("conv_{:032x}", rand::random::<u128>()),
            created_at: now_ms() / 1000,
            metadata: metadata(fields.get("metadata"))?,
            items: items(fields.get("items"), false)?,
            tokens: 0,
            cost_micros: 0,
        };
        if c.items.len() as u64 > api.store.retention().max_conversation_items {
            return Err(full(api.store.retention().max_conversation_items));
        }
        api.store.create_conversation(&owner, &c).await.map_err(|e| unavailable(&e))?;
        Ok::<_, Response>(json_answer(StatusCode::OK, c.object().to_string()))
    };
    made.await.unwrap_or_else(|answer| answer)
}

/// The caller's conversation `id`, or the answer to give instead.
async fn found(api: &ResponsesApi, headers: &HeaderMap, id: &str) -> Result<Conversation, Response> {
    checked(api, headers)?;
    if !valid_id(id) {
        return Err(not_found(id));
    }
    match api.store.conversation(&api.owner(headers), id).await {
        Ok(Some(c)) => Ok(c),
        Ok(None) => Err(not_found(id)),
        Err(e) => Err(unavailable(&e)),
    }
}

async fn retrieve(State(api): State<ResponsesApi>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    match found(&api, &headers, &id).await {
        Ok(c) => json_answer(StatusCode::OK, c.object().to_string()),
        Err(answer) => answer,
    }
}

/// Applies `change` to the caller's conversation `id`; its object, or the answer instead.
async fn changed(
    api: &ResponsesApi,
    headers: &HeaderMap,
    id: &str,
    change: impl FnOnce(&mut Conversation),
) -> Result<Conversation, Response> {
    checked(api, headers)?;
    match api.store.update_conversation(&api.owner(headers), id, change).await {
        Ok(Some(c)) => Ok(c),
        Ok(None) => Err(not_found(id)),
        Err(e) => Err(unavailable(&e)),
    }
}

async fn update(
    State(api): State<ResponsesApi>,
    h: HeaderMap,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    let done = async {
        let metadata = metadata(body_object(&body)?.get("metadata"))?;
        changed(&api, &h, &id, |c| c.metadata = metadata).await
    };
    match done.await {
        Ok(c) => json_answer(StatusCode::OK, c.object().to_string()),
        Err(answer) => answer,
    }
}

async fn delete(State(api): State<ResponsesApi>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    if let Err(answer) = checked(&api, &headers) {
        return answer;
    }
    match api.store.delete_conversation(&api.owner(&headers), &id).await {
        Ok(true) => {
            let deleted = json!({"id": id, "object": "conversation.deleted", "deleted": true});
            json_answer(StatusCode::OK, deleted.to_string())
        }
        Ok(false) => not_found(&id),
        Err(e) => unavailable(&e),
    }
}

fn list(data: &[Value]) -> Value {
    let id_of = |v: Option<&Value>| v.and_then(|i| i.get("id")).cloned().unwrap_or(Value::Null);
    json!({"object": "list", "data": data, "first_id": id_of(data.first()), "last_id": id_of(data.last()), "has_more": false})
}

async fn add_items(
    State(api): State<ResponsesApi>,
    h: HeaderMap,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
    body: axum::body::Bytes,
) -> Response {
    let done = async {
        include::check(query.as_deref().unwrap_or_default()).map_err(|e| api_error(&e))?;
        let added = items(body_object(&body)?.get("items"), true)?;
        let (copy, max) = (added.clone(), api.store.retention().max_conversation_items);
        let mut fits = true;
        changed(&api, &h, &id, |c| {
            fits = (c.items.len() + copy.len()) as u64 <= max;
            if fits {
                c.items.extend(copy);
            }
        })
        .await?;
        if !fits {
            return Err(full(max));
        }
        Ok::<_, Response>(list(&added))
    };
    match done.await {
        Ok(list) => json_answer(StatusCode::OK, list.to_string()),
        Err(answer) => answer,
    }
}

async fn list_items(
    State(api): State<ResponsesApi>,
    headers: HeaderMap,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let query = query.unwrap_or_default();
    let paged = async {
        include::check(&query).map_err(|e| api_error(&e))?;
        let paging = page::Paging::parse(&query).map_err(|e| api_error(&e))?;
        let mut c = found(&api, &headers, &id).await?;
        super::chain::untagged(&mut c.items);
        paging.page(c.items).map_err(|e| api_error(&e))
    };
    match paged.await {
        Ok(list) => json_answer(StatusCode::OK, list.to_string()),
        Err(answer) => answer,
    }
}

fn has_id(item: &Value, id: &str) -> bool {
    item.get("id").and_then(Value::as_str) == Some(id)
}

async fn get_item(State(api): State<ResponsesApi>, h: HeaderMap, Path((id, item)): Path<(String, String)>) -> Response {
    match found(&api, &h, &id).await {
        Ok(mut c) => match c.items.iter_mut().find(|i| has_id(i, &item)) {
            Some(found) => {
                super::chain::untagged(std::slice::from_mut(found));
                json_answer(StatusCode::OK, found.to_string())
            }
            None => item_not_found(&item),
        },
        Err(answer) => answer,
    }
}

async fn delete_item(
    State(api): State<ResponsesApi>,
    h: HeaderMap,
    Path((id, item)): Path<(String, String)>,
) -> Response {
    let mut removed = false;
    let done = changed(&api, &h, &id, |c| {
        let before = c.items.len();
        c.items.retain(|i| !has_id(i, &item));
        removed = c.items.len() < before;
    })
    .await;
    match done {
        Ok(c) if removed => json_answer(StatusCode::OK, c.object().to_string()),
        Ok(_) => item_not_found(&item),
        Err(answer) => answer,
    }
}
