//! The request log's query: cursors and parameters, and the cases every store must answer
//! alike (`filters_case`, `paging_case`: run here on the memory store, and on Postgres by
//! `pg::requests::tests`).

use std::collections::HashSet;

use bytes::Bytes;
use ferrogate_core::usage::{GuardrailCheck, GuardrailHit, GuardrailRecord, Record};

use super::*;
use crate::services::usage::UsageBackend;

/// Record number `i` (its `prompt_tokens`, which identify it): request ids repeat every 7, a
/// key of three or none, two models, three providers, six statuses, two records per start
/// millisecond, some streamed and some of those partial, retries 0 to 2, guardrails on every
/// fourth.
pub(crate) fn record(i: u64) -> Record {
    let pick = |options: &[&str], n: u64| options[(i % n) as usize].to_string();
    Record {
        request_id: format!("req-{}", i % 7),
        key: (i % 4 != 3).then(|| pick(&["alice", "bob", "carol", ""], 4)),
        groups: vec!["dev".into()],
        model_requested: pick(&["chat", "embed"], 2),
        provider: pick(&["local", "cloud", "edge"], 3),
        upstream_model: "sim-small".into(),
        status: [200, 200, 429, 502, 499, 201][(i % 6) as usize],
        prompt_tokens: i,
        completion_tokens: 2,
        cost_micro_usd: i.is_multiple_of(2).then_some(5),
        latency_ms: 40,
        ttft_ms: Some(3),
        started_at_unix_ms: 1_000 + i / 2 * 10,
        streamed: i % 5 < 2,
        partial: i.is_multiple_of(5),
        retries: i % 3,
        guardrails: (i % 4 == 1).then(|| GuardrailRecord {
            blocked: i.is_multiple_of(3).then(|| "pii/\"email\"".into()),
            hits: vec![GuardrailHit {
                rule: "pii/email".into(),
                stage: "input".into(),
                action: "redact".into(),
                count: i as u32,
            }],
            checks: vec![GuardrailCheck {
                rule: "hook/mod".into(),
                stage: "output".into(),
                verdict: "allow".into(),
                latency_ms: i,
            }],
        }),
        ..Record::default()
    }
}

/// Stores the records numbered `numbers`, in one batch.
pub(crate) async fn add(backend: &UsageBackend, numbers: impl Iterator<Item = u64>) {
    let batch: String = numbers.map(|i| record(i).to_json_line()).collect();
    backend.add(Bytes::from(batch)).await.unwrap();
}

/// Every page of `params` (with `limit`), followed from cursor to cursor: the record numbers.
async fn all_pages(backend: &UsageBackend, params: &Params, limit: usize) -> Vec<u64> {
    let mut seen = Vec::new();
    let mut cursor = None;
    for _ in 0..100 {
        let p = Params { limit: Some(limit), cursor: cursor.take(), ..params.clone() };
        let page = backend.requests(&RequestFilter::parse(p).unwrap()).await.unwrap();
        assert!(page.requests.len() <= limit);
        seen.extend(page.requests.iter().map(|r| r.prompt_tokens));
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return seen,
        }
    }
    panic!("more than 100 pages");
}

/// The numbers of `stored` (in arrival order) that pass `keep`, newest first: by start, then
/// the later arrival.
fn newest_first(stored: &[u64], keep: impl Fn(&Record) -> bool) -> Vec<u64> {
    let mut hits: Vec<(u64, usize, u64)> = stored
        .iter()
        .enumerate()
        .map(|(at, &i)| (record(i), at, i))
        .filter(|(r, _, _)| keep(r))
        .map(|(r, at, i)| (r.started_at_unix_ms, at, i))
        .collect();
    hits.sort_unstable_by(|a, b| b.cmp(a));
    hits.into_iter().map(|(_, _, i)| i).collect()
}

