//! The ledger: folding records into counters, the feed and the admin view, with and without a
//! real Redis (`FERROGATE_TEST_REDIS_URL`, default `redis://127.0.0.1:6379`).

use std::sync::Arc;
use std::time::Duration;

use ferrogate_core::config::{Config, RawConfig};
use ferrogate_core::usage::Record;

use super::*;

const NOW: u64 = 1_795_996_800_000;

fn config(key: &str) -> Config {
    let yaml = format!(
        r#"
providers: [{{ name: p, kind: openai, base_url: "http://h" }}]
models: [{{ name: m, targets: [{{ provider: p, model: x }}] }}]
groups: [{{ name: team-{key}, models: ["*"], limits: {{ tokens_per_day: 1000 }} }}]
keys:
  - {{ name: {key}, digest: "sha256:1111111111111111111111111111111111111111111111111111111111111111", groups: [team-{key}], limits: {{ requests_per_day: 10 }} }}
"#
    );
    Config::try_from(serde_saphyr::from_str::<RawConfig>(&yaml).unwrap()).unwrap()
}

fn line(key: &str, tokens: u64, admitted: bool, at: u64) -> String {
    let r = Record {
        request_id: "r".into(),
        key: Some(key.into()),
        model_requested: "m".into(),
        status: 200,
        prompt_tokens: tokens,
        started_at_unix_ms: at,
        admitted,
        ..Record::default()
    };
    r.to_json_line()
}

#[test]
fn without_redis_the_ledger_counts_this_replica() {
    let c = config("alice");
    let ledger = Ledger::new("r1".into(), false);
    let batch = [line("alice", 30, true, NOW), line("alice", 500, false, NOW), line("nobody", 9, true, NOW)].concat();
    ledger.fold(batch.as_bytes(), "v1", &c);
    ledger.fold(line("alice", 20, true, NOW + 1_000).as_bytes(), "v1", &c);
    let all = ledger.consumption(&c, &Filter::default(), NOW + 2_000);
    let got: Vec<(&str, &str, u64, u64)> = all.iter().map(|c| (c.scope, c.metric, c.used, c.remaining)).collect();
    assert_eq!(got, [("key", "requests", 2, 8), ("group", "tokens", 50, 950)], "refused and unknown keys add nothing");
    let team = Filter { group: Some("team-alice".into()), ..Filter::default() };
    assert_eq!(ledger.consumption(&c, &team, NOW + 2_000).len(), 1);
    assert!(ledger.synced());
}

#[test]
fn mcp_and_a2a_calls_count_on_their_own_limits() {
    let yaml = r#"
providers: [{ name: p, kind: openai, base_url: "http://h" }]
models: [{ name: m, targets: [{ provider: p, model: x }] }]
mcp_servers: [{ name: tools, url: "http://t/mcp", limits: { tool_calls_per_minute: 10 } }]
a2a_agents: [{ name: echo, url: "http://e/" }]
keys:
  - { name: alice, digest: "sha256:1111111111111111111111111111111111111111111111111111111111111111", mcp: ["*"], a2a: ["*"], limits: { requests_per_day: 10, tool_calls_per_day: 5, mcp_requests_per_day: 7 } }
"#;
    let c = Config::try_from(serde_saphyr::from_str::<RawConfig>(yaml).unwrap()).unwrap();
    let call = |provider: &str, method: &str| {
        let r = Record {
            provider: provider.into(),
            model_requested: method.into(),
            ..serde_json::from_str(&line("alice", 0, true, NOW)).unwrap()
        };
        r.to_json_line()
    };
    let ledger = Ledger::new("r1".into(), false);
    let batch = [
        call("mcp:tools", "echo"),
        call("a2a:echo", "SendMessage"),
        call("a2a:echo", "GetTask"),
        line("alice", 3, true, NOW),
    ];
    ledger.fold(batch.concat().as_bytes(), "v1", &c);
    let all = ledger.consumption(&c, &Filter::default(), NOW + 1_000);
    let got: Vec<(&str, &str, &str, u64)> = all.iter().map(|c| (c.scope, c.name.as_str(), c.metric, c.used)).collect();
    assert_eq!(
        got,
        [("key", "alice", "requests", 1), ("key", "alice", "tool_calls", 2), ("mcp_server", "tools", "tool_calls", 1)],
        "the model request alone on requests; mcp_requests not listed"
    );
}

#[test]
fn the_view_sums_other_replicas_for_the_feed_and_all_for_totals() {
    let day = Window::Day.bucket(NOW);
    let c = "ferrogate.limit.key.a.requests.day";
    let hashes =
        vec![format!("fg:limit:{c}:{day}"), format!("fg:limit:{c}:{}", day - 1), format!("fg:limit:{c}:{}", day - 5)];
    let fields = vec![
        HashMap::from([("me".to_string(), 3), ("other".to_string(), 4)]),
        HashMap::from([("other".to_string(), 2)]),
        HashMap::from([("other".to_string(), 100)]),
    ];
    let view = redis::build_view("me", &hashes, &fields, NOW, false);
    let feed = Feed::parse(&view.feed).unwrap();
    assert_eq!(feed.counters, [(c.to_string(), day, 4, 2)], "own amounts and stale buckets left out");
    assert_eq!(view.totals[c], Tally { bucket: day, current: 7, previous: 2 });
}

/// The wall clock in milliseconds, at least 15 s clear of a UTC day boundary: the tests that
/// run the Redis loop (which reads the real clock) count per-day buckets and would see an
/// amount move to the previous bucket if midnight fell between the fold and the check.
async fn clock_clear_of_midnight() -> u64 {
    const DAY: u64 = 86_400_000;
    const MARGIN: u64 = 15_000;
    let now = || {
        u64::try_from(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()).unwrap()
    };
    let to_midnight = DAY - now() % DAY;
    if to_midnight < MARGIN {
        tokio::time::sleep(Duration::from_millis(to_midnight + 1_000)).await;
    }
    now()
}

