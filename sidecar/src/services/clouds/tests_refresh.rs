//! The refresher with a real [`Snapshots`]: credentials served as they are minted, minted again
//! before they end, kept through failures while valid, and minted at once for a new source.

use std::time::Duration;

use ferrogate_core::config::RawProvider;
use ferrogate_core::snapshot::Snapshot;
use tokio::sync::watch;

use super::tests::{fetcher, raw};
use super::tests_http::StandIn;
use super::*;
use crate::services::snapshot::Snapshots;

/// A Vertex provider whose tokens come from the metadata server at `url`.
fn vertex(url: &str, scopes: &str) -> RawConfig {
    raw(&format!(
        r#"
providers:
  - {{ name: gemini, kind: vertex, project: my-project-1, region: us-central1, credentials: {{ source: gcp_metadata, token_url: "{url}", scopes: [{scopes}] }} }}
models:
  - {{ name: chat, targets: [{{ provider: gemini, model: gemini-2.0-flash }}] }}
"#
    ))
}

/// The first provider as served to the filters.
fn served(snapshots: &Snapshots) -> RawProvider {
    let current = snapshots.current().expect("a snapshot");
    let (doc, _) = Snapshot::parse(&current.body).unwrap();
    doc.config.providers[0].clone()
}

fn served_token(snapshots: &Snapshots) -> Option<String> {
    served(snapshots).api_key
}

/// Waits (at most `secs`) until `check` holds.
async fn until(secs: u64, what: &str, check: impl Fn() -> bool) {
    for _ in 0..secs * 100 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never: {what}");
}

fn token(name: &str, expires_in: u64) -> String {
    format!(r#"{{"access_token":"{name}","expires_in":{expires_in},"token_type":"Bearer"}}"#)
}

#[tokio::test]
async fn a_token_shorter_than_the_margin_is_fetched_again_and_republished() {
    let (first, second) = (token("ya29.first", 2), token("ya29.second", 3600));
    let metadata = StandIn::start(&[(200, &first), (200, &second)]).await;
    let snapshots = Arc::new(Snapshots::new(None));
    snapshots.publish(vertex(&metadata.url, "")).unwrap();
    assert_eq!(served_token(&snapshots), None, "nothing minted yet");
    let (stop, stopped) = watch::channel(false);
    refresh::start_with(snapshots.clone(), fetcher(&[]), stopped);
    until(3, "the first token served", || served_token(&snapshots).is_some()).await;
    until(5, "the second token served", || served_token(&snapshots).as_deref() == Some("ya29.second")).await;
    assert_eq!(metadata.seen().len(), 2, "two fetches, then none before the margin");
    let state = snapshots.clouds().get("gemini").unwrap();
    assert!(state.expires_at.unwrap() >= unix_now() + 3590);
    stop.send(true).unwrap();
}

#[tokio::test]
async fn a_failed_refresh_keeps_the_last_good_token_until_it_ends() {
    let good = token("ya29.good", 6);
    let metadata = StandIn::start(&[(200, &good), (503, r#"{"error":"unavailable"}"#)]).await;
    let snapshots = Arc::new(Snapshots::new(None));
    snapshots.publish(vertex(&metadata.url, "")).unwrap();
    let (_stop, stopped) = watch::channel(false);
    refresh::start_with(snapshots.clone(), fetcher(&[]), stopped);
    until(3, "the token served", || served_token(&snapshots).is_some()).await;
    // Refreshed halfway through its 6 s: the attempt fails, the token still serves.
    until(5, "a refresh attempted", || metadata.seen().len() >= 2).await;
    assert_eq!(served_token(&snapshots).as_deref(), Some("ya29.good"));
    // Retried with backoff; once it has ended it is no longer served.
    until(5, "the ended token dropped", || served_token(&snapshots).is_none()).await;
    let attempts = metadata.seen().len();
    assert!((3..=6).contains(&attempts), "{attempts} attempts: 1 s, 2 s... backoff");
}

#[tokio::test]
async fn a_new_or_changed_source_is_minted_at_once() {
    let metadata = StandIn::start(&[(200, &token("ya29.a", 3600)), (200, &token("ya29.b", 3600))]).await;
    let snapshots = Arc::new(Snapshots::new(None));
    let (_stop, stopped) = watch::channel(false);
    refresh::start_with(snapshots.clone(), fetcher(&[]), stopped);
    tokio::time::sleep(Duration::from_millis(20)).await;
    snapshots.publish(vertex(&metadata.url, "")).unwrap();
    until(3, "the new source's token", || served_token(&snapshots).as_deref() == Some("ya29.a")).await;
    // Another scope: the token of the old source is not served, a new one is minted.
    snapshots.publish(vertex(&metadata.url, "\"https://x/a\"")).unwrap();
    assert_ne!(served_token(&snapshots).as_deref(), Some("ya29.a"));
    until(3, "the changed source's token", || served_token(&snapshots).as_deref() == Some("ya29.b")).await;
    assert_eq!(metadata.last().query.as_deref(), Some("scopes=https%3A%2F%2Fx%2Fa"));
}

#[tokio::test]
async fn environment_keys_are_served_as_aws_keys() {
    let config = raw(r#"
providers:
  - { name: claude, kind: bedrock, region: us-east-1, credentials: { source: aws_env } }
models:
  - { name: chat, targets: [{ provider: claude, model: anthropic.claude-3-5-sonnet-20240620-v1:0 }] }
"#);
    let snapshots = Arc::new(Snapshots::new(None));
    snapshots.publish(config).unwrap();
    let (_stop, stopped) = watch::channel(false);
    let env = fetcher(&[("AWS_ACCESS_KEY_ID", "AKIAENV"), ("AWS_SECRET_ACCESS_KEY", "env-secret")]);
    refresh::start_with(snapshots.clone(), env, stopped);
    until(3, "the keys served", || served(&snapshots).aws_keys.is_some()).await;
    let keys = served(&snapshots).aws_keys.unwrap();
    assert_eq!((keys.access_key_id.as_str(), keys.secret_access_key.as_str()), ("AKIAENV", "env-secret"));
    assert_eq!((keys.session_token, keys.expires_at), (None, None));
}
