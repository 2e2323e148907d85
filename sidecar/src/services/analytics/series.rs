//! `GET /api/v1/analytics/usage`: time buckets per series, in one statement. The series are
//! ranked by requests over the whole range (ties by name, byte order); the first
//! [`TOP_SERIES`] keep their name and the rest are summed into one `other` series, whose
//! percentiles are those of all its records together. Percentiles are PostgreSQL's
//! `percentile_cont` (interpolated between the two nearest values); a bucket without TTFT
//! (nothing streamed) has `null` ones. Buckets without requests are left out.

use std::collections::HashMap;

use deadpool_postgres::Pool;
use serde::Serialize;
use tokio_postgres::Row;

use super::params::{AnalyticsBucket, AnalyticsBy, UsageQuery};
use super::sql::{count, dimension, usd, Where};
use super::Failure;
use crate::services::identity::Principal;

/// Series kept by name; the rest are summed as `other`.
pub const TOP_SERIES: usize = 20;

/// Latency percentiles, milliseconds (`null` without records).
#[derive(Debug, Clone, Default, PartialEq, Serialize, schemars::JsonSchema)]
pub struct LatencyPercentiles {
    /// Median.
    pub p50: Option<f64>,
    /// 95th percentile.
    pub p95: Option<f64>,
    /// 99th percentile.
    pub p99: Option<f64>,
}

/// Time-to-first-token percentiles, milliseconds, over the records that have one (`null`
/// when none has).
#[derive(Debug, Clone, Default, PartialEq, Serialize, schemars::JsonSchema)]
pub struct TtftPercentiles {
    /// Median.
    pub p50: Option<f64>,
    /// 95th percentile.
    pub p95: Option<f64>,
}

/// One bucket of one series.
#[derive(Debug, Clone, Default, PartialEq, Serialize, schemars::JsonSchema)]
pub struct AnalyticsPoint {
    /// Start of the bucket, Unix ms (a multiple of `bucket_ms`).
    pub start: u64,
    /// Requests started in the bucket.
    pub requests: u64,
    /// Those answered with a status of 400 or more.
    pub errors: u64,
    /// Prompt tokens (cached ones included).
    pub prompt_tokens: u64,
    /// Completion tokens.
    pub completion_tokens: u64,
    /// Cached prompt tokens.
    pub cached_tokens: u64,
    /// Cost of the priced requests, micro-USD.
    pub cost_micro_usd: u64,
    /// The same in USD.
    pub cost_usd: f64,
    /// Requests without a price (no cost).
    pub unpriced: u64,
    /// Latency percentiles.
    pub latency_ms: LatencyPercentiles,
    /// TTFT percentiles.
    pub ttft_ms: TtftPercentiles,
}

/// One series: a model, provider, key, group or client, `other`, or `all`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, schemars::JsonSchema)]
pub struct AnalyticsSeries {
    /// Its name (`""`: records without a key, group, provider or `User-Agent`; `all` without
    /// `by`).
    pub name: String,
    /// Whether this is the sum of the series beyond the first 20 (named `other`).
    pub other: bool,
    /// Its requests over the range.
    pub requests: u64,
    /// Its non-empty buckets, oldest first.
    pub points: Vec<AnalyticsPoint>,
}

/// The answer of `GET /api/v1/analytics/usage`.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct UsageAnswer {
    /// Start of the range, Unix ms, inclusive.
    pub from: u64,
    /// End of the range, Unix ms, exclusive.
    pub to: u64,
    /// Bucket width.
    pub bucket: AnalyticsBucket,
    /// The same in milliseconds.
    pub bucket_ms: u64,
    /// The dimension of the series (`null`: one series, `all`).
    pub by: Option<AnalyticsBy>,
    /// The series, most requests first, `other` last.
    pub series: Vec<AnalyticsSeries>,
}

