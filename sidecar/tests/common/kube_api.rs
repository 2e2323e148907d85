//! A stand-in for the Kubernetes API server, for what pool discovery asks of it: one
//! namespace's `InferencePool`s (by `fieldSelector=metadata.name=…`) and pods (by
//! `labelSelector=k=v,…`), listed and watched as the API does it: lists carry the collection's
//! `resourceVersion`, watches stream one JSON event per line from a `resourceVersion`
//! (`ADDED`, `MODIFIED`, `DELETED`, and an `ERROR` Status with code 410 once that version is
//! older than the history kept), and requests without the bearer token are refused (401).
//! It also keeps `coordination.k8s.io` Leases (get, create, replace), with the API's
//! optimistic concurrency: a write from a stale `resourceVersion` is 409 Conflict.
//! Objects are the fixtures in `testdata/kube/` (a real pod's and pool's shape) with their
//! names, labels, IPs, readiness and `resourceVersion` set.
//!
//! A stand-in, not a cluster: no Kubernetes API server runs here. What it serves is checked
//! against the API's JSON shapes only as far as discovery reads them.
#![allow(dead_code)] // Not every test binary including this module uses all of it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

/// The namespace every object lives in.
pub const NAMESPACE: &str = "llm";
/// The pool's name.
pub const POOL: &str = "vllm-pool";
/// The bearer token the stand-in requires.
pub const TOKEN: &str = "stand-in-service-account-token";

/// Which collection an object or a request is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Pods,
    Pools,
}

