//! The response store's filter-facing routes (on the sidecar listener, behind the internal
//! token). The filter names the caller's key by its digest in `x-ferrogate-owner` (absent on
//! a gateway without keys) and relays these answers to the client as they are, so they are in
//! OpenAI's shapes:
//!
//! - `POST /v1/responses`: store one finished response. The body is the client's request
//!   (its first `x-ferrogate-request-bytes` bytes) followed by the answer it got, an event
//!   stream when `x-ferrogate-streamed` is set. `200 {"stored": bool}` (false, with a
//!   `reason`, when there is nothing to store: a stream that never completed, an answer
//!   without a response id, a response larger than a key may keep); 400 when the framing is
//!   broken; 503 when the store cannot take it now.
//! - `GET /v1/responses/{id}`: the `response` object.
//! - `DELETE /v1/responses/{id}`: `{"id", "object": "response", "deleted": true}`.
//! - `GET /v1/responses/{id}/input_items?limit&order&after`: a list page.
//!
//! - `GET /v1/response-chains/{id}`: the conversation a follow-up continues ([`chain`]):
//!   `{"origin", "depth", "items"}`; an id that is not the caller's (or a missing link) is 400
//!   `previous_response_not_found`, a chain over `responses.max_chain_depth` 400 too, both as
//!   the client gets them.
//!
//! An unknown, expired, deleted or another key's id is 404 alike; a malformed id is 400.

use std::sync::Arc;

