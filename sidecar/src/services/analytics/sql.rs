//! SQL pieces shared by the analytics queries: the `WHERE` clause of a range and a caller's
//! narrowing, the expression and join of a dimension, conversions.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio_postgres::types::ToSql;

use super::params::{AnalyticsBy, Range, MAX_MS};
use crate::services::identity::Principal;

/// A `WHERE` clause and its values, in placeholder order.
pub(super) struct Where {
    /// ` WHERE … AND …` with `$n` placeholders.
    pub(super) sql: String,
    values: Vec<Box<dyn ToSql + Sync + Send>>,
}

impl Where {
    /// Records started in `range` ([`Where::value`] `$1` and `$2`) that `who` may see: a
    /// narrowed key-manager only those of keys all of whose groups (at least one) it manages.
    pub(super) fn new(range: Range, who: &Principal) -> Where {
        let mut w = Where { sql: String::new(), values: Vec::new() };
        let (from, to) = (w.value(time_of(range.from)), w.value(time_of(range.to)));
        w.sql = format!(" WHERE started_at >= {from} AND started_at < {to}");
        if let Some(groups) = super::narrowed_to(who) {
            let groups = w.value(groups.to_vec());
            let _ = write!(w.sql, " AND groups <> '{{}}' AND groups <@ {groups}::text[]");
        }
        w
    }

    /// Adds a value; returns its placeholder (`$n`).
    pub(super) fn value(&mut self, v: impl ToSql + Sync + Send + 'static) -> String {
        self.values.push(Box::new(v));
        format!("${}", self.values.len())
    }

    /// Adds ` AND condition`.
    pub(super) fn and(&mut self, condition: &str) {
        let _ = write!(self.sql, " AND {condition}");
    }

    /// The values, in placeholder order.
    pub(super) fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        self.values.iter().map(|v| v.as_ref() as &(dyn ToSql + Sync)).collect()
    }
}

/// A record's client: the `User-Agent` up to its first space (its first product token), less a
/// last `/`-separated part that starts with a digit or with `v` and a digit (its version), so
/// that every version of one SDK or tool is one client: `OpenAI/Python 1.52.0` is
/// `OpenAI/Python`, `curl/8.5.0` is `curl`, `google-genai-sdk/1.2.0 gl-python/3.11` is
/// `google-genai-sdk`, `Go-http-client/v2` is `Go-http-client`. `''` without a `User-Agent` (or
/// with one that starts with a space). Computed per row: the range aggregates read every row of
/// their range anyway (see `0018_usage_client.sql`).
pub(super) const CLIENT: &str = "regexp_replace(split_part(coalesce(user_agent, ''), ' ', 1), '/[vV]?[0-9][^/]*$', '')";

/// The SQL expression naming a record's series and the join it needs (`FROM fg_usage` then
/// the join): `'all'` without a dimension; each group of the record for `group` (`''` when it
/// has none), the key (`''` without one), the model, the provider, the [`CLIENT`].
pub(super) fn dimension(by: Option<AnalyticsBy>) -> (&'static str, &'static str) {
    match by {
        None => ("'all'::text", ""),
        Some(AnalyticsBy::Model) => ("model_requested", ""),
        Some(AnalyticsBy::Provider) => ("provider", ""),
        Some(AnalyticsBy::Key) => ("coalesce(key, '')", ""),
        Some(AnalyticsBy::Client) => (CLIENT, ""),
        Some(AnalyticsBy::Group) => (
            "g.name",
            " CROSS JOIN LATERAL unnest(CASE WHEN cardinality(groups) = 0 THEN ARRAY['']::text[] ELSE groups END) \
             AS g(name)",
        ),
    }
}

/// Unix milliseconds as a timestamp (clamped to year 9999).
pub(super) fn time_of(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms.min(MAX_MS))
}

/// A timestamp as Unix milliseconds (0 before 1970).
pub(super) fn ms_of(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A `bigint` count or sum as `u64` (negative: 0).
pub(super) fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// Micro-USD as USD.
#[allow(clippy::cast_precision_loss)]
pub(super) fn usd(micro: u64) -> f64 {
    micro as f64 / 1e6
}
