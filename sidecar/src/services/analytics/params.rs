//! The query strings of the analytics routes and their checks: a time range (Unix ms, the last
//! 24 hours by default), a bucket width (chosen from the range when absent, at most
//! [`MAX_BUCKETS`] buckets), a dimension, a metric, a page.

use serde::{Deserialize, Serialize};

use super::Failure;
use crate::services::usage::requests::Cursor;

/// Most buckets a usage answer may span (more: 400, ask for a wider bucket).
pub const MAX_BUCKETS: u64 = 2000;
/// The range when `from` is absent: 24 hours before `to`.
pub const DEFAULT_SPAN_MS: u64 = DAY_MS;
/// Latest time a range may reach (9999-12-31T23:59:59.999Z).
pub const MAX_MS: u64 = 253_402_300_799_999;
/// Most items of a top-N ranking.
pub const MAX_TOP: usize = 100;
/// Most events per page.
pub const MAX_EVENTS: usize = 1000;

pub(crate) const MINUTE_MS: u64 = 60_000;
pub(crate) const HOUR_MS: u64 = 3_600_000;
pub(crate) const DAY_MS: u64 = 86_400_000;

/// The width of a time bucket (UTC, aligned on the Unix epoch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AnalyticsBucket {
    /// One minute.
    Minute,
    /// One hour.
    Hour,
    /// One day (UTC).
    Day,
}

impl AnalyticsBucket {
    /// The width in milliseconds.
    pub fn ms(self) -> u64 {
        match self {
            AnalyticsBucket::Minute => MINUTE_MS,
            AnalyticsBucket::Hour => HOUR_MS,
            AnalyticsBucket::Day => DAY_MS,
        }
    }

    /// The bucket for a range of `span` ms when none is asked: minutes up to 6 hours, hours up
    /// to 31 days, days beyond.
    pub fn for_span(span: u64) -> AnalyticsBucket {
        match span {
            s if s <= 6 * HOUR_MS => AnalyticsBucket::Minute,
            s if s <= 31 * DAY_MS => AnalyticsBucket::Hour,
            _ => AnalyticsBucket::Day,
        }
    }
}

/// What records are grouped by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AnalyticsBy {
    /// The model the client asked for (`model_requested`).
    Model,
    /// The provider that served it (`""`: refused before routing, or a cache hit).
    Provider,
    /// The key (`""`: no key, an open gateway).
    Key,
    /// Each of the key's groups (a record counts once in each of its groups; `""`: none).
    Group,
    /// The client application: the first word of the `User-Agent` without its version
    /// (`OpenAI/Python 1.52.0` and `curl/8.5.0` are `OpenAI/Python` and `curl`; `""`: none
    /// sent; the rule: `sql::CLIENT`).
    Client,
}

/// What a top-N ranking orders by (largest first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AnalyticsMetric {
    /// Requests.
    Requests,
    /// Cost in micro-USD.
    Cost,
    /// Prompt plus completion tokens.
    Tokens,
    /// Requests answered with a status of 400 or more.
    Errors,
}

/// A time range `[from, to)`, Unix ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    /// Inclusive start.
    pub from: u64,
    /// Exclusive end.
    pub to: u64,
}

impl Range {
    /// `to` defaults to `now`, `from` to 24 hours before `to`; `from` must be before `to`.
    ///
    /// # Errors
    /// An empty or inverted range, or one past year 9999.
    pub fn of(from: Option<u64>, to: Option<u64>, now: u64) -> Result<Range, Failure> {
        let to = to.unwrap_or(now);
        let from = from.unwrap_or_else(|| to.saturating_sub(DEFAULT_SPAN_MS));
        if to > MAX_MS {
            return Err(Failure::Bad(format!("to: {to} is after year 9999 (at most {MAX_MS})")));
        }
        if from >= to {
            return Err(Failure::Bad(format!("from ({from}) must be before to ({to})")));
        }
        Ok(Range { from, to })
    }
}

/// `GET /api/v1/analytics/usage`'s query.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UsageParams {
    /// Unix ms, inclusive: default 24 hours before `to`.
    pub from: Option<u64>,
    /// Unix ms, exclusive: default now.
    pub to: Option<u64>,
    /// Bucket width: by default minute up to 6 h, hour up to 31 days, day beyond. At most 2000
    /// buckets (else 400).
    pub bucket: Option<AnalyticsBucket>,
    /// One series per model, provider, key, group or client (the 20 with most requests, the
    /// rest as `other`); absent: one series, `all`.
    pub by: Option<AnalyticsBy>,
}

/// The checked usage query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UsageQuery {
    /// The range.
    pub range: Range,
    /// The bucket width.
    pub bucket: AnalyticsBucket,
    /// The dimension of the series, if any.
    pub by: Option<AnalyticsBy>,
}