/// The statement: `$1`, `$2` the range (and the narrowing), `W` the bucket width.
fn statement(q: &UsageQuery, w: &Where) -> String {
    let (dim, join) = dimension(q.by);
    let width = q.bucket.ms();
    format!(
        "WITH r AS (SELECT {dim} AS s, started_at, status, prompt_tokens, completion_tokens, cached_tokens, \
         cost_micro_usd, latency_ms, ttft_ms FROM fg_usage{join}{where_}), \
         top AS (SELECT s FROM r GROUP BY s ORDER BY count(*) DESC, s COLLATE \"C\" LIMIT {TOP_SERIES}) \
         SELECT (floor(extract(epoch FROM r.started_at) * 1000 / {width}) * {width})::int8, \
         coalesce(top.s, 'other'), top.s IS NULL, count(*)::int8, count(*) FILTER (WHERE status >= 400)::int8, \
         coalesce(sum(prompt_tokens), 0)::int8, coalesce(sum(completion_tokens), 0)::int8, \
         coalesce(sum(cached_tokens), 0)::int8, coalesce(sum(cost_micro_usd), 0)::int8, \
         count(*) FILTER (WHERE cost_micro_usd IS NULL)::int8, \
         percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY latency_ms), \
         percentile_cont(ARRAY[0.5, 0.95]) WITHIN GROUP (ORDER BY ttft_ms) \
         FROM r LEFT JOIN top ON top.s = r.s GROUP BY 1, 2, 3 ORDER BY 1",
        where_ = w.sql
    )
}

/// One row of the statement: its series (name, other) and its point.
fn point_of(row: &Row) -> Result<((String, bool), AnalyticsPoint), Failure> {
    let n = |i: usize| row.try_get::<_, i64>(i).map(count);
    let pct = |i: usize, at: usize| -> Result<Option<f64>, Failure> {
        let all: Option<Vec<Option<f64>>> = row.try_get(i)?;
        Ok(all.and_then(|v| v.get(at).copied().flatten()))
    };
    let cost = n(8)?;
    let point = AnalyticsPoint {
        start: n(0)?,
        requests: n(3)?,
        errors: n(4)?,
        prompt_tokens: n(5)?,
        completion_tokens: n(6)?,
        cached_tokens: n(7)?,
        cost_micro_usd: cost,
        cost_usd: usd(cost),
        unpriced: n(9)?,
        latency_ms: LatencyPercentiles { p50: pct(10, 0)?, p95: pct(10, 1)?, p99: pct(10, 2)? },
        ttft_ms: TtftPercentiles { p50: pct(11, 0)?, p95: pct(11, 1)? },
    };
    Ok(((row.try_get(1)?, row.try_get(2)?), point))
}

/// The rows (oldest bucket first) gathered into series: most requests first, ties by name,
/// `other` last.
fn gather(points: Vec<((String, bool), AnalyticsPoint)>) -> Vec<AnalyticsSeries> {
    let mut at: HashMap<(String, bool), usize> = HashMap::new();
    let mut series: Vec<AnalyticsSeries> = Vec::new();
    for ((name, other), point) in points {
        let i = *at.entry((name.clone(), other)).or_insert_with(|| {
            series.push(AnalyticsSeries { name, other, ..AnalyticsSeries::default() });
            series.len() - 1
        });
        series[i].requests += point.requests;
        series[i].points.push(point);
    }
    series.sort_by(|a, b| (a.other, b.requests, a.name.as_bytes()).cmp(&(b.other, a.requests, b.name.as_bytes())));
    series
}

/// Runs the usage query for `who`.
///
/// # Errors
/// The database fails.
pub async fn run(pool: &Pool, who: &Principal, q: &UsageQuery) -> Result<UsageAnswer, Failure> {
    let w = Where::new(q.range, who);
    let client = pool.get().await?;
    let rows = client.query(&statement(q, &w), &w.params()).await?;
    let points = rows.iter().map(point_of).collect::<Result<Vec<_>, _>>()?;
    Ok(UsageAnswer {
        from: q.range.from,
        to: q.range.to,
        bucket: q.bucket,
        bucket_ms: q.bucket.ms(),
        by: q.by,
        series: gather(points),
    })
}
