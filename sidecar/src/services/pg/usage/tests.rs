//! `fg_usage` against the machine's real PostgreSQL (a schema of its own per test, see
//! `pg::tests::Schema`): typed rows round-trip, every query filter and the totals answer
//! exactly as the memory store does, a batch sent twice is stored once, and a database that
//! goes away makes ingestion answer 503 with nothing half-stored.

use std::sync::{Arc, OnceLock};

use axum::body::Body;
use axum::http::Request;
use bytes::Bytes;
use tower::ServiceExt;

use super::super::tests::Schema;
use super::*;
use crate::services::filter_api::{self, FilterApi};
use crate::services::snapshot::Snapshots;
use crate::services::source::Database;
use crate::services::usage::{UsageBackend, UsageStore};

fn line(id: &str, key: Option<&str>, model: &str, at: u64, prompt: u64, cost: Option<u64>) -> String {
    let record = Record {
        request_id: id.into(),
        key: key.map(String::from),
        groups: vec!["dev".into(), "o'q\"s,{x}".into()],
        model_requested: model.into(),
        provider: "local".into(),
        upstream_model: "sim-small".into(),
        status: 200,
        prompt_tokens: prompt,
        completion_tokens: 2,
        cached_tokens: 1,
        cost_micro_usd: cost,
        latency_ms: 40,
        ttft_ms: cost.map(|_| 7),
        started_at_unix_ms: at,
        streamed: cost.is_none(),
        admitted: false,
        cut: cost.is_none(),
        partial: cost.is_none(),
        queued_ms: prompt % 7,
        retries: prompt % 3,
        continues: prompt.is_multiple_of(2).then(|| format!("resp_{prompt:016x}")),
        rebuilt: prompt.is_multiple_of(4),
        // r5 with every guardrail field, r3 with an empty (but present) record, the rest none.
        guardrails: match prompt {
            50 => Some(guardrails()),
            30 => Some(GuardrailRecord::default()),
            _ => None,
        },
        // Every third one answered from the response cache.
        cached: prompt.is_multiple_of(3),
        // Two clients, one with text that needs escapes; the rest sent none (NULL).
        user_agent: match prompt {
            10 => Some("OpenAI/Python 1.52.0".into()),
            40 => Some("tool/1 \"ü\" \\ é".into()),
            _ => None,
        },
        // Pool endpoints for some; the rest went to a target without a pool (NULL).
        endpoint: prompt.is_multiple_of(20).then(|| format!("10.0.0.{}:8000", prompt / 10)),
    };
    record.to_json_line()
}

/// Guardrails with every field set, strings that need escapes included.
fn guardrails() -> GuardrailRecord {
    use ferrogate_core::usage::{GuardrailCheck, GuardrailHit};
    GuardrailRecord {
        blocked: Some("pii/\"email\"\n\u{1}é".into()),
        hits: vec![
            GuardrailHit { rule: "pii/email".into(), stage: "input".into(), action: "redact".into(), count: 2 },
            GuardrailHit { rule: "pii/o'q\\".into(), stage: "output".into(), action: "block".into(), count: u32::MAX },
        ],
        checks: vec![GuardrailCheck {
            rule: "hook/moderation".into(),
            stage: "input".into(),
            verdict: "allow".into(),
            latency_ms: 12,
        }],
    }
}

/// Two batches: keys a, b and none; models chat and embed; a tie at 2000 ms; one unpriced.
fn batches() -> [String; 2] {
    [
        [
            line("r1", Some("a"), "chat", 1_000, 10, Some(5)),
            line("r2", Some("b"), "chat", 2_000, 20, Some(7)),
            line("r3", Some("a"), "embed", 3_000, 30, None),
        ]
        .concat(),
        [line("r4", None, "chat", 2_000, 40, Some(11)), line("r5", Some("a"), "chat", 1_700_000_000_123, 50, Some(13))]
            .concat(),
    ]
}

fn rows(batch: &str) -> Vec<UsageRow> {
    batch.lines().map(|l| UsageRow::parse(l.as_bytes()).unwrap()).collect()
}

