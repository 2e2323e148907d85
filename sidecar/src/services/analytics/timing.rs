//! `scripts/analytics-timing`: times each analytics query (the real code of the routes) on a
//! generated table of `FG_ANALYTICS_ROWS` records (default 1,000,000) over the last 30 days, in
//! a scratch schema of the test database, with `0017_analytics.sql`'s events index and without.
//! Ignored by default: `cargo test -p ferrogate-sidecar --lib analytics::timing -- --ignored
//! --nocapture`.

use std::time::Instant;

use super::params::*;
use super::*;
use crate::services::pg::tests::Schema;
use crate::services::pg::PgStore;

/// The records: 12 models, 4 providers, 200 keys in 10 groups; 2% upstream 5xx, 1% limit
/// refusals, 0.2% budget refusals, 0.1% cut streams; half streamed (with a TTFT); four clients
/// in many versions, and a fifth of the records without a `User-Agent`.
const FILL: &str = "INSERT INTO fg_usage (digest, request_id, key, groups, model_requested, provider, upstream_model, \
    status, prompt_tokens, completion_tokens, cached_tokens, cost_micro_usd, latency_ms, ttft_ms, started_at, streamed, \
    cut, user_agent) \
    SELECT decode(md5(i::text), 'hex'), 'req-' || i, 'key-' || (i % 200), ARRAY['group-' || (i % 10)], \
    'model-' || (i % 12), CASE WHEN i % 100 = 7 THEN '' ELSE 'provider-' || (i % 4) END, 'up-' || (i % 12), \
    CASE WHEN i % 50 = 3 THEN 502 WHEN i % 100 = 7 THEN 429 WHEN i % 500 = 11 THEN 402 ELSE 200 END, \
    100 + i % 900, 10 + i % 400, i % 50, (i % 997) * 3, 50 + (i * 7919) % 3000, \
    CASE WHEN i % 2 = 0 THEN 20 + (i * 104729) % 800 END, \
    now() - (i::float8 / $1 * interval '30 days'), i % 2 = 0, i % 1000 = 13, \
    CASE i % 5 WHEN 0 THEN NULL WHEN 1 THEN 'OpenAI/Python 1.' || (i % 60) || '.0' \
    WHEN 2 THEN 'Anthropic/Python 0.' || (i % 40) || '.1' WHEN 3 THEN 'curl/8.' || (i % 9) || '.0' \
    ELSE 'google-genai-sdk/1.' || (i % 7) || '.0 gl-python/3.11.' || (i % 10) END \
    FROM generate_series(1, $1::int8) AS i";

async fn time<T>(label: &str, run: impl std::future::Future<Output = Result<T, Failure>>) {
    let start = Instant::now();
    run.await.unwrap_or_else(|e| panic!("{label}: {e}"));
    println!("  {label:<58} {:>8.1} ms", start.elapsed().as_secs_f64() * 1000.0);
}

async fn round(pool: &deadpool_postgres::Pool, now: u64) {
    let who = Principal::bootstrap();
    let day = Range { from: now - DAY_MS, to: now };
    let month = Range { from: now - 30 * DAY_MS, to: now };
    let usage = |range, bucket, by| UsageQuery { range, bucket, by };
    time(
        "usage 24 h, hour buckets, by model",
        series::run(pool, &who, &usage(day, AnalyticsBucket::Hour, Some(AnalyticsBy::Model))),
    )
    .await;
    time("usage 24 h, minute buckets, all", series::run(pool, &who, &usage(day, AnalyticsBucket::Minute, None))).await;
    time(
        "usage 30 days, day buckets, by key (top 20 + other)",
        series::run(pool, &who, &usage(month, AnalyticsBucket::Day, Some(AnalyticsBy::Key))),
    )
    .await;
    time(
        "usage 30 days, hour buckets, by group",
        series::run(pool, &who, &usage(month, AnalyticsBucket::Hour, Some(AnalyticsBy::Group))),
    )
    .await;
    let top = |range, by, metric| TopQuery { range, by, metric, limit: 10 };
    time("top 24 h, keys by cost", top::run(pool, &who, &top(day, AnalyticsBy::Key, AnalyticsMetric::Cost))).await;
    time(
        "top 30 days, models by requests",
        top::run(pool, &who, &top(month, AnalyticsBy::Model, AnalyticsMetric::Requests)),
    )
    .await;
    // The client is computed per row (`sql::CLIENT`): against the line above, its cost.
    time(
        "top 30 days, clients by requests",
        top::run(pool, &who, &top(month, AnalyticsBy::Client, AnalyticsMetric::Requests)),
    )
    .await;
    time(
        "usage 30 days, day buckets, by client",
        series::run(pool, &who, &usage(month, AnalyticsBucket::Day, Some(AnalyticsBy::Client))),
    )
    .await;
    let first = events::run(pool, &who, &EventsQuery { range: month, limit: 100, after: None }).await.unwrap();
    time(
        "events 30 days, first page of 100",
        events::run(pool, &who, &EventsQuery { range: month, limit: 100, after: None }),
    )
    .await;
    let after = first.next_cursor.as_deref().map(|c| crate::services::usage::requests::Cursor::decode(c).unwrap());
    time("events 30 days, second page", events::run(pool, &who, &EventsQuery { range: month, limit: 100, after }))
        .await;
    time("forecast (month to date, 7 days; overall, model, group)", forecast::run(pool, &who, now)).await;
}

#[tokio::test]
#[ignore = "a timing run: scripts/analytics-timing"]
async fn timing() {
    let rows: i64 = std::env::var("FG_ANALYTICS_ROWS").ok().and_then(|r| r.parse().ok()).unwrap_or(1_000_000);
    let schema = Schema::new().await;
    let store = PgStore::connect(&schema.url, None).await.unwrap();
    let pool = store.pool().clone();
    let client = pool.get().await.unwrap();
    let start = Instant::now();
    client.execute(FILL, &[&rows]).await.unwrap();
    client.batch_execute("VACUUM ANALYZE fg_usage").await.unwrap();
    println!("{rows} records over 30 days inserted and vacuumed in {:.1} s", start.elapsed().as_secs_f64());
    let now = crate::services::now_ms();
    println!("with 0017_analytics.sql's events index (two runs: cold, then warm):");
    round(&pool, now).await;
    round(&pool, now).await;
    client.batch_execute("DROP INDEX fg_usage_events").await.unwrap();
    println!("without it (0002's B-trees only; two runs):");
    round(&pool, now).await;
    round(&pool, now).await;
}
