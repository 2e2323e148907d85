//! Usage records in Postgres: the `fg_usage` table (`0002_usage.sql`), one typed column per
//! [`Record`] field (`guardrails` as its JSON, `jsonb`; `cached` since `0015_cache.sql`,
//! `user_agent` since `0018_usage_client.sql`, `endpoint` since `0021_usage_endpoint.sql`), written one batch per statement and read
//! by the admin API's queries.
//!
//! A batch is one `INSERT … SELECT FROM UNNEST(<one array per column>)`: one round trip and one
//! implicit transaction whatever the batch size, so the filter is acknowledged only once every
//! row is committed. Each row carries the digest of its JSON line and `ON CONFLICT (digest) DO
//! NOTHING` skips lines already stored: a batch whose acknowledgement was lost and that the
//! filter sends again is stored once. The digest covers the whole line, not only the request
//! id, because `x-request-id` comes from the client and may repeat; only records equal in
//! every field (same request id, start millisecond, latency, tokens, …) count once. The
//! statement returns the digests it stored, so the request log writes only the new rows.
//!
//! Queries answer exactly as the memory store does ([`UsageStore::query`](super::super::usage::UsageStore::query)):
//! totals over every match, then the newest matches by start time (ties: the later arrival
//! first), in one read-only snapshot so both parts agree.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use deadpool_postgres::GenericClient;
use ferrogate_core::usage::{GuardrailRecord, Record};
use sha2::{Digest, Sha256};
use tokio_postgres::types::{Json, ToSql};
use tokio_postgres::Row;

use super::{PgStore, StoreError};
use crate::services::usage::{Answer, Query, Totals};

/// Latest start time stored (9999-12-31T23:59:59.999Z); later ones are clamped to it.
const MAX_MS: u64 = 253_402_300_799_999;

const INSERT: &str = "INSERT INTO fg_usage (digest, request_id, key, groups, model_requested, provider, \
    upstream_model, status, prompt_tokens, completion_tokens, cached_tokens, cost_micro_usd, latency_ms, ttft_ms, \
    started_at, streamed, cut, partial, queued_ms, retries, continues, rebuilt, guardrails, cached, user_agent, \
    endpoint) \
    SELECT d, r, k, ARRAY(SELECT jsonb_array_elements_text(g)), m, p, u, s, pt, ct, ch, c, l, t, a, st, x, pa, q, re, \
    co, rb, gr, hit, ua, ep \
    FROM UNNEST($1::bytea[], $2::text[], $3::text[], $4::jsonb[], $5::text[], $6::text[], $7::text[], $8::int4[], \
    $9::int8[], $10::int8[], $11::int8[], $12::int8[], $13::int8[], $14::int8[], $15::timestamptz[], $16::bool[], $17::bool[], \
    $18::bool[], $19::int8[], $20::int8[], $21::text[], $22::bool[], $23::jsonb[], $24::bool[], $25::text[], \
    $26::text[]) \
    WITH ORDINALITY AS b(d, r, k, g, m, p, u, s, pt, ct, ch, c, l, t, a, st, x, pa, q, re, co, rb, gr, hit, ua, ep, n) \
    ORDER BY n \
    ON CONFLICT (digest) DO NOTHING \
    RETURNING digest";

/// The columns [`record_of`] reads, in its order.
pub(super) const COLUMNS: &str = "request_id, key, groups, model_requested, provider, upstream_model, status, \
    prompt_tokens, completion_tokens, cached_tokens, cost_micro_usd, latency_ms, ttft_ms, started_at, streamed, cut, \
    partial, queued_ms, retries, continues, rebuilt, guardrails, cached, user_agent, endpoint";

/// One record ready for the table, identified by the digest of the line it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageRow {
    /// First 16 bytes of the SHA-256 of the JSON line.
    pub digest: [u8; 16],
    /// The record.
    pub record: Record,
}

impl UsageRow {
    /// Parses one JSON line (as the filter sent it, surrounding blanks trimmed).
    ///
    /// # Errors
    /// The line is not a usage record.
    pub fn parse(line: &[u8]) -> Result<UsageRow, serde_json::Error> {
        let record = serde_json::from_slice(line)?;
        let mut digest = [0u8; 16];
        for (d, b) in digest.iter_mut().zip(Sha256::digest(line)) {
            *d = b;
        }
        Ok(UsageRow { digest, record })
    }
}

impl PgStore {
    /// Stores a batch in one statement; returns how many rows were new (lines already stored
    /// are skipped). Nothing is stored on error.
    ///
    /// # Errors
    /// The database is unreachable or refuses the statement.
    pub async fn insert_usage(&self, rows: &[UsageRow]) -> Result<u64, StoreError> {
        Ok(u64::try_from(self.insert_usage_new(rows).await?.len()).unwrap_or(u64::MAX))
    }