#[tokio::test]
async fn every_query_answers_as_the_memory_store_does() {
    let schema = Schema::new().await;
    let store = PgStore::connect(&schema.url, None).await.unwrap();
    let memory = UsageStore::new(None);
    for batch in batches() {
        assert_eq!(store.insert_usage(&rows(&batch)).await.unwrap() as usize, batch.lines().count());
        memory.add(Bytes::from(batch)).unwrap();
    }
    let q = |key: Option<&str>, model: Option<&str>, since, until, limit| Query {
        key: key.map(String::from),
        model: model.map(String::from),
        since,
        until,
        limit,
    };
    let queries = [
        Query::default(),
        q(Some("a"), None, None, None, None),
        q(Some("nobody"), None, None, None, None),
        q(None, Some("chat"), None, None, None),
        q(Some("a"), Some("chat"), None, None, None),
        q(None, None, Some(2_000), None, None),
        q(None, None, None, Some(2_000), None),
        q(None, None, Some(1_000), Some(3_000), Some(2)),
        q(None, Some("chat"), Some(0), Some(u64::MAX), Some(0)),
        q(None, None, None, None, Some(1)),
    ];
    for query in &queries {
        let sql = serde_json::to_value(store.query_usage(query).await.unwrap()).unwrap();
        let mem = serde_json::to_value(memory.query(query)).unwrap();
        assert_eq!(sql, mem, "{query:?}");
    }
    let all = store.query_usage(&Query::default()).await.unwrap();
    assert_eq!((all.totals.requests, all.totals.prompt_tokens, all.totals.cost_micro_usd), (5, 150, 36));
    let ids: Vec<_> = all.records.iter().map(|r| r.request_id.as_str()).collect();
    assert_eq!(ids, ["r5", "r3", "r4", "r2", "r1"], "newest start first, the later arrival first on a tie");
}

#[tokio::test]
async fn every_field_round_trips_through_typed_columns() {
    let schema = Schema::new().await;
    let store = PgStore::connect(&schema.url, None).await.unwrap();
    for batch in batches() {
        store.insert_usage(&rows(&batch)).await.unwrap();
    }
    let all = store.query_usage(&Query::default()).await.unwrap();
    let parsed: Vec<Record> = batches().iter().flat_map(|b| rows(b)).map(|r| r.record).collect();
    assert_eq!(all.records.len(), parsed.len());
    assert!(all.records.iter().all(|r| parsed.contains(r)), "every field round-trips (nulls included)");
    let client = store.pool.get().await.unwrap();
    let sql = "SELECT groups, to_char(started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS') \
               FROM fg_usage WHERE request_id = 'r5'";
    let (groups, at): (Vec<String>, String) = client.query_one(sql, &[]).await.map(|r| (r.get(0), r.get(1))).unwrap();
    assert_eq!(groups, ["dev", "o'q\"s,{x}"], "groups are a text[] column");
    assert_eq!(at, "2023-11-14 22:13:20.123", "started_at is a timestamptz");
    let r5 = all.records.iter().find(|r| r.request_id == "r5").unwrap();
    assert_eq!(r5.guardrails, Some(guardrails()));
    let r3 = all.records.iter().find(|r| r.request_id == "r3").unwrap();
    assert_eq!(r3.guardrails, Some(GuardrailRecord::default()), "an empty record is not NULL");
    let sql = "SELECT guardrails->'hits'->0->>'count', count(guardrails) FROM fg_usage GROUP BY 1 ORDER BY 1";
    let rows: Vec<(Option<String>, i64)> =
        client.query(sql, &[]).await.unwrap().iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(rows, [(Some("2".into()), 1), (None, 1)], "a jsonb column, NULL without guardrails");
    let sql = "SELECT request_id FROM fg_usage WHERE user_agent IS NULL ORDER BY 1";
    let unnamed: Vec<String> = client.query(sql, &[]).await.unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(unnamed, ["r2", "r3", "r5"], "a text column, NULL without a User-Agent");
    let sql = "SELECT request_id, endpoint FROM fg_usage WHERE endpoint IS NOT NULL ORDER BY 1";
    let pooled: Vec<(String, String)> =
        client.query(sql, &[]).await.unwrap().iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(pooled, [("r2".into(), "10.0.0.2:8000".into()), ("r4".into(), "10.0.0.4:8000".into())]);
}

