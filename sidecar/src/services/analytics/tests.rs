//! The analytics queries on the machine's real PostgreSQL (a schema of its own per test), with
//! known records: exact buckets, percentiles, rankings, the `other` series, event kinds,
//! forecast arithmetic, a key-manager's narrowing (the routes' answers: `route_tests`).

use ferrogate_core::usage::{GuardrailRecord, Record};

use super::params::*;
use super::*;
use crate::services::identity::{Principal, Role};
use crate::services::pg::tests::Schema;
use crate::services::pg::usage::UsageRow;
use crate::services::pg::PgStore;

/// 2023-11-14T22:00:00Z, on an hour.
pub(super) const T0: u64 = 1_699_999_200_000;

/// A record of `model` by `key` in `groups` at `at`.
pub(super) fn rec(model: &str, key: &str, groups: &[&str], at: u64) -> Record {
    Record {
        request_id: format!("{model}-{key}-{at}"),
        key: Some(key.into()),
        groups: groups.iter().map(|g| g.to_string()).collect(),
        model_requested: model.into(),
        provider: "p".into(),
        upstream_model: "u".into(),
        status: 200,
        prompt_tokens: 1,
        completion_tokens: 2,
        cost_micro_usd: Some(100),
        latency_ms: 10,
        started_at_unix_ms: at,
        ..Record::default()
    }
}

pub(super) async fn store(schema: &Schema, records: &[Record]) -> PgStore {
    let store = PgStore::connect(&schema.url, None).await.unwrap();
    let rows: Vec<UsageRow> =
        records.iter().map(|r| UsageRow::parse(r.to_json_line().trim().as_bytes()).unwrap()).collect();
    store.insert_usage(&rows).await.unwrap();
    store
}

pub(super) fn owner() -> Principal {
    Principal::bootstrap()
}

pub(super) fn manager_of(groups: &[&str]) -> Principal {
    Principal { role: Role::KeyManager, key_groups: groups.iter().map(|g| g.to_string()).collect(), ..owner() }
}

/// Model `a`: 4 requests in the first hour (one 5xx, two with TTFT); model `b`: a limit
/// refusal and a budget refusal in the second hour, unpriced.
pub(super) fn two_models() -> Vec<Record> {
    let mut out = Vec::new();
    for (i, latency) in [10, 20, 30, 40].into_iter().enumerate() {
        let mut r = rec("a", "k1", &["team-a"], T0 + 1000 * i as u64);
        r.latency_ms = latency;
        r.ttft_ms = [Some(5), Some(15), None, None][i];
        r.status = if i == 2 { 500 } else { 200 };
        out.push(r);
    }
    for (i, status) in [429u16, 402].into_iter().enumerate() {
        let mut r = rec("b", "k2", &["team-b"], T0 + HOUR_MS + i as u64);
        (r.status, r.provider, r.cost_micro_usd, r.latency_ms) = (status, String::new(), None, 100 * (i as u64 + 1));
        out.push(r);
    }
    out
}

fn close(a: Option<f64>, b: f64) {
    assert!(a.is_some_and(|a| (a - b).abs() < 1e-9), "{a:?} != {b}");
}

#[tokio::test]
async fn buckets_count_and_percentiles_are_exact() {
    let schema = Schema::new().await;
    let pool = store(&schema, &two_models()).await.pool().clone();
    let params =
        UsageParams { from: Some(T0), to: Some(T0 + 2 * HOUR_MS), by: Some(AnalyticsBy::Model), ..Default::default() };
    let q = params.check(0).unwrap();
    assert_eq!(q.bucket, AnalyticsBucket::Minute, "2 hours: minutes");
    let q = UsageQuery { bucket: AnalyticsBucket::Hour, ..q };
    let answer = series::run(&pool, &owner(), &q).await.unwrap();
    let names: Vec<_> = answer.series.iter().map(|s| (s.name.as_str(), s.requests, s.points.len())).collect();
    assert_eq!(names, [("a", 4, 1), ("b", 2, 1)]);
    let a = &answer.series[0].points[0];
    assert_eq!((a.start, a.requests, a.errors, a.prompt_tokens, a.completion_tokens), (T0, 4, 1, 4, 8));
    assert_eq!((a.cost_micro_usd, a.unpriced), (400, 0));
    close(a.latency_ms.p50, 25.0);
    close(a.latency_ms.p95, 38.5);
    close(a.latency_ms.p99, 39.7);
    close(a.ttft_ms.p50, 10.0);
    close(a.ttft_ms.p95, 14.5);
    let b = &answer.series[1].points[0];
    assert_eq!((b.start, b.errors, b.cost_micro_usd, b.unpriced), (T0 + HOUR_MS, 2, 0, 2));
    assert_eq!((b.ttft_ms.p50, b.latency_ms.p50), (None, Some(150.0)));
    let all = series::run(&pool, &owner(), &UsageQuery { by: None, ..q }).await.unwrap();
    assert_eq!(all.series.len(), 1);
    assert_eq!((all.series[0].name.as_str(), all.series[0].requests, all.series[0].points.len()), ("all", 6, 2));
}