    /// Stores a batch in one statement; returns the digests of the rows that were new (lines
    /// already stored, and repeats within the batch, are skipped). Nothing is stored on error.
    ///
    /// # Errors
    /// The database is unreachable or refuses the statement.
    pub async fn insert_usage_new(&self, rows: &[UsageRow]) -> Result<HashSet<[u8; 16]>, StoreError> {
        if rows.is_empty() {
            return Ok(HashSet::new());
        }
        let c = Columns::of(rows);
        let client = self.pool.get().await?;
        let params: [&(dyn ToSql + Sync); 26] = [
            &c.digest,
            &c.request_id,
            &c.key,
            &c.groups,
            &c.model_requested,
            &c.provider,
            &c.upstream_model,
            &c.status,
            &c.prompt_tokens,
            &c.completion_tokens,
            &c.cached_tokens,
            &c.cost_micro_usd,
            &c.latency_ms,
            &c.ttft_ms,
            &c.started_at,
            &c.streamed,
            &c.cut,
            &c.partial,
            &c.queued_ms,
            &c.retries,
            &c.continues,
            &c.rebuilt,
            &c.guardrails,
            &c.cached,
            &c.user_agent,
            &c.endpoint,
        ];
        let stored = client.query(INSERT, &params).await?;
        let digest = |row: &Row| row.try_get::<_, &[u8]>(0).ok().and_then(|d| <[u8; 16]>::try_from(d).ok());
        Ok(stored.iter().filter_map(digest).collect())
    }

    /// Totals over every record matching `q` and the newest matches up to its limit.
    ///
    /// # Errors
    /// The database is unreachable.
    pub async fn query_usage(&self, q: &Query) -> Result<Answer, StoreError> {
        let filter = Filter::of(q);
        let params = filter.params();
        let mut client = self.pool.get().await?;
        let tx = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await?;
        let sums = format!(
            "SELECT count(*)::int8, coalesce(sum(prompt_tokens), 0)::int8, coalesce(sum(completion_tokens), 0)::int8, \
             coalesce(sum(cost_micro_usd), 0)::int8 FROM fg_usage{}",
            filter.sql
        );
        let row = tx.query_one(&sums, &params).await?;
        let count = |i: usize| row.try_get::<_, i64>(i).map(to_u64);
        let totals = Totals {
            requests: count(0)?,
            prompt_tokens: count(1)?,
            completion_tokens: count(2)?,
            cost_micro_usd: count(3)?,
        };
        let mut records = Vec::new();
        let limit = q.effective_limit();
        if limit > 0 {
            let page =
                format!("SELECT {COLUMNS} FROM fg_usage{} ORDER BY started_at DESC, id DESC LIMIT {limit}", filter.sql);
            for row in tx.query(&page, &params).await? {
                records.push(record_of(&row)?);
            }
        }
        tx.commit().await?;
        Ok(Answer { totals, records, unreadable: 0 })
    }
}

/// The batch as one array per column, in the table's types.
struct Columns<'a> {
    digest: Vec<&'a [u8]>,
    request_id: Vec<&'a str>,
    key: Vec<Option<&'a str>>,
    groups: Vec<serde_json::Value>,
    model_requested: Vec<&'a str>,
    provider: Vec<&'a str>,
    upstream_model: Vec<&'a str>,
    status: Vec<i32>,
    prompt_tokens: Vec<i64>,
    completion_tokens: Vec<i64>,
    cached_tokens: Vec<i64>,
    cost_micro_usd: Vec<Option<i64>>,
    latency_ms: Vec<i64>,
    ttft_ms: Vec<Option<i64>>,
    started_at: Vec<SystemTime>,
    streamed: Vec<bool>,
    cut: Vec<bool>,
    partial: Vec<bool>,
    queued_ms: Vec<i64>,
    retries: Vec<i64>,
    continues: Vec<Option<&'a str>>,
    rebuilt: Vec<bool>,
    /// `NULL` when the record has none.
    guardrails: Vec<Option<Json<&'a GuardrailRecord>>>,
    cached: Vec<bool>,
    user_agent: Vec<Option<&'a str>>,
    endpoint: Vec<Option<&'a str>>,
}