#[tokio::test]
async fn a_batch_sent_twice_is_stored_once() {
    let schema = Schema::new().await;
    let store = PgStore::connect(&schema.url, None).await.unwrap();
    let [first, second] = batches();
    assert_eq!(store.insert_usage(&rows(&first)).await.unwrap(), 3);
    assert_eq!(store.insert_usage(&rows(&first)).await.unwrap(), 0, "acknowledged late, sent again");
    // A retry may carry more records than the batch it repeats.
    assert_eq!(store.insert_usage(&rows(&format!("{first}{second}"))).await.unwrap(), 2);
    // The same request id is not enough to be a duplicate: clients choose x-request-id.
    let again = line("r1", Some("a"), "chat", 9_000, 10, Some(5));
    assert_eq!(store.insert_usage(&rows(&format!("{again}{again}"))).await.unwrap(), 1);
    assert_eq!(store.query_usage(&Query::default()).await.unwrap().totals.requests, 6);
}

// The same forwarder the integration tests use (one piece of code for both).
#[path = "../../../../tests/common/forwarder.rs"]
mod forwarder;
use forwarder::Forwarder;

async fn post(app: &axum::Router, body: String) -> (u16, serde_json::Value) {
    let req = Request::post("/v1/usage").header("authorization", "Bearer t").body(Body::from(body)).unwrap();
    let res = app.clone().oneshot(req).await.unwrap();
    let status = res.status().as_u16();
    let bytes = axum::body::to_bytes(res.into_body(), 1 << 20).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or_default())
}

#[tokio::test]
async fn ingestion_answers_200_after_commit_400_for_a_bad_line_and_503_while_the_database_is_down() {
    let schema = Schema::new().await;
    let fwd = Forwarder::start(&schema.url).await;
    let slot = Arc::new(OnceLock::new());
    let usage = Arc::new(UsageBackend::postgres(slot.clone()));
    let api = FilterApi {
        usage: usage.clone(),
        snapshots: Arc::new(Snapshots::new(None)),
        internal_token: Some("t".into()),
        ledger: Arc::new(crate::services::limits::Ledger::new("t".into(), false)),
        targets: Arc::new(crate::services::targets::Targets::new(Default::default())),
        kv: Arc::default(),
        usage_failing: Default::default(),
    };
    let app = filter_api::router(api);
    let [first, second] = batches();
    assert_eq!(post(&app, first.clone()).await.0, 503, "not connected yet: the filter keeps the batch");

    let store = PgStore::connect(&fwd.url(&schema.url), None).await.unwrap();
    let db = Database { store: Arc::new(store), changed: Arc::default(), redis: None };
    slot.set(db.clone()).unwrap();
    assert_eq!(post(&app, first.clone()).await, (200, serde_json::json!({"stored": 3})));
    assert_eq!(post(&app, first.clone()).await, (200, serde_json::json!({"stored": 0, "duplicates": 3})));
    let garbled = format!("{second}{{\"request_id\":\"x\",\"status\":\"oops\"}}\n");
    let (status, body) = post(&app, garbled).await;
    assert_eq!(
        (status, body["error"].as_str().unwrap()),
        (400, "line 3: not a usage record (one JSON object per line expected)")
    );

    fwd.set(false);
    assert_eq!(post(&app, second.clone()).await.0, 503, "database down");
    assert!(usage.query(&Query::default()).await.is_err(), "queries fail too (the admin API answers 503)");
    fwd.set(true);
    assert_eq!(post(&app, second.clone()).await, (200, serde_json::json!({"stored": 2})), "the retry is stored");
    let answer = usage.query(&Query::default()).await.unwrap();
    assert_eq!(answer.totals.requests, 5, "each record exactly once: nothing lost, nothing twice");
}