/// Each filter alone (and two together) returns exactly its matches, newest first, across
/// pages of 4. The store must be empty.
pub(crate) async fn filters_case(backend: &UsageBackend) {
    add(backend, 0..30).await;
    let stored: Vec<u64> = (0..30).collect();
    let s = |v: &str| Some(v.to_string());
    type Case = (Params, fn(&Record) -> bool);
    let cases: Vec<Case> = vec![
        (Params::default(), |_| true),
        (Params { request_id: s("req-3"), ..Params::default() }, |r| r.request_id == "req-3"),
        (Params { key: s("alice"), ..Params::default() }, |r| r.key.as_deref() == Some("alice")),
        (Params { model: s("embed"), ..Params::default() }, |r| r.model_requested == "embed"),
        (Params { provider: s("cloud"), ..Params::default() }, |r| r.provider == "cloud"),
        (Params { status: Some(429), ..Params::default() }, |r| r.status == 429),
        (Params { status_class: s("2xx"), ..Params::default() }, |r| r.status == 200 || r.status == 201),
        (Params { status_class: s("4XX"), ..Params::default() }, |r| r.status == 429 || r.status == 499),
        (Params { since: Some(1_050), ..Params::default() }, |r| r.started_at_unix_ms >= 1_050),
        (Params { until: Some(1_050), ..Params::default() }, |r| r.started_at_unix_ms < 1_050),
        (Params { streamed: Some(true), ..Params::default() }, |r| r.streamed),
        (Params { streamed: Some(false), ..Params::default() }, |r| !r.streamed),
        (Params { partial: Some(true), ..Params::default() }, |r| r.partial),
        (Params { partial: Some(false), ..Params::default() }, |r| !r.partial),
        (Params { key: s("bob"), status_class: s("5xx"), ..Params::default() }, |r| {
            r.key.as_deref() == Some("bob") && r.status == 502
        }),
        (Params { key: s("nobody"), ..Params::default() }, |_| false),
    ];
    for (n, (params, keep)) in cases.iter().enumerate() {
        let want = newest_first(&stored, keep);
        let meaningful = if n == 0 { want.len() == 30 } else { want.len() < 30 && (want.is_empty() == (n == 15)) };
        assert!(meaningful, "{params:?}: the case selects {} of 30", want.len());
        assert_eq!(all_pages(backend, params, 4).await, want, "{params:?}");
    }
    let page = backend.requests(&RequestFilter::default()).await.unwrap();
    let newest = &page.requests[0];
    assert_eq!(*newest, RequestItem::from(record(29)), "every field comes back");
    assert_eq!((newest.retries, newest.attempts), (2, 3));
    let json = |item: &RequestItem| serde_json::to_value(item).unwrap();
    assert_eq!(json(newest)["guardrails"]["hits"][0]["count"], 29, "guardrails are written when set");
    assert!(json(&page.requests[1]).get("guardrails").is_none(), "and only then");
}

/// Paging through more than two pages collects every record once, in order, while records
/// arrive between the pages: newer ones belong to pages already read, one that started long
/// ago (reported late) shows up in its place, one tying the cursor's millisecond but arriving
/// later sorts before it. The store must be empty.
pub(crate) async fn paging_case(backend: &UsageBackend) {
    add(backend, 0..13).await;
    add(backend, 13..23).await;
    let mut stored: Vec<u64> = (0..23).collect();
    let (mut seen, mut cursor, mut pages) = (Vec::new(), None, 0);
    loop {
        let p = Params { limit: Some(5), cursor: cursor.take(), ..Params::default() };
        let page = backend.requests(&RequestFilter::parse(p).unwrap()).await.unwrap();
        pages += 1;
        seen.extend(page.requests.iter().map(|r| r.prompt_tokens));
        let Some(next) = page.next_cursor else { break };
        let at = Cursor::decode(&next).unwrap();
        let arriving: Vec<u64> = match pages {
            // Newer than everything: started after the cursor.
            1 => vec![100, 101],
            // Started long ago (1 000 ms + 10): reported late, ahead of the cursor.
            2 => vec![2],
            // Same start millisecond as the last item read, later arrival: before the cursor.
            3 => vec![(at.started_ms - 1_000) / 10 * 2],
            _ => vec![],
        };
        let batch: String =
            arriving.iter().map(|&i| Record { prompt_tokens: 1_000 + i, ..record(i) }.to_json_line()).collect();
        if !batch.is_empty() {
            backend.add(Bytes::from(batch)).await.unwrap();
        }
        stored.extend(arriving.iter().map(|i| 1_000 + i));
        cursor = Some(next);
        assert!(pages < 20, "the cursor does not advance");
    }
    assert_eq!(pages, 5, "23 records and the late one, 5 a page");
    let unique: HashSet<&u64> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "no record twice: {seen:?}");
    let mut want = newest_first(&(0..23).collect::<Vec<_>>(), |_| true);
    // The late one, in its place: it started at 1 010 ms as records 2 and 3 did, and arrived
    // after them, so it comes first of the three.
    let late = want.iter().position(|&i| i == 3).unwrap();
    want.insert(late, 1_002);
    assert_eq!(seen, want, "every record present at the start once, in order, and the late one");
    assert_eq!(stored.len(), 27);
}

