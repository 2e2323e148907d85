//! `POST /v1/moderations`: OpenAI's moderation endpoint, deterministic, standing in for the
//! SaaS one (a gateway's moderation guardrails call it).
//!
//! `input` is a string, an array of strings, or an array of multimodal parts (`{"type":
//! "text", "text": ...}`; image parts are never flagged). There is one result per input: a
//! text holding `violence-trigger` is flagged `violence`, one holding `selfharm-trigger`
//! `self-harm` (case-insensitive), anything else is clean. Any model name is accepted and
//! echoed (`omni-moderation-latest` when none is given). Faults apply as on the inference
//! routes. Requests are counted on `/metrics` (`sim:moderation_requests_total`,
//! `sim:moderation_flagged_total`), once there was one.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::error::SimError;
use super::faults::ExtraDelay;
use super::openai::parse;
use super::SimState;

/// The model answered as when the request names none.
pub const DEFAULT_MODEL: &str = "omni-moderation-latest";

/// OpenAI's moderation categories, in its order.
const CATEGORIES: [&str; 13] = [
    "harassment",
    "harassment/threatening",
    "hate",
    "hate/threatening",
    "illicit",
    "illicit/violent",
    "self-harm",
    "self-harm/intent",
    "self-harm/instructions",
    "sexual",
    "sexual/minors",
    "violence",
    "violence/graphic",
];

/// Trigger words (matched case-insensitively) and the category each flags.
pub const TRIGGERS: [(&str, &str); 2] = [("violence-trigger", "violence"), ("selfharm-trigger", "self-harm")];

/// Scores of a flagged category and of the others.
const FLAGGED_SCORE: f64 = 0.98;
const CLEAN_SCORE: f64 = 0.0001;

#[derive(Debug, Deserialize)]
struct ModerationRequest {
    input: Value,
    #[serde(default)]
    model: Option<String>,
}

/// Requests served and inputs flagged, for `/metrics`.
#[derive(Debug, Default)]
pub struct Counters {
    requests: AtomicU64,
    flagged: AtomicU64,
}

impl Counters {
    /// Appends the counters to a `/metrics` page, once a moderation request was served (so
    /// the page of a sim that never moderated is unchanged).
    pub fn render(&self, out: &mut String) {
        let requests = self.requests.load(Ordering::Relaxed);
        if requests == 0 {
            return;
        }
        let flagged = self.flagged.load(Ordering::Relaxed);
        let _ = write!(
            out,
            "# HELP sim:moderation_requests_total Moderation requests served.\n\
             # TYPE sim:moderation_requests_total counter\n\
             sim:moderation_requests_total {requests}\n\
             # HELP sim:moderation_flagged_total Moderation inputs flagged.\n\
             # TYPE sim:moderation_flagged_total counter\n\
             sim:moderation_flagged_total {flagged}\n"
        );
    }
}

/// `POST /v1/moderations`.
pub async fn moderations(
    State(state): State<Arc<SimState>>,
    extra: Option<Extension<ExtraDelay>>,
    body: Bytes,
) -> Result<Json<Value>, SimError> {
    if let Some(Extension(ExtraDelay(delay))) = extra {
        tokio::time::sleep(delay).await; // a slow fault
    }
    let request: ModerationRequest = parse(&body)?;
    let inputs = inputs(&request.input).ok_or_else(|| {
        SimError::BadRequest("input must be a string, an array of strings or an array of text and image parts".into())
    })?;
    let results: Vec<Value> = inputs.iter().map(|text| result(text.as_deref())).collect();
    let flagged = results.iter().filter(|r| r["flagged"] == Value::Bool(true)).count();
    state.moderation.requests.fetch_add(1, Ordering::Relaxed);
    state.moderation.flagged.fetch_add(u64::try_from(flagged).unwrap_or(u64::MAX), Ordering::Relaxed);
    let model = request.model.filter(|m| !m.is_empty()).unwrap_or_else(|| DEFAULT_MODEL.to_owned());
    Ok(Json(json!({ "id": state.response_id("modr"), "model": model, "results": results })))
}