use axum::extract::{Path, RawQuery, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use ferrogate_core::openai::ApiError;
use ferrogate_core::stored::chain::{Family, COST_HEADER, FAMILY_HEADER, ORIGIN_HEADER, TOKENS_HEADER};
use ferrogate_core::stored::{valid_id, OWNER_GROUP_HEADER, OWNER_HEADER, REQUEST_BYTES_HEADER, STREAMED_HEADER};
use serde_json::{json, Value};

use super::chain::{self, Walk};
use super::{build, ResponseStore, ResponsesError};
use crate::services::auth::{bearer_ok, unauthorized};
use crate::services::now_ms;

use ferrogate_core::stored::conversations::{self, CONVERSATION_HEADER};
use ferrogate_core::stored::{include, page};

/// State of the response routes.
#[derive(Clone)]
pub struct ResponsesApi {
    /// The store.
    pub store: Arc<ResponseStore>,
    /// The internal token filters must present.
    pub internal_token: Option<String>,
}

/// The response routes, to merge into the filter-facing router.
pub fn router(state: ResponsesApi) -> Router {
    Router::new()
        .route("/v1/responses", post(store))
        .route("/v1/responses/{id}", get(retrieve).delete(delete))
        .route("/v1/responses/{id}/input_items", get(input_items))
        .route("/v1/response-chains/{id}", get(chain_of))
        .with_state(state.clone())
        .merge(super::conversation_api::router(state))
}

pub(super) fn json_answer(status: StatusCode, body: impl Into<axum::body::Body>) -> Response {
    (status, [(CONTENT_TYPE, "application/json")], body.into()).into_response()
}

pub(super) fn api_error(e: &ApiError) -> Response {
    json_answer(StatusCode::from_u16(e.status).unwrap_or(StatusCode::BAD_REQUEST), e.body())
}

pub(super) fn unavailable(e: &ResponsesError) -> Response {
    tracing::warn!(error = %e, "response store unavailable");
    api_error(&ApiError::unavailable("The response store is unavailable; try again."))
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

impl ResponsesApi {
    /// Who owns what this call stores or reads: the key's digest, or with `visibility: group`
    /// its first group (`group:<name>`; a key without groups keeps its own).
    pub(super) fn owner(&self, headers: &HeaderMap) -> String {
        let group = header(headers, OWNER_GROUP_HEADER).filter(|_| self.store.retention().by_group);
        match group {
            Some(group) => format!("group:{group}"),
            None => header(headers, OWNER_HEADER).unwrap_or_default().to_string(),
        }
    }
}

async fn store(State(api): State<ResponsesApi>, headers: HeaderMap, body: axum::body::Bytes) -> Response {
    if !bearer_ok(&headers, api.internal_token.as_deref()) {
        return unauthorized().into_response();
    }
    let split =
        header(&headers, REQUEST_BYTES_HEADER).and_then(|n| n.parse().ok()).and_then(|n| build::split(&body, n));
    let Some((request, answer)) = split else {
        let e = json!({"error": format!("the body must start with {REQUEST_BYTES_HEADER} bytes of request")});
        return json_answer(StatusCode::BAD_REQUEST, e.to_string());
    };
    let streamed = headers.contains_key(STREAMED_HEADER);
    let ttl_ms = api.store.retention().ttl_ms;
    let mut entry = match build::entry(request, answer, streamed, now_ms(), ttl_ms) {
        Ok(entry) => entry,
        Err(e) => return json_answer(StatusCode::OK, json!({"stored": false, "reason": e.to_string()}).to_string()),
    };
    // A provider name (the filter's word, like the owner); anything longer is not one.
    let native = header(&headers, ORIGIN_HEADER).filter(|o| o.len() <= 256);
    entry.origin = chain::stored_origin(native, header(&headers, FAMILY_HEADER).and_then(Family::parse));
    let number = |name: &str| header(&headers, name).and_then(|n| n.parse::<u64>().ok()).unwrap_or(0);
    (entry.tokens, entry.cost_micros) = (number(TOKENS_HEADER), number(COST_HEADER));
    if let Some(conversation) = header(&headers, CONVERSATION_HEADER).filter(|c| conversations::valid_id(c)) {
        build::set_conversation(&mut entry, conversation);
        append_turn(&api, &headers, conversation, &entry).await;
    }
    if !ferrogate_core::stored::wants_store(request) {
        return json_answer(StatusCode::OK, json!({"stored": false, "reason": "store: false"}).to_string());
    }
    match api.store.put(&api.owner(&headers), entry).await {
        Ok(true) => json_answer(StatusCode::OK, r#"{"stored":true}"#),
        Ok(false) => {
            let reason = "the response is larger than responses.max_bytes_per_key";
            json_answer(StatusCode::OK, json!({"stored": false, "reason": reason}).to_string())
        }
        Err(e) => unavailable(&e),
    }
}

/// The caller's unexpired entry `id`, or the answer to give instead (401, 400, 404, 503).
async fn found(api: &ResponsesApi, headers: &HeaderMap, id: &str) -> Result<super::Entry, Response> {
    if !bearer_ok(headers, api.internal_token.as_deref()) {
        return Err(unauthorized().into_response());
    }
    if !valid_id(id) {
        return Err(api_error(&ApiError::bad_response_id(id)));
    }
    match api.store.get(&api.owner(headers), id, now_ms()).await {
        Ok(Some(entry)) => Ok(entry),
        Ok(None) => Err(api_error(&ApiError::response_not_found(id))),
        Err(e) => Err(unavailable(&e)),
    }
}

async fn retrieve(
    State(api): State<ResponsesApi>,
    headers: HeaderMap,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    if let Err(e) = include::check(query.as_deref().unwrap_or_default()) {
        return api_error(&e);
    }
    match found(&api, &headers, &id).await {
        Ok(entry) => json_answer(StatusCode::OK, entry.response),
        Err(answer) => answer,
    }
}

async fn delete(State(api): State<ResponsesApi>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    if !bearer_ok(&headers, api.internal_token.as_deref()) {
        return unauthorized().into_response();
    }
    if !valid_id(&id) {
        return api_error(&ApiError::bad_response_id(&id));
    }
    match api.store.delete(&api.owner(&headers), &id, now_ms()).await {
        Ok(true) => json_answer(StatusCode::OK, json!({"id": id, "object": "response", "deleted": true}).to_string()),
        Ok(false) => api_error(&ApiError::response_not_found(&id)),
        Err(e) => unavailable(&e),
    }
}

async fn input_items(
    State(api): State<ResponsesApi>,
    headers: HeaderMap,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let entry = match found(&api, &headers, &id).await {
        Ok(entry) => entry,
        Err(answer) => return answer,
    };
    if let Err(e) = include::check(query.as_deref().unwrap_or_default()) {
        return api_error(&e);
    }
    let paging = match page::Paging::parse(query.as_deref().unwrap_or_default()) {
        Ok(p) => p,
        Err(e) => return api_error(&e),
    };
    let items: Vec<Value> = serde_json::from_str(&entry.input_items).unwrap_or_default();
    match paging.page(items) {
        Ok(list) => json_answer(StatusCode::OK, list.to_string()),
        Err(e) => api_error(&e),
    }
}

async fn chain_of(State(api): State<ResponsesApi>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    if !bearer_ok(&headers, api.internal_token.as_deref()) {
        return unauthorized().into_response();
    }
    if conversations::valid_id(&id) {
        return conversation_chain(&api, &headers, &id).await;
    }
    if !valid_id(&id) {
        return api_error(&ApiError::previous_response_not_found(&id));
    }
    let max = api.store.retention().max_chain_depth;
    match chain::walk(&api.store, &api.owner(&headers), &id, now_ms(), max).await {
        Ok(found @ Walk::Found { .. }) => json_answer(StatusCode::OK, found.body()),
        Ok(Walk::Missing(link)) => api_error(&ApiError::previous_response_not_found(&link)),
        Ok(Walk::TooDeep) => api_error(&ApiError::chain_too_deep(&id, max)),
        Err(e) => unavailable(&e),
    }
}

/// A conversation's items as a chain (no native origin: a conversation is this gateway's).
async fn conversation_chain(api: &ResponsesApi, headers: &HeaderMap, id: &str) -> Response {
    match api.store.conversation(&api.owner(headers), id).await {
        Ok(Some(c)) if c.items.len() as u64 >= api.store.retention().max_conversation_items => {
            let message = format!(
                "Conversation '{id}' holds {} items, the most responses.max_conversation_items allows; start a new \
                 conversation.",
                c.items.len()
            );
            api_error(&ApiError { param: Some("conversation"), ..ApiError::bad_request(message) })
        }
        Ok(Some(c)) => {
            let (tokens, cost_micros) = (c.tokens, c.cost_micros);
            let found = Walk::Found { items: c.items, depth: 0, origin: String::new(), tokens, cost_micros };
            json_answer(StatusCode::OK, found.body())
        }
        Ok(None) => {
            let message = format!("Conversation with id '{id}' not found.");
            api_error(&ApiError { param: Some("conversation"), ..ApiError::bad_request(message) })
        }
        Err(e) => unavailable(&e),
    }
}

/// Appends a completed turn (its input items, then its output items) to `conversation`, with
/// what it used; its reasoning tagged with the family that signed it, as a chain's is.
async fn append_turn(api: &ResponsesApi, headers: &HeaderMap, conversation: &str, entry: &super::Entry) {
    let mut turn: Vec<Value> = serde_json::from_str(&entry.input_items).unwrap_or_default();
    let response: Value = serde_json::from_str(&entry.response).unwrap_or(Value::Null);
    if let Some(Value::Array(output)) = response.get("output") {
        turn.extend(output.iter().cloned());
    }
    let turn: Vec<Value> = chain::tagged(turn, chain::provenance(&entry.origin).1).collect();
    let (tokens, cost) = (entry.tokens, entry.cost_micros);
    let appended = api
        .store
        .update_conversation(&api.owner(headers), conversation, move |c| {
            c.items.extend(turn);
            c.tokens = c.tokens.saturating_add(tokens);
            c.cost_micros = c.cost_micros.saturating_add(cost);
        })
        .await;
    match appended {
        Ok(Some(_)) => {}
        Ok(None) => tracing::warn!(conversation, "turn not appended: the conversation is gone"),
        Err(e) => tracing::warn!(conversation, error = %e, "turn not appended"),
    }
}
