//! The audit log: `fg_audit` rows and a log line (target `ferrogate::audit`) per admin change
//! and login, and `GET /api/v1/audit` to read them.
//!
//! A row says who (`actor`: `bootstrap`, `local`, `user:alice`, `token:12:alice`, `cli`,
//! `anonymous` for a failed login; `actor_kind`), what (`action`, `object`, `before`/`after`
//! with every secret field redacted), how it ended (`status`, `detail`), when (`at`) and from
//! where (`method`, `path`, `source_ip`, `user_agent`). Writing one never fails the request:
//! an error is logged. Rows older than `admin.audit.retention_days` are deleted by the
//! writers, at most once an hour per process. The log line carries no before/after.

use std::sync::atomic::{AtomicU64, Ordering};

use base64::Engine as _;
use deadpool_postgres::Pool;
use serde::Serialize;
use serde_json::Value;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use super::{redact, Actor, AuditEvent, Identity, IdentityError, Principal, RequestMeta};

/// Who an audit row names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Who {
    /// `user:alice`, `bootstrap`, ...
    pub label: String,
    /// `user`, `token`, `bootstrap`, `local`, `cli`, `anonymous`.
    pub kind: &'static str,
}

impl Who {
    /// The actor of an authenticated request.
    pub fn of(p: &Principal) -> Who {
        let kind = match p.actor {
            Actor::Bootstrap => "bootstrap",
            Actor::Local => "local",
            Actor::User { .. } => "user",
            Actor::Token { .. } => "token",
        };
        Who { label: p.actor.label(), kind }
    }

    /// Someone not (yet) authenticated: a failed login.
    pub fn anonymous() -> Who {
        Who { label: "anonymous".into(), kind: "anonymous" }
    }

    /// The `ferrogate admin` command line.
    pub fn cli() -> Who {
        Who { label: "cli".into(), kind: "cli" }
    }
}

/// `v` with every secret field's value replaced (see [`redact`]).
fn scrubbed(v: Option<Value>) -> Option<Value> {
    v.map(|mut v| {
        redact(&mut v, false);
        v
    })
}

/// Writes `event` (logs it; with Postgres also a row). Never fails: errors are logged.
pub async fn record(identity: &Identity, who: &Who, meta: &RequestMeta, event: AuditEvent) {
    tracing::info!(target: "ferrogate::audit", actor = %who.label, action = %event.action,
        object = event.object.as_deref().unwrap_or(""), status = event.status,
        source_ip = meta.source_ip.as_deref().unwrap_or(""), detail = event.detail.as_deref().unwrap_or(""),
        "admin audit");
    if !identity.postgres {
        return;
    }
    let Ok(pool) = identity.pool() else {
        tracing::error!(action = %event.action, "audit record not written: the database is not connected yet");
        return;
    };
    if let Err(e) = write(pool, who, meta, event, identity.settings.audit_retention_days).await {
        tracing::error!("audit record not written: {e}");
    }
}

/// Inserts one row (and now and then deletes rows past retention).
///
/// # Errors
/// Database errors.
pub async fn write(pool: &Pool, who: &Who, meta: &RequestMeta, e: AuditEvent, days: u32) -> Result<(), IdentityError> {
    let client = pool.get().await?;
    let status = i32::from(e.status);
    let (before, after) = (scrubbed(e.before), scrubbed(e.after));
    client
        .execute(
            "INSERT INTO fg_audit (actor, actor_kind, action, object, method, path, source_ip, user_agent, status, \
             before, after, detail) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
            &[
                &who.label,
                &who.kind,
                &e.action,
                &e.object,
                &meta.method,
                &meta.path,
                &meta.source_ip,
                &meta.user_agent,
                &status,
                &before,
                &after,
                &e.detail,
            ],
        )
        .await?;
    drop(client);
    prune(pool, days).await;
    Ok(())
}

/// Deletes rows older than `days`, at most once an hour per process.
async fn prune(pool: &Pool, days: u32) {
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = crate::services::now_ms();
    let last = LAST.load(Ordering::Relaxed);
    if now.saturating_sub(last) < 3_600_000
        || LAST.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_err()
    {
        return;
    }
    let days = i32::try_from(days).unwrap_or(i32::MAX);
    let deleted = async {
        let client = pool.get().await?;
        let sql = "DELETE FROM fg_audit WHERE at < now() - make_interval(days => $1)";
        Ok::<u64, IdentityError>(client.execute(sql, &[&days]).await?)
    };
    match deleted.await {
        Ok(0) => {}
        Ok(n) => tracing::info!("audit log: {n} records older than {days} days deleted"),
        Err(e) => tracing::warn!("audit log retention not applied: {e}"),
    }
}

