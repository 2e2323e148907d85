//! `GET /api/v1/analytics/events`: the records that say something went wrong or was refused,
//! as a feed, newest first by (start, arrival id), with keyset paging as the request log's
//! (`next_cursor`: the position of the page's last event; records arriving between two calls
//! shift nothing).
//!
//! A record is one event, of the first kind it matches in this order: `guardrail_block` (a
//! guardrail rule refused the request or ended its answer), `stream_cut` (cut for overrunning
//! its limits), `budget_reached` (402: a USD budget is spent), `limit_refused` (429 from the
//! gateway's limits: refused before routing, no provider), `upstream_failure` (a 5xx answered
//! from a provider).

use deadpool_postgres::Pool;
use serde::Serialize;

use super::params::EventsQuery;
use super::sql::{count, ms_of, time_of, Where};
use super::Failure;
use crate::services::identity::Principal;
use crate::services::usage::requests::Cursor;

/// The records that are events; `0017_analytics.sql`'s partial index `fg_usage_events` has
/// this predicate, so the feed reads only them.
pub const IS_EVENT: &str = "(status = 402 OR (status = 429 AND provider = '') OR (status >= 500 AND provider <> '') \
    OR cut OR guardrails->>'blocked' IS NOT NULL)";

/// An event's kind, from the record's fields.
const KIND: &str = "CASE WHEN guardrails->>'blocked' IS NOT NULL THEN 'guardrail_block' \
    WHEN cut THEN 'stream_cut' WHEN status = 402 THEN 'budget_reached' \
    WHEN status = 429 AND provider = '' THEN 'limit_refused' ELSE 'upstream_failure' END";

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// A guardrail rule refused the request or ended its answer (`rule` names it).
    GuardrailBlock,
    /// A stream cut for overrunning its limits.
    StreamCut,
    /// 402: a USD budget is spent.
    BudgetReached,
    /// 429 from the gateway's limits.
    LimitRefused,
    /// A 5xx answered from a provider.
    UpstreamFailure,
    /// A sidecar lost a store (`store`: `redis` or `postgres`; `detail`: the error).
    StoreDown,
    /// A sidecar reached a store again.
    StoreUp,
}

impl EventKind {
    fn of(text: &str) -> EventKind {
        match text {
            "guardrail_block" => EventKind::GuardrailBlock,
            "stream_cut" => EventKind::StreamCut,
            "budget_reached" => EventKind::BudgetReached,
            "limit_refused" => EventKind::LimitRefused,
            "store_down" => EventKind::StoreDown,
            "store_up" => EventKind::StoreUp,
            _ => EventKind::UpstreamFailure,
        }
    }
}

/// One event.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct AnalyticsEvent {
    /// Start of the request (or when the store was lost or regained), Unix ms.
    pub at: u64,
    /// What happened.
    pub kind: EventKind,
    /// The key (`null` on an open gateway).
    pub key: Option<String>,
    /// The model the client asked for.
    pub model: String,
    /// The provider (`""`: refused before routing).
    pub provider: String,
    /// The status answered.
    pub status: u16,
    /// `x-request-id`: `GET /api/v1/requests/{request_id}` has the whole record.
    pub request_id: String,
    /// The guardrail rule that blocked (`policy/rule`), for `guardrail_block`.
    pub rule: Option<String>,
    /// `redis` or `postgres`, for `store_down` and `store_up` (whose `model`, `provider` and
    /// `request_id` are `""`, `status` 0 and `key` null: no request is involved).
    pub store: Option<String>,
    /// The sidecar replica that saw it, for `store_down` and `store_up`.
    pub replica: Option<String>,
    /// The error, or how long the outage lasted, for `store_down` and `store_up`.
    pub detail: Option<String>,
}

/// The answer of `GET /api/v1/analytics/events`.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct EventsAnswer {
    /// The events, newest first.
    pub events: Vec<AnalyticsEvent>,
    /// Pass back as `cursor` for the next page; `null` on the last.
    pub next_cursor: Option<String>,
}

/// Runs the feed for `who`: one row more than the page says whether another follows. Store
/// incidents (`fg_events`) join the records' events for callers not narrowed to key groups.
///
/// # Errors
/// The database fails.
pub async fn run(pool: &Pool, who: &Principal, q: &EventsQuery) -> Result<EventsAnswer, Failure> {
    let mut w = Where::new(q.range, who);
    w.and(IS_EVENT);
    let mut after = String::new();
    if let Some(c) = q.after {
        let (at, id) = (w.value(time_of(c.started_ms)), w.value(i64::try_from(c.id).unwrap_or(i64::MAX)));
        after = format!(" AND (at, id) < ({at}, {id})");
        w.and(&format!("(started_at, id) < ({at}, {id})"));
    }
    let records = format!(
        "SELECT id, started_at AS at, {KIND} AS kind, key, model_requested, provider, status, request_id, \
         guardrails->>'blocked', NULL::text AS store, NULL::text AS replica, NULL::text AS detail FROM fg_usage{}",
        w.sql
    );
    // The range is $1 and $2 of every Where.
    let incidents = if super::narrowed_to(who).is_none() {
        format!(
            " UNION ALL SELECT id, at, kind, NULL, '', '', 0, '', NULL, store, replica, detail FROM fg_events \
             WHERE at >= $1 AND at < $2{after}"
        )
    } else {
        String::new()
    };
    let sql = format!("SELECT * FROM ({records}{incidents}) e ORDER BY at DESC, id DESC LIMIT {}", q.limit + 1);
    let client = pool.get().await?;
    let rows = client.query(&sql, &w.params()).await?;
    let mut events = Vec::new();
    let mut last = None;
    for row in rows.iter().take(q.limit) {
        let at = ms_of(row.try_get(1)?);
        last = Some(Cursor { started_ms: at, id: count(row.try_get(0)?) });
        events.push(event(row, at)?);
    }
    let next_cursor = (rows.len() > q.limit).then(|| last.map(Cursor::encode)).flatten();
    Ok(EventsAnswer { events, next_cursor })
}

fn event(row: &tokio_postgres::Row, at: u64) -> Result<AnalyticsEvent, tokio_postgres::Error> {
    Ok(AnalyticsEvent {
        at,
        kind: EventKind::of(row.try_get(2)?),
        key: row.try_get(3)?,
        model: row.try_get(4)?,
        provider: row.try_get(5)?,
        status: u16::try_from(row.try_get::<_, i32>(6)?).unwrap_or_default(),
        request_id: row.try_get(7)?,
        rule: row.try_get(8)?,
        store: row.try_get(9)?,
        replica: row.try_get(10)?,
        detail: row.try_get(11)?,
    })
}
