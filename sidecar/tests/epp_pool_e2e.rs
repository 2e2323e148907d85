//! End to end: the endpoint picker (`serve --epp-listen`) over a pool it follows through the
//! Kubernetes API (`endpoints_inference_pool`), against a stand-in API server ([`kube_api`]:
//! the API's list and watch and its JSON shapes; no Kubernetes API server runs here) and two
//! `ferrogate sim` engines on 127.0.0.2 and 127.0.0.3 sharing the pool's target port.
//!
//! The picker reports ready (gRPC health `readiness`) only once it has listed the pool's pods:
//! while the API refuses it (no token yet: 401), `liveness` is SERVING and `readiness`
//! NOT_SERVING. Once the token is there it lists, turns ready and picks the one ready pod; a
//! second pod that becomes ready while the first starts terminating takes every pick, with no
//! restart.
//!
//! With leader election (`--epp-lease`), of two pickers only the one holding the Lease is
//! ready: a Lease left by a replica that is gone is taken once it has not been renewed for its
//! duration, the holder keeps it while it renews, and when it shuts down it gives the Lease up
//! and the other picker takes over.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

#[path = "common/gateway.rs"]
mod gateway_helper;
use gateway_helper::{gateway_flags, Setup};
#[path = "common/ext_proc.rs"]
mod ext_proc;
#[path = "common/kube_api.rs"]
mod kube_api;
#[path = "common/sim.rs"]
mod sim_helper;
use kube_api::KubeApi;

const HOSTS: [&str; 2] = ["127.0.0.2", "127.0.0.3"];

/// The picker's health status for `service`.
async fn health(epp: SocketAddr, service: &str) -> i32 {
    let channel = tonic::transport::Channel::from_shared(format!("http://{epp}")).unwrap().connect().await.unwrap();
    let request = HealthCheckRequest { service: service.into() };
    HealthClient::new(channel).check(request).await.unwrap().into_inner().status
}