/// The inputs: their texts (`None` for an image part); `None` for any other shape.
fn inputs(input: &Value) -> Option<Vec<Option<String>>> {
    match input {
        Value::String(text) => Some(vec![Some(text.clone())]),
        Value::Array(items) if !items.is_empty() => items
            .iter()
            .map(|item| match item {
                Value::String(text) => Some(Some(text.clone())),
                Value::Object(part) => match part.get("type").and_then(Value::as_str) {
                    Some("text") => part.get("text").and_then(Value::as_str).map(|t| Some(t.to_owned())),
                    Some("image_url") => Some(None),
                    _ => None,
                },
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

/// The categories `text` is flagged for (none for an image).
fn flags(text: Option<&str>) -> Vec<&'static str> {
    let lower = text.unwrap_or_default().to_lowercase();
    TRIGGERS.iter().filter(|(word, _)| lower.contains(word)).map(|(_, category)| *category).collect()
}

/// One result object.
fn result(text: Option<&str>) -> Value {
    let flagged = flags(text);
    let kind = if text.is_some() { "text" } else { "image" };
    let (mut categories, mut scores, mut applied) = (Map::new(), Map::new(), Map::new());
    for category in CATEGORIES {
        let hit = flagged.contains(&category);
        categories.insert(category.to_owned(), Value::Bool(hit));
        scores.insert(category.to_owned(), json!(if hit { FLAGGED_SCORE } else { CLEAN_SCORE }));
        applied.insert(category.to_owned(), json!([kind]));
    }
    json!({
        "flagged": !flagged.is_empty(),
        "categories": categories,
        "category_scores": scores,
        "category_applied_input_types": applied,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{router, SimArgs};
    use axum::http::Request;
    use tower::ServiceExt as _;

    async fn post(app: &axum::Router, body: Value) -> (u16, Value) {
        let request = Request::post("/v1/moderations")
            .header("content-type", "application/json")
            .body(axum::body::Body::from(body.to_string()))
            .unwrap();
        let response = app.clone().oneshot(request).await.unwrap();
        let status = response.status().as_u16();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    #[tokio::test]
    async fn triggers_flag_their_category_one_result_per_input() {
        let app = router(&SimArgs::default());
        let (status, body) = post(
            &app,
            json!({"input": ["hello", "A VIOLENCE-TRIGGER here", "selfharm-trigger"],
            "model": "omni-moderation-2024-09-26"}),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        assert!(body["id"].as_str().unwrap().starts_with("modr-"), "{body}");
        assert_eq!(body["model"], "omni-moderation-2024-09-26");
        let results = body["results"].as_array().unwrap();
        let flagged: Vec<bool> = results.iter().map(|r| r["flagged"].as_bool().unwrap()).collect();
        assert_eq!(flagged, [false, true, true]);
        assert_eq!(results[1]["categories"]["violence"], true);
        assert_eq!(results[1]["categories"]["self-harm"], false);
        assert_eq!(results[2]["categories"]["self-harm"], true);
        assert_eq!(results[0]["categories"].as_object().unwrap().len(), CATEGORIES.len());
        assert!(results[1]["category_scores"]["violence"].as_f64().unwrap() > 0.5);

        let (status, one) = post(&app, json!({"input": "calm text"})).await;
        assert_eq!((status, one["model"].as_str()), (200, Some(DEFAULT_MODEL)));
        assert_eq!(one["results"].as_array().unwrap().len(), 1);
        let parts = json!({"input": [{"type": "text", "text": "violence-trigger"},
            {"type": "image_url", "image_url": {"url": "data:,"}}]});
        let (_, parts) = post(&app, parts).await;
        assert_eq!(parts["results"][0]["flagged"], true);
        assert_eq!(parts["results"][1]["flagged"], false);
        assert_eq!(post(&app, json!({"input": 42})).await.0, 400);
        assert_eq!(post(&app, json!({"input": []})).await.0, 400);
    }

    #[test]
    fn counters_render_once_used() {
        let counters = Counters::default();
        let mut page = String::new();
        counters.render(&mut page);
        assert!(page.is_empty());
        counters.requests.fetch_add(2, Ordering::Relaxed);
        counters.flagged.fetch_add(1, Ordering::Relaxed);
        counters.render(&mut page);
        assert!(page.contains("sim:moderation_requests_total 2\n"), "{page}");
        assert!(page.contains("sim:moderation_flagged_total 1\n"), "{page}");
    }
}