#[tokio::test]
async fn beyond_twenty_series_the_rest_is_other() {
    let schema = Schema::new().await;
    // Model m00 has 22 requests, m01 21, … m21 one.
    let records: Vec<Record> = (0..22u64)
        .flat_map(|m| (0..22 - m).map(move |i| rec(&format!("m{m:02}"), "k", &[], T0 + i * 10 + m)))
        .collect();
    let pool = store(&schema, &records).await.pool().clone();
    let range = Range { from: T0, to: T0 + DAY_MS };
    let q = UsageQuery { range, bucket: AnalyticsBucket::Day, by: Some(AnalyticsBy::Model) };
    let answer = series::run(&pool, &owner(), &q).await.unwrap();
    assert_eq!(answer.series.len(), 21);
    assert_eq!((answer.series[0].name.as_str(), answer.series[0].requests), ("m00", 22));
    assert_eq!((answer.series[19].name.as_str(), answer.series[19].requests), ("m19", 3));
    let other = &answer.series[20];
    assert_eq!((other.name.as_str(), other.other, other.requests), ("other", true, 3));
    // The day of T0 and the next one (T0 is 22:00).
    assert_eq!(other.points.iter().map(|p| p.requests).sum::<u64>(), 3);
    assert_eq!(other.points[0].start % DAY_MS, 0);
}

#[tokio::test]
async fn top_ranks_by_each_metric() {
    let schema = Schema::new().await;
    let mut records = two_models();
    let mut c = rec("c", "k3", &["team-a", "team-b"], T0 + 5);
    (c.cost_micro_usd, c.prompt_tokens) = (Some(10_000), 1000);
    records.push(c);
    let pool = store(&schema, &records).await.pool().clone();
    let q = |by, metric, limit| TopQuery { range: Range { from: T0, to: T0 + DAY_MS }, by, metric, limit };
    let names = |a: &top::TopAnswer| a.items.iter().map(|i| i.name.clone()).collect::<Vec<_>>();
    let by_requests = top::run(&pool, &owner(), &q(AnalyticsBy::Model, AnalyticsMetric::Requests, 10)).await.unwrap();
    assert_eq!(names(&by_requests), ["a", "b", "c"]);
    let a = &by_requests.items[0];
    assert_eq!((a.requests, a.errors, a.tokens, a.cost_micro_usd), (4, 1, 12, 400));
    let by_cost = top::run(&pool, &owner(), &q(AnalyticsBy::Model, AnalyticsMetric::Cost, 2)).await.unwrap();
    assert_eq!(names(&by_cost), ["c", "a"]);
    assert!((by_cost.items[0].cost_usd - 0.01).abs() < 1e-12);
    let by_errors = top::run(&pool, &owner(), &q(AnalyticsBy::Provider, AnalyticsMetric::Errors, 10)).await.unwrap();
    assert_eq!(names(&by_errors), ["", "p"]);
    let by_tokens = top::run(&pool, &owner(), &q(AnalyticsBy::Group, AnalyticsMetric::Tokens, 10)).await.unwrap();
    assert_eq!(names(&by_tokens), ["team-a", "team-b"]);
    assert_eq!(by_tokens.items[1].tokens, 1002 + 6);
}

