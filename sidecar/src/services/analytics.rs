//! The analytics API a dashboard reads (`GET /api/v1/analytics/...`): aggregates over the usage
//! records of `fg_usage`, computed by PostgreSQL.
//!
//! - [`series`]: `usage`, time buckets (minute, hour, day) of requests, errors, tokens, cost and
//!   latency / TTFT percentiles, per model, provider, key, group or client (top 20 series, the
//!   rest as `other`);
//! - [`top`]: `top`, a top-N ranking by requests, cost, tokens or errors;
//! - [`events`]: `events`, limit refusals, budgets reached, upstream failures, guardrail blocks,
//!   cut streams and store incidents (`fg_events`), newest first, with keyset paging;
//! - [`forecast`]: `forecast`, month-to-date cost and a linear month-end forecast.
//!
//! The aggregates need the Postgres store: the file store keeps records as JSON lines in memory
//! (the newest 100,000), which the usage and request-log queries scan; these routes answer 409
//! there, and 503 while the database is not connected. A key-manager narrowed to key groups
//! sees only the records of keys all of whose groups (at least one) it manages, as it sees
//! those keys in `GET /api/v1/keys`. Records carry no secrets: every role sees the same fields.

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Json, Router};
use deadpool_postgres::Pool;
use serde::Serialize;
use serde_json::json;

use super::admin::Admin;
use super::identity::{Principal, Role};
use super::now_ms;
use super::openapi::{schema, Access, Answer, Operation};

pub mod events;
#[cfg(test)]
mod events_tests;
pub mod forecast;
pub mod params;
#[cfg(test)]
mod route_tests;
pub mod series;
mod sql;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod timing;
pub mod top;

/// Why an analytics call was not answered.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// A parameter means nothing (400).
    #[error("{0}")]
    Bad(String),
    /// The file store: no `fg_usage` table (409).
    #[error(
        "analytics need the postgres configuration store (usage records in fg_usage); the file store keeps \
         records in memory only: use GET /api/v1/usage or GET /api/v1/requests"
    )]
    NoPostgres,
    /// The database has not been reached yet (503).
    #[error("the usage database is not connected yet")]
    NotConnected,
    /// The database refused or is unreachable (503).
    #[error("usage database: {0}")]
    Store(String),
}

impl From<tokio_postgres::Error> for Failure {
    fn from(e: tokio_postgres::Error) -> Failure {
        Failure::Store(e.to_string())
    }
}

impl From<deadpool_postgres::PoolError> for Failure {
    fn from(e: deadpool_postgres::PoolError) -> Failure {
        Failure::Store(e.to_string())
    }
}

impl Failure {
    /// The answer's status.
    pub fn status(&self) -> StatusCode {
        match self {
            Failure::Bad(_) => StatusCode::BAD_REQUEST,
            Failure::NoPostgres => StatusCode::CONFLICT,
            Failure::NotConnected | Failure::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

/// The key groups `who` is narrowed to: a key-manager's, when it has some.
pub(crate) fn narrowed_to(who: &Principal) -> Option<&[String]> {
    (who.role == Role::KeyManager && !who.key_groups.is_empty()).then_some(who.key_groups.as_slice())
}

/// The usage database's pool.
fn pool(admin: &Admin) -> Result<Pool, Failure> {
    if !admin.postgres {
        return Err(Failure::NoPostgres);
    }
    Ok(admin.db.get().ok_or(Failure::NotConnected)?.store.pool().clone())
}

/// The answer, or the failure as `{"error": …}` with its status.
fn reply<T: Serialize>(result: Result<T, Failure>) -> Response {
    match result {
        Ok(answer) => Json(answer).into_response(),
        Err(e) => {
            if !matches!(e, Failure::Bad(_) | Failure::NoPostgres) {
                tracing::warn!(error = %e, "analytics query not answered");
            }
            (e.status(), Json(json!({"error": e.to_string()}))).into_response()
        }
    }
}

async fn usage_route(
    State(admin): State<Admin>,
    Extension(who): Extension<Principal>,
    Query(p): Query<params::UsageParams>,
) -> Response {
    let run = async {
        let q = p.check(now_ms())?;
        series::run(&pool(&admin)?, &who, &q).await
    };
    reply(run.await)
}

async fn top_route(
    State(admin): State<Admin>,
    Extension(who): Extension<Principal>,
    Query(p): Query<params::TopParams>,
) -> Response {
    let run = async {
        let q = p.check(now_ms())?;
        top::run(&pool(&admin)?, &who, &q).await
    };
    reply(run.await)
}

async fn events_route(
    State(admin): State<Admin>,
    Extension(who): Extension<Principal>,
    Query(p): Query<params::EventsParams>,
) -> Response {
    let run = async {
        let q = p.check(now_ms())?;
        events::run(&pool(&admin)?, &who, &q).await
    };
    reply(run.await)
}

async fn forecast_route(
    State(admin): State<Admin>,
    Extension(who): Extension<Principal>,
    Query(p): Query<params::ForecastParams>,
) -> Response {
    let run = async {
        let at = p.check(now_ms())?;
        forecast::run(&pool(&admin)?, &who, at).await
    };
    reply(run.await)
}

/// The analytics routes.
pub fn router() -> Router<Admin> {
    Router::new()
        .route("/api/v1/analytics/usage", get(usage_route))
        .route("/api/v1/analytics/top", get(top_route))
        .route("/api/v1/analytics/events", get(events_route))
        .route("/api/v1/analytics/forecast", get(forecast_route))
}

/// A viewer's `GET` of `path` with its query and answer schemas.
fn read(path: &str, summary: &str, query: serde_json::Value, answer: serde_json::Value) -> Operation {
    Operation {
        method: "get",
        path: path.into(),
        summary: summary.into(),
        access: Access::Role(Role::Viewer),
        request: None,
        query: Some(query),
        answer: Answer::Json(answer),
        errors: vec![409, 503],
    }
}

/// The operations of [`router`].
pub fn operations() -> Vec<Operation> {
    use params::{EventsParams, ForecastParams, TopParams, UsageParams};
    vec![
        read(
            "/api/v1/analytics/usage",
            "Time buckets of requests, errors, tokens, cost and latency/TTFT percentiles, per model, provider, key, \
             group or client (top 20 series, the rest as other; 409 with the file store)",
            schema::<UsageParams>(),
            schema::<series::UsageAnswer>(),
        ),
        read(
            "/api/v1/analytics/top",
            "Top-N models, providers, keys, groups or clients by requests, cost, tokens or errors (409 with the file \
             store)",
            schema::<TopParams>(),
            schema::<top::TopAnswer>(),
        ),
        read(
            "/api/v1/analytics/events",
            "Limit refusals, budgets reached, upstream failures, guardrail blocks, cut streams and store incidents, newest first, \
             cursor paging (409 with the file store)",
            schema::<EventsParams>(),
            schema::<events::EventsAnswer>(),
        ),
        read(
            "/api/v1/analytics/forecast",
            "Month-to-date cost and a linear month-end forecast (last 7 days' daily rate), overall, per model and \
             per group (409 with the file store)",
            schema::<ForecastParams>(),
            schema::<forecast::ForecastAnswer>(),
        ),
    ]
}