/// One audit row as `GET /api/v1/audit` lists it.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct AuditRecord {
    /// Row id (newest highest).
    pub id: i64,
    /// When, Unix ms.
    pub at: i64,
    /// Who: `user:alice`, `token:12:alice`, `bootstrap`, `local`, `cli`, `anonymous`.
    pub actor: String,
    /// `user`, `token`, `bootstrap`, `local`, `cli` or `anonymous`.
    pub actor_kind: String,
    /// What: `authn_login_success`, `user_created`, `keys.replace`, ...
    pub action: String,
    /// What to: `users/alice`, `tokens/12`, `keys/k1`.
    pub object: Option<String>,
    /// HTTP method.
    pub method: Option<String>,
    /// Request path.
    pub path: Option<String>,
    /// Peer address.
    pub source_ip: Option<String>,
    /// `User-Agent`.
    pub user_agent: Option<String>,
    /// HTTP status answered.
    pub status: i32,
    /// The object before (secrets redacted).
    pub before: Option<Value>,
    /// The object after (secrets redacted).
    pub after: Option<Value>,
    /// Why, for refusals and failures.
    pub detail: Option<String>,
}

fn record_of(r: &Row) -> AuditRecord {
    AuditRecord {
        id: r.get(0),
        at: r.get(1),
        actor: r.get(2),
        actor_kind: r.get(3),
        action: r.get(4),
        object: r.get(5),
        method: r.get(6),
        path: r.get(7),
        source_ip: r.get(8),
        user_agent: r.get(9),
        status: r.get(10),
        before: r.get(11),
        after: r.get(12),
        detail: r.get(13),
    }
}

/// The query of `GET /api/v1/audit`.
#[derive(Debug, Clone, Default, PartialEq, Eq, schemars::JsonSchema)]
pub struct AuditQuery {
    /// Actor, exact (`user:alice`).
    pub actor: Option<String>,
    /// Action, exact.
    pub action: Option<String>,
    /// Object, exact (`users/alice`).
    pub object: Option<String>,
    /// Unix ms, inclusive.
    #[schemars(range(min = 0, max = 253_402_300_799_999_i64))]
    pub since: Option<i64>,
    /// Unix ms, exclusive.
    #[schemars(range(min = 0, max = 253_402_300_799_999_i64))]
    pub until: Option<i64>,
    /// Records per page: 1 to 1000, default 100.
    #[schemars(range(min = 1, max = 1000))]
    pub limit: Option<i64>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

/// One page, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct AuditPage {
    /// The records.
    pub events: Vec<AuditRecord>,
    /// Pass as `cursor` for the next page; null on the last.
    pub next_cursor: Option<String>,
}

impl AuditQuery {
    /// Parses a query string; unknown or malformed parameters are refused by name.
    ///
    /// # Errors
    /// [`IdentityError::Invalid`].
    pub fn parse(query: Option<&str>) -> Result<AuditQuery, IdentityError> {
        let mut q = AuditQuery::default();
        for (k, v) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
            let number =
                || v.parse::<i64>().map_err(|_| IdentityError::Invalid(format!("{k}: {v:?} is not an integer")));
            match k.as_ref() {
                "actor" => q.actor = Some(v.to_string()),
                "action" => q.action = Some(v.to_string()),
                "object" => q.object = Some(v.to_string()),
                "since" => q.since = Some(number()?),
                "until" => q.until = Some(number()?),
                "limit" => q.limit = Some(number()?),
                "cursor" => q.cursor = Some(v.to_string()),
                other => {
                    return Err(IdentityError::Invalid(format!(
                    "unknown query parameter {other:?} (expected actor, action, object, since, until, limit, cursor)"
                )))
                }
            }
        }
        if !(1..=1000).contains(&q.limit.unwrap_or(100)) {
            return Err(IdentityError::Invalid("limit: 1 to 1000".into()));
        }
        for (name, ms) in [("since", q.since), ("until", q.until)] {
            if ms.is_some_and(|ms| !(0..=MAX_MS).contains(&ms)) {
                return Err(IdentityError::Invalid(format!("{name}: Unix ms from 0 to {MAX_MS} (year 9999)")));
            }
        }
        // PostgreSQL text cannot hold NUL: such a filter matches nothing, and would fail the query.
        if [&q.actor, &q.action, &q.object].into_iter().flatten().any(|v| v.contains('\0')) {
            return Err(IdentityError::Invalid("actor, action and object cannot contain NUL".into()));
        }
        Ok(q)
    }
}

const CURSOR_TAG: &str = "audit:";
/// The last millisecond of the year 9999: what `since` and `until` may be at most.
const MAX_MS: i64 = 253_402_300_799_999;