fn redis_url() -> String {
    std::env::var("FERROGATE_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// Two replicas sharing Redis: each one's feed carries what the other folded, never its own.
#[tokio::test]
async fn replicas_see_each_others_consumption_through_redis() {
    let key = format!("k{:016x}", rand::random::<u64>());
    let c = config(&key);
    let (_stop, rx) = tokio::sync::watch::channel(false);
    let a = Arc::new(Ledger::new(format!("{key}-a"), true));
    let b = Arc::new(Ledger::new(format!("{key}-b"), true));
    tokio::spawn(redis::run(a.clone(), redis_url(), rx.clone()));
    tokio::spawn(redis::run(b.clone(), redis_url(), rx));
    let now = clock_clear_of_midnight().await;
    a.fold([line(&key, 30, true, now), line(&key, 5, true, now)].concat().as_bytes(), "v1", &c);
    b.fold(line(&key, 7, true, now).as_bytes(), "v1", &c);
    let counter = format!("ferrogate.limit.key.{key}.requests.day");
    let fed = |l: &Ledger| {
        let feed = Feed::parse(&l.feed()).unwrap();
        feed.counters.iter().find(|e| e.0 == counter).map(|e| e.2)
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while (fed(&a), fed(&b)) != (Some(1), Some(2)) {
        assert!(std::time::Instant::now() < deadline, "feeds: a {:?}, b {:?}", fed(&a), fed(&b));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(a.synced() && b.synced());
    let seen = a.consumption(&c, &Filter::default(), now);
    assert_eq!(seen.iter().map(|s| s.used).collect::<Vec<_>>(), [3, 42], "totals count every replica");
}

/// Redis unreachable: the feed says so, increments wait, nothing is lost once it answers.
#[tokio::test]
async fn increments_wait_while_redis_is_unreachable() {
    let key = format!("k{:016x}", rand::random::<u64>());
    let c = config(&key);
    let (_stop, rx) = tokio::sync::watch::channel(false);
    let down = Arc::new(Ledger::new(format!("{key}-a"), true));
    // Nothing listens on port 1.
    tokio::spawn(redis::run(down.clone(), "redis://127.0.0.1:1".into(), rx));
    // Amounts are kept while their bucket can still count: fold them at the real time.
    let now = clock_clear_of_midnight().await;
    down.fold(line(&key, 1, true, now).as_bytes(), "v1", &c);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while down.synced() {
        assert!(std::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!Feed::parse(&down.feed()).unwrap().synced);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let own = down.own.lock().unwrap();
    assert_eq!((own.amounts.len(), own.dirty.len()), (2, 2), "both counters' amounts kept for Redis");
}

/// A Redis that lost this replica's amounts (restarted empty) gets them all again.
#[tokio::test]
async fn amounts_lost_by_redis_are_written_again() {
    let key = format!("k{:016x}", rand::random::<u64>());
    let c = config(&key);
    let (_stop, rx) = tokio::sync::watch::channel(false);
    let ledger = Arc::new(Ledger::new(format!("{key}-a"), true));
    tokio::spawn(redis::run(ledger.clone(), redis_url(), rx));
    let now = clock_clear_of_midnight().await;
    ledger.fold([line(&key, 3, true, now), line(&key, 4, true, now)].concat().as_bytes(), "v1", &c);
    let hash = format!("fg:limit:ferrogate.limit.key.{key}.requests.day:{}", Window::Day.bucket(now));
    let url = redis_url();
    let client = ::redis::Client::open(url.as_str())
        .unwrap_or_else(|e| panic!("cannot reach Redis at {url} (FERROGATE_TEST_REDIS_URL): {e}"));
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("cannot reach Redis at {url} (FERROGATE_TEST_REDIS_URL): {e}"));
    let stored = |conn: &mut ::redis::aio::MultiplexedConnection| {
        let mut conn = conn.clone();
        let (hash, field) = (hash.clone(), format!("{key}-a"));
        async move { ::redis::cmd("HGET").arg(hash).arg(field).query_async::<Option<u64>>(&mut conn).await.unwrap() }
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while stored(&mut conn).await != Some(2) {
        assert!(std::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // What a restart without persistence does to this replica's keys.
    ::redis::cmd("DEL")
        .arg(&hash)
        .arg(format!("fg:limits:replica:{key}-a"))
        .query_async::<()>(&mut conn)
        .await
        .unwrap();
    while stored(&mut conn).await != Some(2) {
        assert!(std::time::Instant::now() < deadline, "not rewritten");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// An answer from the response cache (`cached`, no provider, no cost) folds like any admitted
/// request: one request and its tokens, no cost, and no MCP/A2A counter is touched.
#[test]
fn a_cached_answer_without_provider_or_cost_folds_as_a_request() {
    let c = config("dave");
    let ledger = Ledger::new("r1".into(), false);
    let hit = Record {
        provider: String::new(),
        upstream_model: String::new(),
        cost_micro_usd: None,
        cached: true,
        ..serde_json::from_str(&line("dave", 40, true, NOW)).unwrap()
    };
    ledger.fold(hit.to_json_line().as_bytes(), "v1", &c);
    let all = ledger.consumption(&c, &Filter::default(), NOW + 1_000);
    let got: Vec<(&str, &str, u64)> = all.iter().map(|c| (c.scope, c.metric, c.used)).collect();
    assert_eq!(got, [("key", "requests", 1), ("group", "tokens", 40)]);
}