/// `by=client`: the User-Agent's first word less its version, one client for every version of
/// an SDK, `""` without a User-Agent; the same names in the usage series.
#[tokio::test]
async fn clients_are_the_user_agents_first_word_without_its_version() {
    let schema = Schema::new().await;
    let agents = [
        Some("OpenAI/Python 1.52.0"),
        Some("OpenAI/Python 1.40.1"),
        Some("OpenAI/Python 1.52.0"),
        Some("Anthropic/Python 0.40.0"),
        Some("Anthropic/Python 0.39.0"),
        Some("curl/8.5.0"),
        Some("curl/7.88.1"),
        Some("google-genai-sdk/1.2.0 gl-python/3.11.9"),
        Some("Mozilla/5.0 (X11; Linux x86_64)"),
        Some("ai-sdk/openai/1.2.3"),
        Some("app/v2.1"),
        Some("tool/beta"),
        Some("my-app"),
        Some(" starts-with-a-space/1"),
        None,
        None,
    ];
    let records: Vec<Record> = (0u64..)
        .zip(agents)
        .map(|(i, ua)| Record { user_agent: ua.map(String::from), ..rec("m", "k", &[], T0 + i) })
        .collect();
    let pool = store(&schema, &records).await.pool().clone();
    let range = Range { from: T0, to: T0 + DAY_MS };
    let q = TopQuery { range, by: AnalyticsBy::Client, metric: AnalyticsMetric::Requests, limit: 100 };
    let top = top::run(&pool, &owner(), &q).await.unwrap();
    let ranked: Vec<_> = top.items.iter().map(|i| (i.name.as_str(), i.requests)).collect();
    assert_eq!(
        ranked,
        [
            ("", 3),
            ("OpenAI/Python", 3),
            ("Anthropic/Python", 2),
            ("curl", 2),
            ("Mozilla", 1),
            ("ai-sdk/openai", 1),
            ("app", 1),
            ("google-genai-sdk", 1),
            ("my-app", 1),
            ("tool/beta", 1),
        ]
    );
    let uq = UsageQuery { range, bucket: AnalyticsBucket::Day, by: Some(AnalyticsBy::Client) };
    let usage = series::run(&pool, &owner(), &uq).await.unwrap();
    let series: Vec<_> = usage.series.iter().map(|s| (s.name.as_str(), s.requests)).collect();
    assert_eq!(series, ranked, "the usage series name and count the clients alike");
}

#[tokio::test]
async fn a_narrowed_key_manager_sees_its_groups_keys_only() {
    let schema = Schema::new().await;
    let mut records = two_models();
    records.push(rec("c", "k3", &["team-a", "team-b"], T0 + 5));
    records.push(rec("c", "k4", &[], T0 + 6));
    let pool = store(&schema, &records).await.pool().clone();
    let range = Range { from: T0, to: T0 + DAY_MS };
    let q = |by| TopQuery { range, by, metric: AnalyticsMetric::Requests, limit: 10 };
    let keys = top::run(&pool, &manager_of(&["team-a"]), &q(AnalyticsBy::Key)).await.unwrap();
    assert_eq!(keys.items.iter().map(|i| (i.name.as_str(), i.requests)).collect::<Vec<_>>(), [("k1", 4)]);
    let groups = top::run(&pool, &manager_of(&["team-a", "team-b"]), &q(AnalyticsBy::Group)).await.unwrap();
    assert_eq!(
        groups.items.iter().map(|i| (i.name.as_str(), i.requests)).collect::<Vec<_>>(),
        [("team-a", 5), ("team-b", 3)]
    );
    let everyone = top::run(&pool, &manager_of(&[]), &q(AnalyticsBy::Key)).await.unwrap();
    assert_eq!(everyone.items.len(), 4, "a key-manager without groups manages every group");
    let uq = UsageQuery { range, bucket: AnalyticsBucket::Day, by: None };
    let usage = series::run(&pool, &manager_of(&["team-b"]), &uq).await.unwrap();
    assert_eq!(usage.series[0].requests, 2);
    let eq = EventsQuery { range, limit: 10, after: None };
    let events = events::run(&pool, &manager_of(&["team-a"]), &eq).await.unwrap();
    assert_eq!(events.events.iter().map(|e| e.status).collect::<Vec<_>>(), [500]);
}

#[tokio::test]
async fn events_have_kinds_newest_first_and_pages() {
    use events::EventKind::*;
    let schema = Schema::new().await;
    let mut records = two_models();
    let mut cut = rec("a", "k1", &["team-a"], T0 + 2 * HOUR_MS);
    cut.cut = true;
    let mut blocked = rec("a", "k1", &["team-a"], T0 + 3 * HOUR_MS);
    (blocked.status, blocked.provider) = (400, String::new());
    blocked.guardrails = Some(GuardrailRecord { blocked: Some("pii/ssn".into()), ..GuardrailRecord::default() });
    let mut upstream_429 = rec("a", "k1", &["team-a"], T0 + 4 * HOUR_MS);
    upstream_429.status = 429;
    records.extend([cut, blocked, upstream_429]);
    let pool = store(&schema, &records).await.pool().clone();
    let range = Range { from: T0, to: T0 + DAY_MS };
    let first = events::run(&pool, &owner(), &EventsQuery { range, limit: 3, after: None }).await.unwrap();
    let kinds: Vec<_> = first.events.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [GuardrailBlock, StreamCut, BudgetReached]);
    assert_eq!(first.events[0].rule.as_deref(), Some("pii/ssn"));
    assert_eq!((first.events[2].status, first.events[2].model.as_str()), (402, "b"));
    let after = Some(usage::requests::Cursor::decode(first.next_cursor.as_deref().unwrap()).unwrap());
    let rest = events::run(&pool, &owner(), &EventsQuery { range, limit: 3, after }).await.unwrap();
    let kinds: Vec<_> = rest.events.iter().map(|e| (e.kind, e.status)).collect();
    assert_eq!(kinds, [(LimitRefused, 429), (UpstreamFailure, 500)], "an upstream 429 is no event");
    assert_eq!(rest.next_cursor, None);
    assert_eq!(rest.events[1].request_id, format!("a-k1-{}", T0 + 2000));
}

