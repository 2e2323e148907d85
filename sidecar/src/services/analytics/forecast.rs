//! `GET /api/v1/analytics/forecast`: the cost of the current month (UTC) so far and where it
//! will end, overall, per model and per group. The forecast is linear: the month-to-date cost
//! plus the daily run rate of the last 7 days (their cost divided by 7) times the days left in
//! the month, fractions of a day included. Costs are those of the records started before `at`.

use deadpool_postgres::{GenericClient, Pool};
use serde::Serialize;

use super::params::{AnalyticsBy, Range, DAY_MS};
use super::sql::{count, dimension, time_of, usd, Where};
use super::Failure;
use crate::services::identity::Principal;

/// Days of the run rate.
pub const RATE_DAYS: u64 = 7;

/// How the answer's forecast is made, said in it.
pub const METHOD: &str = "linear: month-to-date cost + (cost of the last 7 days / 7) x days left in the month (UTC)";

/// The cost figures of one scope (everything, a model, a group).
#[derive(Debug, Clone, Default, PartialEq, Serialize, schemars::JsonSchema)]
pub struct CostForecast {
    /// The model or group (`""`: records without a group); `all` overall.
    pub name: String,
    /// Cost since the start of the month, micro-USD.
    pub month_to_date_micro_usd: u64,
    /// The same in USD.
    pub month_to_date_usd: f64,
    /// Cost of the last 7 days (before `at`), micro-USD.
    pub last_7_days_micro_usd: u64,
    /// That divided by 7: micro-USD per day.
    pub daily_rate_micro_usd: f64,
    /// Month-to-date plus the daily rate times the days left, micro-USD (rounded).
    pub forecast_micro_usd: u64,
    /// The same in USD.
    pub forecast_usd: f64,
}

/// The answer of `GET /api/v1/analytics/forecast`.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct ForecastAnswer {
    /// The moment of the forecast, Unix ms.
    pub at: u64,
    /// Start of its month (UTC), Unix ms.
    pub month_start: u64,
    /// Start of the next month, Unix ms.
    pub month_end: u64,
    /// Days from `at` to `month_end`.
    pub days_left: f64,
    /// How the forecast is made.
    pub method: String,
    /// Every record.
    pub overall: CostForecast,
    /// Per model, highest month-to-date cost first.
    pub by_model: Vec<CostForecast>,
    /// Per group (a record counts in each of its groups), highest month-to-date cost first.
    pub by_group: Vec<CostForecast>,
}

/// The days since 1970-01-01 of a civil date (proleptic Gregorian; H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The civil (year, month) of a day since 1970-01-01.
fn year_month(days: i64) -> (i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m)
}

/// The month of `at` (UTC): its start and the next month's, Unix ms.
pub fn month_of(at: u64) -> (u64, u64) {
    let (y, m) = year_month(i64::try_from(at / DAY_MS).unwrap_or(0));
    let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
    let ms = |days: i64| u64::try_from(days).unwrap_or(0) * DAY_MS;
    (ms(days_from_civil(y, m, 1)), ms(days_from_civil(ny, nm, 1)))
}

/// The figures of one scope from its two sums.
#[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation, clippy::cast_sign_loss)]
pub fn figures(name: String, month_to_date: u64, last_7_days: u64, days_left: f64) -> CostForecast {
    let rate = last_7_days as f64 / RATE_DAYS as f64;
    let forecast = (month_to_date as f64 + rate * days_left).round() as u64;
    CostForecast {
        name,
        month_to_date_micro_usd: month_to_date,
        month_to_date_usd: usd(month_to_date),
        last_7_days_micro_usd: last_7_days,
        daily_rate_micro_usd: rate,
        forecast_micro_usd: forecast,
        forecast_usd: usd(forecast),
    }
}

/// The two sums per name of a dimension (`None`: overall), highest month-to-date first.
async fn sums(
    client: &impl GenericClient,
    who: &Principal,
    by: Option<AnalyticsBy>,
    (month_start, at): (u64, u64),
) -> Result<Vec<(String, u64, u64)>, Failure> {
    let week_ago = at.saturating_sub(RATE_DAYS * DAY_MS);
    let mut w = Where::new(Range { from: month_start.min(week_ago), to: at }, who);
    let (m, k) = (w.value(time_of(month_start)), w.value(time_of(week_ago)));
    let (dim, join) = dimension(by);
    let sql = format!(
        "SELECT {dim}, coalesce(sum(cost_micro_usd) FILTER (WHERE started_at >= {m}), 0)::int8, \
         coalesce(sum(cost_micro_usd) FILTER (WHERE started_at >= {k}), 0)::int8 FROM fg_usage{join}{} \
         GROUP BY 1 ORDER BY 2 DESC, {dim} COLLATE \"C\"",
        w.sql
    );
    let rows = client.query(&sql, &w.params()).await?;
    rows.iter().map(|r| Ok((r.try_get(0)?, count(r.try_get(1)?), count(r.try_get(2)?)))).collect()
}

/// Runs the forecast at `at` for `who`, the three sums in one snapshot.
///
/// # Errors
/// The database fails.
#[allow(clippy::cast_precision_loss)]
pub async fn run(pool: &Pool, who: &Principal, at: u64) -> Result<ForecastAnswer, Failure> {
    let (month_start, month_end) = month_of(at);
    let days_left = (month_end - at) as f64 / DAY_MS as f64;
    let mut client = pool.get().await?;
    let tx = client
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await?;
    let scope = (month_start, at.max(1));
    let make = |rows: Vec<(String, u64, u64)>| -> Vec<CostForecast> {
        rows.into_iter().map(|(name, mtd, week)| figures(name, mtd, week, days_left)).collect()
    };
    let overall = make(sums(&tx, who, None, scope).await?).pop();
    let by_model = make(sums(&tx, who, Some(AnalyticsBy::Model), scope).await?);
    let by_group = make(sums(&tx, who, Some(AnalyticsBy::Group), scope).await?);
    tx.commit().await?;
    Ok(ForecastAnswer {
        at,
        month_start,
        month_end,
        days_left,
        method: METHOD.into(),
        overall: overall.unwrap_or_else(|| figures("all".into(), 0, 0, days_left)),
        by_model,
        by_group,
    })
}