/// `GET /api/v1/requests/{id}`: every record of the id, newest first. The store must be empty.
pub(crate) async fn by_id_case(backend: &UsageBackend) {
    add(backend, 0..20).await;
    let page = backend.requests(&RequestFilter::by_id("req-3".into())).await.unwrap();
    let ids: Vec<u64> = page.requests.iter().map(|r| r.prompt_tokens).collect();
    assert_eq!(ids, [17, 10, 3]);
    assert!(page.next_cursor.is_none());
    let none = backend.requests(&RequestFilter::by_id("req-9".into())).await.unwrap();
    assert!(none.requests.is_empty());
}

#[tokio::test]
async fn the_memory_store_filters() {
    filters_case(&UsageBackend::memory(UsageStore::new(None))).await;
}

#[tokio::test]
async fn the_memory_store_pages_without_gaps_or_repeats_while_records_arrive() {
    paging_case(&UsageBackend::memory(UsageStore::new(None))).await;
}

#[tokio::test]
async fn the_memory_store_finds_a_request_by_id() {
    by_id_case(&UsageBackend::memory(UsageStore::new(None))).await;
}

#[test]
fn cursors_round_trip_and_anything_else_is_refused() {
    for c in [Cursor { started_ms: 0, id: 0 }, Cursor { started_ms: 1_764_590_000_123, id: u64::MAX }] {
        let text = c.encode();
        assert!(text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'), "{text}");
        assert_eq!(Cursor::decode(&text), Ok(c));
    }
    let b64 = |s: &str| URL_SAFE_NO_PAD.encode(s);
    let bad = [
        "!!!".to_string(),
        "MTox=".to_string(),
        b64("12"),
        b64("a:1"),
        b64("1:"),
        b64(":1"),
        b64("1:2:3"),
        b64("+1:2"),
        b64(" 1:2"),
        b64("1:-2"),
        b64("99999999999999999999:1"),
        URL_SAFE_NO_PAD.encode([0xff, b':', b'1']),
    ];
    for text in bad {
        assert_eq!(Cursor::decode(&text), Err(ParamError::Cursor), "{text}");
    }
    assert!(Cursor { started_ms: 5, id: 1 } > Cursor { started_ms: 4, id: 9 }, "start first, then id");
}

#[test]
fn parameters_are_checked_and_limits_bounded() {
    let parse = |p: Params| RequestFilter::parse(p);
    let s = |v: &str| Some(v.to_string());
    assert_eq!(parse(Params::default()).unwrap(), RequestFilter::default());
    assert_eq!(parse(Params { limit: Some(0), ..Params::default() }).unwrap().limit, 1);
    assert_eq!(parse(Params { limit: Some(5_000), ..Params::default() }).unwrap().limit, MAX_LIMIT);
    assert_eq!(parse(Params { cursor: s(""), ..Params::default() }).unwrap().after, None, "empty: first page");
    assert_eq!(parse(Params { cursor: s("zz"), ..Params::default() }), Err(ParamError::Cursor));
    assert_eq!(parse(Params { status_class: s("5xx"), ..Params::default() }).unwrap().status_class, Some((500, 600)));
    for bad in ["6xx", "0xx", "2x", "2xxx", "x2x", "200"] {
        let err = parse(Params { status_class: s(bad), ..Params::default() }).unwrap_err();
        assert_eq!(err, ParamError::StatusClass(bad.into()));
    }
    assert!(ParamError::Cursor.to_string().starts_with("cursor: "));
}