impl<'a> Columns<'a> {
    fn of(rows: &'a [UsageRow]) -> Columns<'a> {
        let all = |f: fn(&'a Record) -> &'a str| rows.iter().map(|r| f(&r.record)).collect();
        let num = |f: fn(&Record) -> u64| rows.iter().map(|r| to_i64(f(&r.record))).collect();
        let opt = |f: fn(&Record) -> Option<u64>| rows.iter().map(|r| f(&r.record).map(to_i64)).collect();
        Columns {
            digest: rows.iter().map(|r| r.digest.as_slice()).collect(),
            request_id: all(|r| &r.request_id),
            key: rows.iter().map(|r| r.record.key.as_deref()).collect(),
            groups: rows.iter().map(|r| serde_json::Value::from(r.record.groups.clone())).collect(),
            model_requested: all(|r| &r.model_requested),
            provider: all(|r| &r.provider),
            upstream_model: all(|r| &r.upstream_model),
            status: rows.iter().map(|r| i32::from(r.record.status)).collect(),
            prompt_tokens: num(|r| r.prompt_tokens),
            completion_tokens: num(|r| r.completion_tokens),
            cached_tokens: num(|r| r.cached_tokens),
            cost_micro_usd: opt(|r| r.cost_micro_usd),
            latency_ms: num(|r| r.latency_ms),
            ttft_ms: opt(|r| r.ttft_ms),
            started_at: rows.iter().map(|r| time_of(r.record.started_at_unix_ms)).collect(),
            streamed: rows.iter().map(|r| r.record.streamed).collect(),
            cut: rows.iter().map(|r| r.record.cut).collect(),
            partial: rows.iter().map(|r| r.record.partial).collect(),
            queued_ms: num(|r| r.queued_ms),
            retries: num(|r| r.retries),
            continues: rows.iter().map(|r| r.record.continues.as_deref()).collect(),
            rebuilt: rows.iter().map(|r| r.record.rebuilt).collect(),
            guardrails: rows.iter().map(|r| r.record.guardrails.as_ref().map(Json)).collect(),
            cached: rows.iter().map(|r| r.record.cached).collect(),
            user_agent: rows.iter().map(|r| r.record.user_agent.as_deref()).collect(),
            endpoint: rows.iter().map(|r| r.record.endpoint.as_deref()).collect(),
        }
    }
}

/// The `WHERE` clause of a query, with only the filters it sets (so each uses its index).
#[derive(Default)]
pub(super) struct Filter {
    /// `WHERE … AND …` with `$n` placeholders, or empty.
    pub(super) sql: String,
    values: Vec<Box<dyn ToSql + Sync + Send>>,
}

impl Filter {
    fn of(q: &Query) -> Filter {
        let mut f = Filter::default();
        if let Some(key) = &q.key {
            f.push("key =", Box::new(key.clone()));
        }
        if let Some(model) = &q.model {
            f.push("model_requested =", Box::new(model.clone()));
        }
        if let Some(since) = q.since {
            f.push("started_at >=", Box::new(time_of(since)));
        }
        if let Some(until) = q.until {
            f.push("started_at <", Box::new(time_of(until)));
        }
        f
    }

    /// Adds `condition $n` (`condition` ends in an operator) with its value.
    pub(super) fn push(&mut self, condition: &str, value: Box<dyn ToSql + Sync + Send>) {
        self.values.push(value);
        let word = if self.values.len() == 1 { "WHERE" } else { "AND" };
        let _ = write!(self.sql, " {word} {condition} ${}", self.values.len());
    }

    /// Adds `(started_at, id) < ($n, $m)`: the rows after a keyset cursor, newest first (one
    /// row comparison, which the (started_at DESC, id DESC) indexes serve).
    pub(super) fn push_before(&mut self, started_ms: u64, id: u64) {
        self.values.push(Box::new(time_of(started_ms)));
        self.values.push(Box::new(to_i64(id)));
        let n = self.values.len();
        let word = if n == 2 { "WHERE" } else { "AND" };
        let _ = write!(self.sql, " {word} (started_at, id) < (${}, ${n})", n - 1);
    }

    /// The values, in placeholder order.
    pub(super) fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        self.values.iter().map(|v| v.as_ref() as &(dyn ToSql + Sync)).collect()
    }
}

/// A row of [`COLUMNS`] as the record the filter sent.
pub(super) fn record_of(row: &Row) -> Result<Record, StoreError> {
    let num = |i: usize| row.try_get::<_, i64>(i).map(to_u64);
    let opt = |i: usize| row.try_get::<_, Option<i64>>(i).map(|v| v.map(to_u64));
    let started: SystemTime = row.try_get(13)?;
    Ok(Record {
        request_id: row.try_get(0)?,
        key: row.try_get(1)?,
        groups: row.try_get(2)?,
        model_requested: row.try_get(3)?,
        provider: row.try_get(4)?,
        upstream_model: row.try_get(5)?,
        status: u16::try_from(row.try_get::<_, i32>(6)?).unwrap_or_default(),
        prompt_tokens: num(7)?,
        completion_tokens: num(8)?,
        cached_tokens: num(9)?,
        cost_micro_usd: opt(10)?,
        latency_ms: num(11)?,
        ttft_ms: opt(12)?,
        started_at_unix_ms: started
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        streamed: row.try_get(14)?,
        // Not stored: it only steers the limits ledger at ingestion.
        admitted: false,
        cut: row.try_get(15)?,
        partial: row.try_get(16)?,
        queued_ms: num(17)?,
        retries: num(18)?,
        continues: row.try_get(19)?,
        rebuilt: row.try_get(20)?,
        guardrails: row.try_get::<_, Option<Json<GuardrailRecord>>>(21)?.map(|Json(g)| g),
        cached: row.try_get(22)?,
        user_agent: row.try_get(23)?,
        endpoint: row.try_get(24)?,
    })
}

/// Unix milliseconds as a timestamp (clamped to year 9999, the last Postgres prints plainly).
pub(super) fn time_of(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms.min(MAX_MS))
}

/// Counters are `u64` in records and `bigint` in the table; beyond `i64::MAX` they saturate.
pub(super) fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

pub(super) fn to_u64(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

#[cfg(test)]
mod tests;