impl UsageParams {
    /// The range, and the bucket (chosen when absent), spanning at most [`MAX_BUCKETS`].
    ///
    /// # Errors
    /// A bad range, or too many buckets.
    pub fn check(self, now: u64) -> Result<UsageQuery, Failure> {
        let range = Range::of(self.from, self.to, now)?;
        let bucket = self.bucket.unwrap_or_else(|| AnalyticsBucket::for_span(range.to - range.from));
        let w = bucket.ms();
        let buckets = (range.to - 1) / w - range.from / w + 1;
        if buckets > MAX_BUCKETS {
            return Err(Failure::Bad(format!(
                "bucket: {buckets} buckets of {bucket:?} in the range, at most {MAX_BUCKETS}: narrow the range or \
                 widen the bucket"
            )));
        }
        Ok(UsageQuery { range, bucket, by: self.by })
    }
}

/// `GET /api/v1/analytics/top`'s query.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TopParams {
    /// Unix ms, inclusive: default 24 hours before `to`.
    pub from: Option<u64>,
    /// Unix ms, exclusive: default now.
    pub to: Option<u64>,
    /// What is ranked: default model.
    pub by: Option<AnalyticsBy>,
    /// What it is ranked by: default requests.
    pub metric: Option<AnalyticsMetric>,
    /// Items: 1 to 100, default 10.
    #[schemars(range(min = 1, max = 100))]
    pub limit: Option<usize>,
}

/// The checked top-N query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopQuery {
    /// The range.
    pub range: Range,
    /// What is ranked.
    pub by: AnalyticsBy,
    /// By what.
    pub metric: AnalyticsMetric,
    /// How many.
    pub limit: usize,
}

impl TopParams {
    /// The range, the defaults, the limit in 1 to [`MAX_TOP`].
    ///
    /// # Errors
    /// A bad range or limit.
    pub fn check(self, now: u64) -> Result<TopQuery, Failure> {
        Ok(TopQuery {
            range: Range::of(self.from, self.to, now)?,
            by: self.by.unwrap_or(AnalyticsBy::Model),
            metric: self.metric.unwrap_or(AnalyticsMetric::Requests),
            limit: limit(self.limit, 10, MAX_TOP)?,
        })
    }
}

/// `limit`, or `default`, which must be in 1 to `max`.
fn limit(limit: Option<usize>, default: usize, max: usize) -> Result<usize, Failure> {
    match limit.unwrap_or(default) {
        n @ 1.. if n <= max => Ok(n),
        n => Err(Failure::Bad(format!("limit: {n} is not in 1 to {max}"))),
    }
}

/// `GET /api/v1/analytics/events`'s query.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EventsParams {
    /// Unix ms, inclusive: default 24 hours before `to`.
    pub from: Option<u64>,
    /// Unix ms, exclusive: default now.
    pub to: Option<u64>,
    /// Events per page: 1 to 1000, default 100.
    #[schemars(range(min = 1, max = 1000))]
    pub limit: Option<usize>,
    /// `next_cursor` of the previous page (absent or empty: the first page).
    pub cursor: Option<String>,
}

/// The checked events query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventsQuery {
    /// The range.
    pub range: Range,
    /// Events per page.
    pub limit: usize,
    /// Only events strictly older than this position (newest-first order).
    pub after: Option<Cursor>,
}

impl EventsParams {
    /// The range, the limit in 1 to [`MAX_EVENTS`], the cursor decoded.
    ///
    /// # Errors
    /// A bad range, limit or cursor.
    pub fn check(self, now: u64) -> Result<EventsQuery, Failure> {
        let after = self.cursor.filter(|c| !c.is_empty()).map(|c| Cursor::decode(&c)).transpose();
        Ok(EventsQuery {
            range: Range::of(self.from, self.to, now)?,
            limit: limit(self.limit, 100, MAX_EVENTS)?,
            after: after.map_err(|e| Failure::Bad(e.to_string()))?,
        })
    }
}

/// `GET /api/v1/analytics/forecast`'s query.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForecastParams {
    /// The moment of the forecast, Unix ms: default now (an earlier one says what the forecast
    /// was then, from the records started before it).
    #[schemars(range(min = 0, max = 253_402_300_799_999_u64))]
    pub at: Option<u64>,
}

impl ForecastParams {
    /// The moment, `now` by default.
    ///
    /// # Errors
    /// A moment past year 9999.
    pub fn check(self, now: u64) -> Result<u64, Failure> {
        match self.at.unwrap_or(now) {
            at if at >= MAX_MS - 31 * DAY_MS => Err(Failure::Bad(format!("at: {at} is too late"))),
            at => Ok(at),
        }
    }
}
