use std::sync::Mutex;

use super::*;

const CONFIG: &str = "providers:\n  - { name: pool, kind: openai_compatible, base_url: 'http://pool.llm.svc:8000', endpoints_dns: 'pool.llm.svc:8000' }\n\
    models:\n  - { name: chat, targets: [{ provider: pool, model: m }] }\n";

fn raw() -> RawConfig {
    serde_saphyr::from_str(CONFIG).unwrap()
}

/// A resolver answering what `answer` holds at the time of the call.
fn fake(answer: Arc<Mutex<std::io::Result<Vec<SocketAddr>>>>) -> Resolver {
    Arc::new(move |_name| {
        let now = match &*answer.lock().unwrap() {
            Ok(addrs) => Ok(addrs.clone()),
            Err(e) => Err(std::io::Error::new(e.kind(), e.to_string())),
        };
        Box::pin(async move { now })
    })
}

fn addrs(list: &[&str]) -> std::io::Result<Vec<SocketAddr>> {
    Ok(list.iter().map(|a| a.parse().unwrap()).collect())
}

fn served_endpoints(snapshots: &Snapshots) -> Vec<String> {
    snapshots.current().unwrap().config.providers[0].endpoints.clone()
}

/// Waits (at most 5 s) until the served endpoints are `want`.
async fn until(snapshots: &Snapshots, want: &[&str]) {
    for _ in 0..500 {
        if served_endpoints(snapshots) == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("served {:?}, want {want:?}", served_endpoints(snapshots));
}

#[test]
fn expand_puts_the_answer_in_place_of_the_name() {
    let mut answers = Answers::new();
    let none = expand(raw(), &answers);
    assert!(none.providers[0].endpoints.is_empty());
    assert_eq!(none.providers[0].endpoints_dns.as_deref(), Some("pool.llm.svc:8000"), "kept until it resolves");
    answers.insert("pool.llm.svc:8000".into(), vec!["10.0.0.1:8000".into(), "[fd00::2]:8000".into()]);
    let some = expand(raw(), &answers);
    let found: Vec<&str> = some.providers[0].endpoints.iter().map(|e| e.address.as_str()).collect();
    assert_eq!(found, ["10.0.0.1:8000", "[fd00::2]:8000"]);
    assert_eq!(names(&raw()), ["pool.llm.svc:8000"]);
    assert_eq!(
        endpoints_of(addrs(&["10.0.0.2:80", "10.0.0.1:80", "10.0.0.2:80"]).unwrap()),
        ["10.0.0.1:80", "10.0.0.2:80"]
    );
}

#[tokio::test]
async fn the_pool_follows_its_dns_answers() {
    let snapshots = Arc::new(Snapshots::new(None));
    snapshots.publish(raw()).unwrap();
    assert!(served_endpoints(&snapshots).is_empty(), "nothing resolved yet: base_url serves");
    let answer = Arc::new(Mutex::new(addrs(&["10.0.0.2:8000", "10.0.0.1:8000"])));
    let (stop, stopped) = watch::channel(false);
    start(snapshots.clone(), Duration::from_millis(20), fake(answer.clone()), stopped);
    until(&snapshots, &["10.0.0.1:8000", "10.0.0.2:8000"]).await;
    let first = snapshots.current().unwrap().version.clone();

    // Scaled up and one replica replaced: a new snapshot, no configuration change.
    *answer.lock().unwrap() = addrs(&["10.0.0.2:8000", "10.0.0.3:8000", "10.0.0.4:8000"]);
    until(&snapshots, &["10.0.0.2:8000", "10.0.0.3:8000", "10.0.0.4:8000"]).await;
    assert_ne!(snapshots.current().unwrap().version, first);

    // A failed lookup keeps the last answer; a successful empty one empties the pool.
    *answer.lock().unwrap() = Err(std::io::Error::other("SERVFAIL"));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(served_endpoints(&snapshots), ["10.0.0.2:8000", "10.0.0.3:8000", "10.0.0.4:8000"]);
    *answer.lock().unwrap() = addrs(&[]);
    until(&snapshots, &[]).await;

    // A store edit keeps the answers of the names it still uses.
    *answer.lock().unwrap() = addrs(&["10.0.0.9:8000"]);
    until(&snapshots, &["10.0.0.9:8000"]).await;
    snapshots.publish(raw()).unwrap();
    assert_eq!(served_endpoints(&snapshots), ["10.0.0.9:8000"]);
    stop.send(true).unwrap();
}

#[tokio::test]
async fn a_new_name_is_resolved_at_once_not_at_the_next_refresh() {
    let snapshots = Arc::new(Snapshots::new(None));
    let answer = Arc::new(Mutex::new(addrs(&["10.0.0.1:8000"])));
    let (_stop, stopped) = watch::channel(false);
    start(snapshots.clone(), Duration::from_secs(3600), fake(answer), stopped);
    tokio::time::sleep(Duration::from_millis(20)).await;
    snapshots.publish(raw()).unwrap();
    until(&snapshots, &["10.0.0.1:8000"]).await;
}

#[tokio::test]
async fn the_system_resolver_answers_localhost() {
    let found = system_resolver()("localhost:8000".into()).await.unwrap();
    assert!(found.iter().any(|a| a.ip().is_loopback() && a.port() == 8000), "{found:?}");
}

/// The resolver's first answer lands while the store's publication is still building (what a
/// loaded machine does): the answer's republication is served, and the store's older build,
/// finishing last, must not overwrite it (the resolver would never publish again: its answer
/// did not change). Deterministic: the answer is given between the build and its serving.
#[test]
fn a_publication_finishing_late_does_not_hide_a_dns_answer() {
    let snapshots = Arc::new(Snapshots::new(None));
    let weak = Arc::downgrade(&snapshots);
    *snapshots.before_serving.lock().unwrap() = Some(crate::services::snapshot::TestHook(Box::new(move || {
        let s = weak.upgrade().unwrap();
        assert!(s.set_dns_answer("pool.llm.svc:8000", vec!["10.0.0.1:8000".into()]));
        s.republish();
    })));
    snapshots.publish(raw()).unwrap();
    assert_eq!(served_endpoints(&snapshots), ["10.0.0.1:8000"]);
    // Later publications are served as before.
    snapshots.publish(raw()).unwrap();
    assert_eq!(served_endpoints(&snapshots), ["10.0.0.1:8000"]);
}
