//! The grant script against the machine's real Redis: never more than the window has room
//! for, whatever the replicas ask, with the sliding share and the bucket after counted.

use std::sync::Arc;

use ferrogate_core::config::{Config, RawConfig};
use ferrogate_core::limits::lease::{Ask, LeaseRequest};

use super::*;

fn redis_url() -> String {
    std::env::var("FERROGATE_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// A config whose key `k<tag>` has `limits`; counters are named after the tag so tests do not
/// share Redis keys.
fn config(tag: &str, limits: &str) -> Config {
    let yaml = format!(
        "providers: [{{ name: p, kind: openai, base_url: 'http://h' }}]\n\
         models: [{{ name: m, targets: [{{ provider: p, model: m }}] }}]\n\
         keys: [{{ name: k{tag}, digest: 'sha256:{}', models: ['*'], limits: {limits} }}]\n",
        "a".repeat(64)
    );
    Config::try_from(serde_saphyr::from_str::<RawConfig>(&yaml).unwrap()).unwrap()
}

fn ask(counter: &str, bucket: u64, need: u64, adjust: i64) -> LeaseRequest {
    LeaseRequest { asks: vec![Ask { counter: counter.into(), bucket, need, adjust }] }
}

fn tag() -> String {
    format!("{:x}", rand::random::<u64>())
}

#[tokio::test]
async fn concurrent_asks_of_two_replicas_never_get_more_than_the_limit() {
    let t = tag();
    let cfg = config(&t, "{ requests_per_day: 10 }");
    let leases = Arc::new(Leases::new(redis::Client::open(redis_url()).unwrap()));
    let counter = format!("ferrogate.limit.key.k{t}.requests.day");
    let bucket = Window::Day.bucket(now_ms());
    let mut tasks = Vec::new();
    for i in 0..40 {
        let (leases, cfg, counter) = (leases.clone(), cfg.clone(), counter.clone());
        let replica = if i % 2 == 0 { "a" } else { "b" };
        tasks.push(tokio::spawn(async move {
            let answer = leases.grant(replica, &ask(&counter, bucket, 1, 0), "v", &cfg).await;
            assert!(answer.synced);
            (replica, answer.grants[0].granted)
        }));
    }
    let (mut total, mut to_b) = (0, 0);
    for t in tasks {
        let (replica, granted) = t.await.unwrap();
        total += granted;
        to_b += if replica == "b" { granted } else { 0 };
    }
    assert_eq!(total, 10, "the grants add up to the limit exactly");
    let again = leases.grant("a", &ask(&counter, bucket, 1, 0), "v", &cfg).await;
    assert_eq!(again.grants[0].granted, 0);
    // A give-back makes room for another replica.
    leases.grant("a", &ask(&counter, bucket, 0, -3), "v", &cfg).await;
    let after = leases.grant("b", &ask(&counter, bucket, 5, 0), "v", &cfg).await;
    assert_eq!(after.grants[0].granted, 3);
    assert_eq!(after.grants[0].held, to_b + 3, "what b holds on the bucket, earlier grants included");
    let mut text = String::new();
    leases.prometheus(&mut text);
    assert!(text.contains("ferrogate_lease_asks_total{kind=\"wait\"} 42"), "{text}");
    assert!(text.contains("ferrogate_lease_amount_total{kind=\"granted\"} 13"), "{text}");
    assert!(text.contains("ferrogate_lease_amount_total{kind=\"returned\"} 3"), "{text}");
}

#[tokio::test]
async fn the_previous_bucket_slides_and_the_next_one_counts() {
    let t = tag();
    let cfg = config(&t, "{ requests_per_minute: 100 }");
    let leases = Leases::new(redis::Client::open(redis_url()).unwrap());
    let counter = format!("ferrogate.limit.key.k{t}.requests.minute");
    let now = now_ms();
    let bucket = Window::Minute.bucket(now);
    // The next bucket, leased ahead: its window starts with all of this one, so together
    // they hold at most the limit.
    let got = leases.grant("a", &ask(&counter, bucket, 60, 0), "v", &cfg).await;
    assert_eq!(got.grants[0].granted, 60);
    let ahead = leases.grant("a", &ask(&counter, bucket + 1, 100, 0), "v", &cfg).await;
    assert_eq!(ahead.grants[0].granted, 40, "100 - the 60 of the bucket before, counted whole");
    let more = leases.grant("b", &ask(&counter, bucket, 100, 0), "v", &cfg).await;
    assert_eq!(more.grants[0].granted, 0, "the bucket after holds 40: this one may not grow");
}

#[tokio::test]
async fn top_ups_are_sized_by_share_and_grow_when_asked_often() {
    let t = tag();
    let cfg = config(&t, "{ tokens_per_day: 8000 }");
    let leases = Leases::new(redis::Client::open(redis_url()).unwrap());
    leases.set_active(2);
    let counter = format!("ferrogate.limit.key.k{t}.tokens.day");
    let bucket = Window::Day.bucket(now_ms());
    let mut sizes = Vec::new();
    for _ in 0..4 {
        sizes.push(leases.grant("a", &ask(&counter, bucket, 0, 0), "v", &cfg).await.grants[0].granted);
    }
    assert_eq!(sizes, [500, 1000, 2000, 4000], "an eighth of the share, doubling, at most the share");
    let capped = leases.grant("a", &ask(&counter, bucket, 0, 0), "v", &cfg).await.grants[0].granted;
    assert_eq!(capped, 500, "8000 - 7500 granted: the window's room, not the chunk");
    // An unknown counter is skipped; a pure adjustment answers no grant.
    let none = leases.grant("a", &ask("nope", bucket, 1, 0), "v", &cfg).await;
    assert!(none.synced && none.grants.is_empty());
    let adj = leases.grant("a", &ask(&counter, bucket, 0, 10), "v", &cfg).await;
    assert!(adj.grants.is_empty());
}

#[tokio::test]
async fn without_redis_the_answer_says_so() {
    let cfg = config("x", "{ requests_per_day: 10 }");
    let unreachable = Leases::new(redis::Client::open("redis://127.0.0.1:1").unwrap());
    let answer = unreachable.grant("a", &ask("ferrogate.limit.key.kx.requests.day", 1, 1, 0), "v", &cfg).await;
    assert!(!answer.synced);
    assert!(!Leases::default().enabled());
}
