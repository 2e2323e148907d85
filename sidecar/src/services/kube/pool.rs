//! One `InferencePool`'s endpoints, followed: the pool (its selector and target ports) and the
//! pods that selector matches, each listed then watched ([`follow`]).

use std::collections::BTreeMap;
use std::time::Duration;

use ferrogate_core::inference_pool::PoolSpec;
use serde_json::Value;

use super::client::{Client, Event, KubeError, Watch};

/// The Inference Extension's API group and version.
const POOLS: &str = "/apis/inference.networking.k8s.io/v1/namespaces";

/// Waits between failed attempts: the first, doubled up to the last.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(500), Duration::from_secs(30));

fn name_of(object: &Value) -> String {
    object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_string()
}

/// Follows pool `name` in `namespace`, calling `sink` with its endpoints whenever they may have
/// changed; runs until aborted. A failed attempt (API unreachable, forbidden…) keeps the last
/// answer and tries again after a growing pause.
pub async fn follow(client: Client, namespace: String, name: String, sink: impl Fn(Vec<String>)) {
    let mut pause = BACKOFF.0;
    loop {
        match sync(&client, &namespace, &name, &sink).await {
            Ok(()) => pause = BACKOFF.0,
            Err(KubeError::Gone) => {
                tracing::debug!(pool = %name, "endpoints_inference_pool: resource version expired; listing again")
            }
            Err(e) => {
                tracing::warn!(pool = %name, namespace = %namespace, error = %e, "endpoints_inference_pool: keeping the last endpoints");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(BACKOFF.1);
            }
        }
    }
}

/// One list-then-watch round: returns `Ok` when the pool changed in a way that needs a new
/// list (another selector or ports, deleted, created), an error otherwise.
async fn sync(client: &Client, namespace: &str, name: &str, sink: &impl Fn(Vec<String>)) -> Result<(), KubeError> {
    let pools_path = format!("{POOLS}/{namespace}/inferencepools");
    let by_name = format!("metadata.name={name}");
    let pools = Collection { client, path: &pools_path, selector: ("fieldSelector", by_name.as_str()) };
    let (found, pool_rv) = client.list(pools.path, pools.selector).await?;
    let mut pool_watch = client.watch(pools.path, pools.selector, &pool_rv).await?;
    let Some(pool) = found.first() else {
        tracing::warn!(pool = %name, namespace = %namespace, "endpoints_inference_pool: no such InferencePool (yet)");
        sink(Vec::new());
        while pools.next(&mut pool_watch).await? == Event::Bookmark {}
        return Ok(());
    };
    let spec = PoolSpec::of(pool).map_err(|message| KubeError::Shape { path: pools_path.clone(), message })?;
    let pods_path = format!("/api/v1/namespaces/{namespace}/pods");
    let labels = spec.label_selector();
    let pods = Collection { client, path: &pods_path, selector: ("labelSelector", labels.as_str()) };
    let (items, pods_rv) = client.list(pods.path, pods.selector).await?;
    let mut current: BTreeMap<String, Value> = items.into_iter().map(|p| (name_of(&p), p)).collect();
    sink(spec.endpoints(current.values()));
    let mut pod_watch = client.watch(pods.path, pods.selector, &pods_rv).await?;
    loop {
        tokio::select! {
            event = pools.next(&mut pool_watch) => match event? {
                Event::Applied(pool) if PoolSpec::of(&pool).as_ref() == Ok(&spec) => continue,
                Event::Bookmark => continue,
                _ => {
                    tracing::info!(pool = %name, "endpoints_inference_pool: the pool changed; listing its pods again");
                    return Ok(());
                }
            },
            event = pods.next(&mut pod_watch) => match event? {
                Event::Applied(pod) => { current.insert(name_of(&pod), pod); }
                Event::Deleted(pod) => { current.remove(&name_of(&pod)); }
                Event::Bookmark => continue,
            },
        }
        sink(spec.endpoints(current.values()));
    }
}

/// A collection being watched: where, and which of its objects.
struct Collection<'a> {
    client: &'a Client,
    path: &'a str,
    selector: (&'a str, &'a str),
}

impl Collection<'_> {
    /// The next event of `watch`, which is opened again from where it was when the server
    /// ends it (no new list). Cancel-safe.
    async fn next(&self, watch: &mut Watch) -> Result<Event, KubeError> {
        loop {
            if let Some(event) = watch.next().await? {
                return Ok(event);
            }
            *watch = self.client.watch(self.path, self.selector, &watch.rv.clone()).await?;
        }
    }
}
