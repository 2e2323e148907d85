//! `GET /api/v1/analytics/top`: the first N models, providers, keys, groups or clients of a
//! range by requests, cost, tokens or errors (largest first, ties by name in byte order), each
//! with all four figures.

use deadpool_postgres::Pool;
use serde::Serialize;

use super::params::{AnalyticsBy, AnalyticsMetric, TopQuery};
use super::sql::{count, dimension, usd, Where};
use super::Failure;
use crate::services::identity::Principal;

/// One ranked model, provider, key, group or client.
#[derive(Debug, Clone, Default, PartialEq, Serialize, schemars::JsonSchema)]
pub struct TopItem {
    /// Its name (`""`: records without a key, group, provider or `User-Agent`).
    pub name: String,
    /// Requests.
    pub requests: u64,
    /// Those answered with a status of 400 or more.
    pub errors: u64,
    /// Prompt tokens (cached ones included).
    pub prompt_tokens: u64,
    /// Completion tokens.
    pub completion_tokens: u64,
    /// Prompt plus completion tokens.
    pub tokens: u64,
    /// Cost of the priced requests, micro-USD.
    pub cost_micro_usd: u64,
    /// The same in USD.
    pub cost_usd: f64,
}

/// The answer of `GET /api/v1/analytics/top`.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct TopAnswer {
    /// Start of the range, Unix ms, inclusive.
    pub from: u64,
    /// End of the range, Unix ms, exclusive.
    pub to: u64,
    /// What is ranked.
    pub by: AnalyticsBy,
    /// By what.
    pub metric: AnalyticsMetric,
    /// The ranking, first first.
    pub items: Vec<TopItem>,
}

/// The aggregate a metric orders by.
fn order_of(metric: AnalyticsMetric) -> &'static str {
    match metric {
        AnalyticsMetric::Requests => "count(*)",
        AnalyticsMetric::Cost => "coalesce(sum(cost_micro_usd), 0)",
        AnalyticsMetric::Tokens => "coalesce(sum(prompt_tokens + completion_tokens), 0)",
        AnalyticsMetric::Errors => "count(*) FILTER (WHERE status >= 400)",
    }
}

/// Runs the ranking for `who`.
///
/// # Errors
/// The database fails.
pub async fn run(pool: &Pool, who: &Principal, q: &TopQuery) -> Result<TopAnswer, Failure> {
    let w = Where::new(q.range, who);
    let (dim, join) = dimension(Some(q.by));
    let sql = format!(
        "SELECT {dim}, count(*)::int8, count(*) FILTER (WHERE status >= 400)::int8, \
         coalesce(sum(prompt_tokens), 0)::int8, coalesce(sum(completion_tokens), 0)::int8, \
         coalesce(sum(cost_micro_usd), 0)::int8 FROM fg_usage{join}{} GROUP BY 1 \
         ORDER BY {} DESC, {dim} COLLATE \"C\" LIMIT {}",
        w.sql,
        order_of(q.metric),
        q.limit
    );
    let client = pool.get().await?;
    let mut items = Vec::new();
    for row in client.query(&sql, &w.params()).await? {
        let n = |i: usize| row.try_get::<_, i64>(i).map(count);
        let (prompt, completion, cost) = (n(3)?, n(4)?, n(5)?);
        items.push(TopItem {
            name: row.try_get(0)?,
            requests: n(1)?,
            errors: n(2)?,
            prompt_tokens: prompt,
            completion_tokens: completion,
            tokens: prompt.saturating_add(completion),
            cost_micro_usd: cost,
            cost_usd: usd(cost),
        });
    }
    Ok(TopAnswer { from: q.range.from, to: q.range.to, by: q.by, metric: q.metric, items })
}