#[derive(Default)]
struct Store {
    rv: u64,
    /// Watches from a version below this get 410 Gone.
    floor: u64,
    objects: BTreeMap<(u8, String), Value>,
    /// Every change: its version, collection, event type and the object as it then was.
    log: Vec<(u64, Kind, &'static str, Value)>,
    /// Lists served, by collection (pods, pools).
    lists: [usize; 2],
    /// Bumped to end every open watch.
    epoch: u64,
    /// Leases by name, and the writes each holder made that were accepted.
    leases: BTreeMap<String, Value>,
    lease_writes: BTreeMap<String, usize>,
}

/// A running stand-in.
#[derive(Clone)]
pub struct KubeApi {
    /// Where it listens (plain HTTP).
    pub addr: SocketAddr,
    store: Arc<Mutex<Store>>,
    changed: Arc<tokio::sync::watch::Sender<u64>>,
}

fn fixture(name: &str) -> Value {
    let path = format!("{}/../testdata/kube/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

impl KubeApi {
    /// Serves an `InferencePool` selecting `app: vllm-pool` pods on `port`, and no pods.
    pub async fn start(port: u16) -> KubeApi {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let api = KubeApi {
            addr: listener.local_addr().unwrap(),
            store: Arc::default(),
            changed: Arc::new(tokio::sync::watch::channel(0).0),
        };
        let mut pool = fixture("inferencepool.json");
        pool["spec"]["targetPorts"] = json!([{ "number": port }]);
        api.apply(Kind::Pools, POOL, pool);
        let app = axum::Router::new()
            .route("/api/v1/namespaces/{ns}/pods", axum::routing::get(pods))
            .route("/apis/inference.networking.k8s.io/v1/namespaces/{ns}/inferencepools", axum::routing::get(pools))
            .route("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases", axum::routing::post(create_lease))
            .route(
                "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}",
                axum::routing::get(get_lease).put(put_lease),
            )
            .with_state(api.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        api
    }

    /// The URL to give `--kube-api`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The pods are those named in `ready` (at their IPs, `Ready`) and `starting` (not yet
    /// ready) from now on. A pod left out is first marked terminating (`deletionTimestamp`, still
    /// `Ready`, as a pod being deleted is); one already terminating is deleted.
    pub fn set_pods(&self, ready: &[(&str, &str)], starting: &[(&str, &str)]) {
        let mut store = self.store.lock().unwrap();
        self.set_pods_in(&mut store, ready, starting);
    }

    /// As [`KubeApi::set_pods`], while every open watch is ended and the history up to the
    /// change forgotten: a client resuming from its last version gets 410 Gone and must list.
    pub fn set_pods_forgetting(&self, ready: &[(&str, &str)], starting: &[(&str, &str)]) {
        let mut store = self.store.lock().unwrap();
        store.epoch += 1;
        self.set_pods_in(&mut store, ready, starting);
        store.floor = store.rv;
    }

    /// The pool selects pods labelled `app: <app>` from now on.
    pub fn set_pool_app(&self, app: &str) {
        let mut pool = self.object(Kind::Pools, POOL).unwrap();
        pool["spec"]["selector"]["matchLabels"]["app"] = json!(app);
        self.apply(Kind::Pools, POOL, pool);
    }

    /// Stores Lease `name` held by `holder` for `seconds`, as another process would.
    pub fn set_lease(&self, name: &str, holder: &str, seconds: u64) {
        let mut store = self.store.lock().unwrap();
        store.rv += 1;
        let lease = json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": { "name": name, "namespace": NAMESPACE, "resourceVersion": store.rv.to_string() },
            "spec": { "holderIdentity": holder, "leaseDurationSeconds": seconds,
                      "acquireTime": "2026-12-06T10:00:00.000000Z", "renewTime": "2026-12-06T10:00:00.000000Z",
                      "leaseTransitions": 0 },
        });
        store.leases.insert(name.to_string(), lease);
    }

    /// Lease `name` as stored.
    pub fn lease(&self, name: &str) -> Option<Value> {
        self.store.lock().unwrap().leases.get(name).cloned()
    }

    /// How many of `holder`'s writes to a Lease were accepted.
    pub fn lease_writes(&self, holder: &str) -> usize {
        self.store.lock().unwrap().lease_writes.get(holder).copied().unwrap_or(0)
    }

    /// How many pod lists have been served.
    pub fn pod_lists(&self) -> usize {
        self.store.lock().unwrap().lists[0]
    }

    fn set_pods_in(&self, store: &mut Store, ready: &[(&str, &str)], starting: &[(&str, &str)]) {
        let wanted: BTreeMap<&str, (&str, bool)> = ready
            .iter()
            .map(|(n, ip)| (*n, (*ip, true)))
            .chain(starting.iter().map(|(n, ip)| (*n, (*ip, false))))
            .collect();
        let present: Vec<(String, Value)> =
            store.objects.iter().filter(|((k, _), _)| *k == 0).map(|((_, n), o)| (n.clone(), o.clone())).collect();
        for (name, mut pod) in present {
            if wanted.contains_key(name.as_str()) {
                continue;
            }
            if pod["metadata"]["deletionTimestamp"].is_null() {
                pod["metadata"]["deletionTimestamp"] = json!("2026-12-06T10:05:00Z");
                Self::record(store, Kind::Pods, &name, Some(pod));
            } else {
                Self::record(store, Kind::Pods, &name, None);
            }
        }
        for (name, (ip, is_ready)) in wanted {
            let pod = pod(name, ip, is_ready);
            let old = store.objects.get(&(0, name.to_string()));
            let same =
                old.is_some_and(|o| o["status"] == pod["status"] && o["metadata"]["deletionTimestamp"].is_null());
            if !same {
                Self::record(store, Kind::Pods, name, Some(pod));
            }
        }
        self.changed.send_replace(store.rv);
    }

    fn object(&self, kind: Kind, name: &str) -> Option<Value> {
        self.store.lock().unwrap().objects.get(&(kind as u8, name.to_string())).cloned()
    }

    fn apply(&self, kind: Kind, name: &str, object: Value) {
        let mut store = self.store.lock().unwrap();
        Self::record(&mut store, kind, name, Some(object));
        self.changed.send_replace(store.rv);
    }

    /// Stores `object` (`None`: deletes it) at the next version and logs the event.
    fn record(store: &mut Store, kind: Kind, name: &str, object: Option<Value>) {
        store.rv += 1;
        let rv = store.rv;
        let key = (kind as u8, name.to_string());
        let (event, mut object) = match object {
            Some(o) if store.objects.contains_key(&key) => ("MODIFIED", o),
            Some(o) => ("ADDED", o),
            None => ("DELETED", store.objects.remove(&key).unwrap()),
        };
        object["metadata"]["resourceVersion"] = json!(rv.to_string());
        if event != "DELETED" {
            store.objects.insert(key, object.clone());
        }
        store.log.push((rv, kind, event, object));
    }
}

/// The fixture pod `name` at `ip`, labelled for the pool.
fn pod(name: &str, ip: &str, ready: bool) -> Value {
    let mut pod = fixture("pod.json");
    pod["metadata"]["name"] = json!(name);
    pod["metadata"]["labels"]["app"] = json!(POOL);
    pod["status"]["podIP"] = json!(ip);
    pod["status"]["podIPs"] = json!([{ "ip": ip }]);
    for c in pod["status"]["conditions"].as_array_mut().unwrap() {
        if c["type"] == "Ready" || c["type"] == "ContainersReady" {
            c["status"] = json!(if ready { "True" } else { "False" });
        }
    }
    pod
}

/// Whether `object` passes the request's selector.
fn selected(object: &Value, query: &BTreeMap<String, String>) -> bool {
    if let Some(field) = query.get("fieldSelector") {
        let Some(name) = field.strip_prefix("metadata.name=") else { return false };
        return object["metadata"]["name"] == name;
    }
    query.get("labelSelector").is_none_or(|labels| {
        labels.split(',').all(|pair| pair.split_once('=').is_some_and(|(k, v)| object["metadata"]["labels"][k] == v))
    })
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({ "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code })
}

/// The 401 for a request without the token, `None` for one with it.
fn refusal(headers: &HeaderMap) -> Option<Response> {
    let bearer = headers.get("authorization").and_then(|v| v.to_str().ok());
    let unauthorized = || (StatusCode::UNAUTHORIZED, axum::Json(status(401, "Unauthorized", "Unauthorized")));
    (bearer != Some(&format!("Bearer {TOKEN}"))).then(|| unauthorized().into_response())
}

async fn get_lease(api: State<KubeApi>, path: Path<(String, String)>, headers: HeaderMap) -> Response {
    if let Some(refused) = refusal(&headers) {
        return refused;
    }
    match api.store.lock().unwrap().leases.get(&path.0 .1) {
        Some(lease) => axum::Json(lease.clone()).into_response(),
        None => (StatusCode::NOT_FOUND, axum::Json(status(404, "NotFound", "leases not found"))).into_response(),
    }
}

async fn create_lease(api: State<KubeApi>, headers: HeaderMap, body: axum::Json<Value>) -> Response {
    let name = body["metadata"]["name"].as_str().unwrap_or_default().to_string();
    write_lease(&api, &headers, &name, body.0, true)
}

async fn put_lease(
    api: State<KubeApi>,
    path: Path<(String, String)>,
    headers: HeaderMap,
    body: axum::Json<Value>,
) -> Response {
    write_lease(&api, &headers, &path.0 .1, body.0, false)
}

/// Creates or replaces a Lease as the API does: a create of an existing one and a replace from
/// another `resourceVersion` than the stored one are 409 Conflict.
fn write_lease(api: &KubeApi, headers: &HeaderMap, name: &str, mut lease: Value, create: bool) -> Response {
    if let Some(refused) = refusal(headers) {
        return refused;
    }
    let mut store = api.store.lock().unwrap();
    let stored_rv = store.leases.get(name).map(|l| l["metadata"]["resourceVersion"].clone());
    let conflict = match (&stored_rv, create) {
        (Some(_), true) => Some("AlreadyExists"),
        (None, false) => {
            return (StatusCode::NOT_FOUND, axum::Json(status(404, "NotFound", "not found"))).into_response()
        }
        (Some(rv), false) if *rv != lease["metadata"]["resourceVersion"] => Some("Conflict"),
        _ => None,
    };
    if let Some(reason) = conflict {
        let message = format!("Operation cannot be fulfilled on leases.coordination.k8s.io \"{name}\"");
        return (StatusCode::CONFLICT, axum::Json(status(409, reason, &message))).into_response();
    }
    store.rv += 1;
    lease["metadata"]["resourceVersion"] = json!(store.rv.to_string());
    let holder = lease["spec"]["holderIdentity"].as_str().unwrap_or_default().to_string();
    *store.lease_writes.entry(holder).or_default() += 1;
    store.leases.insert(name.to_string(), lease.clone());
    let code = if create { StatusCode::CREATED } else { StatusCode::OK };
    (code, axum::Json(lease)).into_response()
}

async fn pods(
    api: State<KubeApi>,
    ns: Path<String>,
    query: Query<BTreeMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    serve(api.0, Kind::Pods, &ns.0, query.0, &headers)
}

async fn pools(
    api: State<KubeApi>,
    ns: Path<String>,
    query: Query<BTreeMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    serve(api.0, Kind::Pools, &ns.0, query.0, &headers)
}

fn serve(api: KubeApi, kind: Kind, ns: &str, query: BTreeMap<String, String>, headers: &HeaderMap) -> Response {
    if let Some(refused) = refusal(headers) {
        return refused;
    }
    if ns != NAMESPACE {
        return axum::Json(
            json!({ "kind": "List", "apiVersion": "v1", "metadata": { "resourceVersion": "1" }, "items": [] }),
        )
        .into_response();
    }
    if query.get("watch").map(String::as_str) == Some("true") {
        return watch(api, kind, query);
    }
    let mut store = api.store.lock().unwrap();
    store.lists[kind as usize] += 1;
    let items: Vec<Value> = store
        .objects
        .iter()
        .filter(|((k, _), o)| *k == kind as u8 && selected(o, &query))
        .map(|(_, o)| o.clone())
        .collect();
    let (list_kind, api_version) =
        if kind == Kind::Pods { ("PodList", "v1") } else { ("InferencePoolList", "inference.networking.k8s.io/v1") };
    axum::Json(json!({ "kind": list_kind, "apiVersion": api_version,
                       "metadata": { "resourceVersion": store.rv.to_string() }, "items": items }))
    .into_response()
}

/// Streams the events after the request's `resourceVersion` that pass its selector, until the
/// stand-in ends every watch.
fn watch(api: KubeApi, kind: Kind, query: BTreeMap<String, String>) -> Response {
    let from: u64 = query.get("resourceVersion").and_then(|v| v.parse().ok()).unwrap_or(0);
    let (floor, epoch) = {
        let store = api.store.lock().unwrap();
        (store.floor, store.epoch)
    };
    if from < floor {
        let gone = status(410, "Expired", &format!("too old resource version: {from} ({floor})"));
        return format!("{}\n", json!({ "type": "ERROR", "object": gone })).into_response();
    }
    let changed = api.changed.subscribe();
    let state = (api, changed, from, false);
    let stream = futures_util::stream::unfold(state, move |(api, mut changed, cursor, ended)| {
        let query = query.clone();
        async move {
            if ended {
                return None;
            }
            loop {
                let (lines, last, over) = {
                    let store = api.store.lock().unwrap();
                    let events =
                        store.log.iter().filter(|(rv, k, _, o)| *rv > cursor && *k == kind && selected(o, &query));
                    let lines: String =
                        events.map(|(_, _, t, o)| format!("{}\n", json!({ "type": t, "object": o }))).collect();
                    (lines, store.rv, store.epoch != epoch)
                };
                if over {
                    return None;
                }
                if !lines.is_empty() {
                    return Some((Ok::<_, std::io::Error>(lines), (api, changed, last, false)));
                }
                if changed.changed().await.is_err() {
                    return None;
                }
            }
        }
    });
    axum::body::Body::from_stream(stream).into_response()
}