fn cursor_of(id: i64) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{CURSOR_TAG}{id}"))
}

fn id_of(cursor: &str) -> Result<i64, IdentityError> {
    let bad = || IdentityError::Invalid("bad cursor: pass next_cursor of the previous page as it was".into());
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(cursor).map_err(|_| bad())?;
    let text = String::from_utf8(bytes).map_err(|_| bad())?;
    text.strip_prefix(CURSOR_TAG).and_then(|id| id.parse::<i64>().ok()).filter(|id| *id > 0).ok_or_else(bad)
}

/// A page of audit records matching `q`, newest first.
///
/// # Errors
/// [`IdentityError::Invalid`] for a bad cursor, database errors.
pub async fn query(pool: &Pool, q: &AuditQuery) -> Result<AuditPage, IdentityError> {
    let before_id = q.cursor.as_deref().map(id_of).transpose()?;
    let limit = q.limit.unwrap_or(100);
    let mut clauses: Vec<String> = Vec::new();
    let mut params: Vec<&(dyn ToSql + Sync)> = Vec::new();
    let filters: [(&str, Option<&(dyn ToSql + Sync)>); 6] = [
        ("actor = ?", q.actor.as_ref().map(|v| v as &(dyn ToSql + Sync))),
        ("action = ?", q.action.as_ref().map(|v| v as &(dyn ToSql + Sync))),
        ("object = ?", q.object.as_ref().map(|v| v as &(dyn ToSql + Sync))),
        ("at >= to_timestamp(?::int8 / 1000.0)", q.since.as_ref().map(|v| v as &(dyn ToSql + Sync))),
        ("at < to_timestamp(?::int8 / 1000.0)", q.until.as_ref().map(|v| v as &(dyn ToSql + Sync))),
        ("id < ?", before_id.as_ref().map(|v| v as &(dyn ToSql + Sync))),
    ];
    for (clause, value) in filters {
        if let Some(v) = value {
            params.push(v);
            clauses.push(clause.replace('?', &format!("${}", params.len())));
        }
    }
    let fetch = limit + 1;
    params.push(&fetch);
    let sql = format!(
        "SELECT id, (extract(epoch FROM at) * 1000)::int8, actor, actor_kind, action, object, method, path, \
         source_ip, user_agent, status, before, after, detail FROM fg_audit {} ORDER BY id DESC LIMIT ${}",
        if clauses.is_empty() { String::new() } else { format!("WHERE {}", clauses.join(" AND ")) },
        params.len()
    );
    let client = pool.get().await?;
    let rows = client.query(&sql, &params).await?;
    let mut events: Vec<AuditRecord> = rows.iter().map(record_of).collect();
    let more = events.len() > usize::try_from(limit).unwrap_or(usize::MAX);
    events.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    let next_cursor = if more { events.last().map(|e| cursor_of(e.id)) } else { None };
    Ok(AuditPage { events, next_cursor })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_bad_ones_are_refused() {
        assert_eq!(id_of(&cursor_of(42)).unwrap(), 42);
        for bad in ["", "!!", "YXVkaXQ6eA", &base64::engine::general_purpose::URL_SAFE_NO_PAD.encode("audit:-1")] {
            assert!(id_of(bad).unwrap_err().to_string().contains("bad cursor"), "{bad}");
        }
    }

    #[test]
    fn queries_parse_and_refuse_unknown_parameters() {
        let q = AuditQuery::parse(Some("actor=user%3Aalice&since=5&limit=10")).unwrap();
        assert_eq!((q.actor.as_deref(), q.since, q.limit), (Some("user:alice"), Some(5), Some(10)));
        assert!(AuditQuery::parse(Some("limit=0")).is_err() && AuditQuery::parse(Some("limit=1001")).is_err());
        assert!(AuditQuery::parse(Some("since=yesterday")).unwrap_err().to_string().contains("since"));
        assert!(AuditQuery::parse(Some("who=me")).unwrap_err().to_string().contains("\"who\""));
        assert!(AuditQuery::parse(Some("until=-9223372036854775808")).unwrap_err().to_string().contains("until"));
        assert!(AuditQuery::parse(Some("actor=a%00b")).is_err());
        assert_eq!(AuditQuery::parse(None).unwrap(), AuditQuery::default());
    }

    #[test]
    fn secrets_never_reach_a_row() {
        let v = scrubbed(Some(serde_json::json!({"name": "a", "password": "p", "token": "fgt_x", "csrf": "c"})));
        assert_eq!(
            v.unwrap().to_string(),
            r#"{"csrf":"[redacted]","name":"a","password":"[redacted]","token":"[redacted]"}"#
        );
    }
}