/// Picks until `want` gets four in a row (each worker VM takes picker streams in turn and
/// reads the published pool on its own), within a minute; then ten more must all be `want`.
async fn every_pick_goes_to(epp: SocketAddr, key: &str, want: &str) {
    let payload = ext_proc::chat("chat");
    let (deadline, mut streak) = (Instant::now() + Duration::from_secs(60), 0);
    while streak < 4 {
        // A VM that has not read the published pool yet picks nothing (no endpoint) or the old one.
        let pick = ext_proc::pick_header(&ext_proc::buffered_reply_of(epp, key, &payload, &[]).await);
        streak = if pick.as_deref() == Some(want) { streak + 1 } else { 0 };
        assert!(Instant::now() < deadline, "picks never settled on {want} (last: {pick:?})");
    }
    for _ in 0..10 {
        assert_eq!(ext_proc::buffered_pick_of(epp, key, &payload, &[]).await, want);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_picker_is_ready_once_it_has_listed_its_pool_and_follows_the_pods() {
    let port = sim_helper::start_sims_sharing_a_port(&HOSTS, &["--model", "base"]).await;
    let api = KubeApi::start(port).await;
    api.set_pods(&[("vllm-a", HOSTS[0])], &[("vllm-b", HOSTS[1])]);
    let pool = format!("{}/{}", kube_api::NAMESPACE, kube_api::POOL);
    let provider = format!(
        "{{ name: pool, kind: openai_compatible, base_url: 'http://127.0.0.1:1', endpoints_inference_pool: '{pool}' }}"
    );
    let models = "  - { name: chat, targets: [{ provider: pool, model: base }] }\n";
    let (key, digest) = ferrogate_sidecar::cli::new_key();
    let keys = format!("keys:\n  - {{ name: alice, digest: '{digest}', models: ['*'] }}\n");
    let token = std::env::temp_dir().join(format!("ferrogate-kube-token-{}-{port}", std::process::id()));
    let _ = std::fs::remove_file(&token);
    let (api_url, token_path) = (api.url(), token.to_str().unwrap().to_string());
    let flags = ["--epp-listen", "127.0.0.1:0", "--kube-api", &api_url, "--kube-token-file", &token_path];
    let setup = gateway_flags(std::slice::from_ref(&provider), models, &keys, 2, &flags).await;
    let epp = setup.gateway.epp_addr().expect("the EPP listens");

    // No token yet: the API answers 401, the pool is not listed, the picker is alive but not ready.
    assert_eq!(health(epp, "liveness").await, ServingStatus::Serving as i32);
    assert_eq!(health(epp, "readiness").await, ServingStatus::NotServing as i32);
    assert_eq!(health(epp, "envoy.service.ext_proc.v3.ExternalProcessor").await, ServingStatus::NotServing as i32);

    std::fs::write(&token, format!("{}\n", kube_api::TOKEN)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while health(epp, "readiness").await != ServingStatus::Serving as i32 {
        assert!(Instant::now() < deadline, "the picker never became ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (a, b) = (format!("{}:{port}", HOSTS[0]), format!("{}:{port}", HOSTS[1]));
    every_pick_goes_to(epp, &key, &a).await;

    // vllm-b becomes ready while vllm-a starts terminating: every pick moves to vllm-b.
    api.set_pods(&[("vllm-b", HOSTS[1])], &[]);
    every_pick_goes_to(epp, &key, &b).await;
    let _ = std::fs::remove_file(&token);
    setup.gateway.shutdown().await;
}

/// The Lease the pickers elect a leader on.
const LEASE: &str = "ferrogate-epp";

/// A picker over the pool at `api` (its pods on `port`), electing on [`LEASE`] as `identity`.
async fn elector(api: &KubeApi, token: &std::path::Path, identity: &str) -> (Setup, SocketAddr) {
    let pool = format!("{}/{}", kube_api::NAMESPACE, kube_api::POOL);
    let provider = format!(
        "{{ name: pool, kind: openai_compatible, base_url: 'http://127.0.0.1:1', endpoints_inference_pool: '{pool}' }}"
    );
    let models = "  - { name: chat, targets: [{ provider: pool, model: base }] }\n";
    let (api_url, token_path) = (api.url(), token.to_str().unwrap().to_string());
    let flags = [
        "--epp-listen",
        "127.0.0.1:0",
        "--kube-api",
        &api_url,
        "--kube-token-file",
        &token_path,
        "--kube-namespace",
        kube_api::NAMESPACE,
        "--epp-lease",
        LEASE,
        "--epp-lease-seconds",
        "2",
        "--replica-id",
        identity,
    ];
    let setup = gateway_flags(std::slice::from_ref(&provider), models, "", 2, &flags).await;
    let epp = setup.gateway.epp_addr().expect("the EPP listens");
    (setup, epp)
}

/// Waits (a minute at most) until the Lease's holder is one of `candidates` and that picker
/// alone is ready; its index.
async fn leader_among(api: &KubeApi, candidates: &[(&str, SocketAddr)]) -> usize {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let holder = api.lease(LEASE).and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_string));
        if let Some(i) = candidates.iter().position(|(id, _)| Some(*id) == holder.as_deref()) {
            if health(candidates[i].1, "readiness").await == ServingStatus::Serving as i32 {
                return i;
            }
        }
        assert!(Instant::now() < deadline, "no leader among {candidates:?}: {:?}", api.lease(LEASE));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_pickers_only_the_lease_holder_is_ready() {
    let port = sim_helper::start_sims_sharing_a_port(&HOSTS, &["--model", "base"]).await;
    let api = KubeApi::start(port).await;
    api.set_pods(&[("vllm-a", HOSTS[0])], &[]);
    // Left by a replica that is gone: never renewed, taken once it has aged its two seconds.
    api.set_lease(LEASE, "gone-replica", 2);
    let token = std::env::temp_dir().join(format!("ferrogate-kube-token-lease-{}-{port}", std::process::id()));
    std::fs::write(&token, format!("{}\n", kube_api::TOKEN)).unwrap();
    let (a, b) = (elector(&api, &token, "picker-a").await, elector(&api, &token, "picker-b").await);
    let pickers = [("picker-a", a.1), ("picker-b", b.1)];
    let leader = leader_among(&api, &pickers).await;
    let follower = 1 - leader;
    assert_eq!(api.lease(LEASE).unwrap()["spec"]["leaseTransitions"], 1, "taken over once");

    // The leader renews; meanwhile the other stays alive and not ready.
    let renewed = api.lease_writes(pickers[leader].0);
    while api.lease_writes(pickers[leader].0) < renewed + 5 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(health(pickers[follower].1, "readiness").await, ServingStatus::NotServing as i32);
    assert_eq!(health(pickers[follower].1, "liveness").await, ServingStatus::Serving as i32);
    assert_eq!(api.lease_writes(pickers[follower].0), 0, "the follower never wrote the Lease");

    // The leader shuts down, giving the Lease up: the other takes it.
    let (setups, mut rest) = ([a.0, b.0], Vec::new());
    for (i, setup) in setups.into_iter().enumerate() {
        if i == leader {
            setup.gateway.shutdown().await;
        } else {
            rest.push(setup);
        }
    }
    assert_eq!(leader_among(&api, &[pickers[follower]]).await, 0);
    assert_eq!(api.lease(LEASE).unwrap()["spec"]["leaseTransitions"], 2);
    let _ = std::fs::remove_file(&token);
    for setup in rest {
        setup.gateway.shutdown().await;
    }
}