use crate::services::usage;

#[test]
fn months_are_utc_calendar_months() {
    use forecast::month_of;
    assert_eq!(month_of(1_700_006_400_000), (1_698_796_800_000, 1_701_388_800_000), "2023-11");
    assert_eq!(month_of(1_703_980_800_000), (1_701_388_800_000, 1_704_067_200_000), "2023-12 to 2024-01");
    // 2024-02 has 29 days.
    let (start, end) = month_of(1_706_745_600_000 + DAY_MS);
    assert_eq!((start, (end - start) / DAY_MS), (1_706_745_600_000, 29));
    assert_eq!(month_of(0), (0, 31 * DAY_MS));
}

#[tokio::test]
async fn the_forecast_is_month_to_date_plus_seven_days_rate() {
    let schema = Schema::new().await;
    // at: 2023-11-15T00:00Z; 16 days left.
    let (nov, at) = (1_698_796_800_000, 1_700_006_400_000);
    let priced = |model: &str, group: &str, day: u64, cost: u64| {
        let mut r = rec(model, "k", &[group], nov + day * DAY_MS + HOUR_MS);
        r.cost_micro_usd = Some(cost);
        r
    };
    let records = [
        priced("a", "g1", 1, 3_000_000),
        priced("a", "g1", 9, 700_000),
        priced("b", "g2", 13, 1_400_000),
        priced("b", "g2", 14, 9_999),
        priced("a", "g1", 0, 5).clone(),
    ];
    let mut records = records.to_vec();
    records[4].started_at_unix_ms = nov - 10 * DAY_MS;
    let pool = store(&schema, &records).await.pool().clone();
    let answer = forecast::run(&pool, &owner(), at).await.unwrap();
    assert_eq!((answer.month_start, answer.month_end, answer.days_left), (nov, 1_701_388_800_000, 16.0));
    let o = &answer.overall;
    assert_eq!(
        (o.month_to_date_micro_usd, o.last_7_days_micro_usd, o.forecast_micro_usd),
        (5_100_000, 2_100_000, 9_900_000)
    );
    assert_eq!(o.daily_rate_micro_usd, 300_000.0);
    let models: Vec<_> =
        answer.by_model.iter().map(|f| (f.name.as_str(), f.month_to_date_micro_usd, f.forecast_micro_usd)).collect();
    assert_eq!(models, [("a", 3_700_000, 5_300_000), ("b", 1_400_000, 4_600_000)]);
    let groups: Vec<_> = answer.by_group.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(groups, ["g1", "g2"]);
    assert!(answer.method.starts_with("linear"));
    let empty = forecast::run(&pool, &manager_of(&["nobody"]), at).await.unwrap();
    assert_eq!((empty.overall.forecast_micro_usd, empty.by_model.len()), (0, 0));
}

#[test]
fn parameters_are_checked() {
    let now = T0;
    let bad = |r: Result<UsageQuery, Failure>| matches!(r, Err(Failure::Bad(_)));
    assert!(bad(UsageParams { from: Some(5), to: Some(5), ..Default::default() }.check(now)));
    let minutes =
        UsageParams { from: Some(0), to: Some(2001 * MINUTE_MS), bucket: Some(AnalyticsBucket::Minute), by: None };
    assert!(bad(minutes.clone().check(now)));
    assert!(UsageParams { to: Some(2000 * MINUTE_MS), ..minutes }.check(now).is_ok());
    let q = UsageParams::default().check(now).unwrap();
    assert_eq!((q.range, q.bucket), (Range { from: now - DAY_MS, to: now }, AnalyticsBucket::Hour));
    assert_eq!(
        UsageParams { from: Some(now - 40 * DAY_MS), ..Default::default() }.check(now).unwrap().bucket,
        AnalyticsBucket::Day
    );
    assert!(TopParams { limit: Some(0), ..Default::default() }.check(now).is_err());
    assert!(TopParams { limit: Some(101), ..Default::default() }.check(now).is_err());
    assert!(EventsParams { cursor: Some("nope".into()), ..Default::default() }.check(now).is_err());
    assert!(ForecastParams { at: Some(MAX_MS) }.check(now).is_err());
}
