//! A batch dropped on purpose (`x-sim-kv-drop`), and a sim stopped and started again on the
//! same ports (an engine restart), with a SUB and a DEALER on loopback sockets.

use std::io;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::*;
use crate::sim::{run, KV_DROP_HEADER};

async fn post_dropping(app: &Router, body: serde_json::Value) -> u16 {
    let request = axum::http::Request::post("/v1/completions")
        .header("content-type", "application/json")
        .header(KV_DROP_HEADER, "1")
        .body(axum::body::Body::from(body.to_string()))
        .unwrap();
    app.clone().oneshot(request).await.unwrap().status().as_u16()
}

#[tokio::test]
async fn a_dropped_batch_is_a_gap_live_and_is_replayed() {
    let (app, publisher, mut sub, probe) = start("t").await;
    let a = json!({"model": "sim-small", "max_tokens": 1, "prompt": words(0, 16)});
    assert_eq!(post_dropping(&app, a).await, 200);
    let b = json!({"model": "sim-small", "max_tokens": 1, "prompt": words(100, 16)});
    assert_eq!(post(&app, "/v1/completions", b).await.0, 200);
    // A's batch (probe + 1) never comes: the next one live is B's, one past it.
    let live = recv_batch(&mut sub).await;
    assert_eq!(live.seq, probe + 2);
    assert_eq!(u64s(field(&live.events[0], "block_hashes")), prefix::block_hashes(&words(100, 16)));
    let mut dealer = DealerSocket::new();
    dealer.connect(publisher.endpoints().replay.as_deref().unwrap()).await.unwrap();
    let replies = replay_from(&mut dealer, probe + 1).await;
    assert_eq!(replies.len(), 3, "{replies:?}"); // A, B, the end marker
    assert_eq!(replies[0][..3], [Bytes::new(), Bytes::from_static(b"t"), seq_frame(probe + 1)]);
    let dropped = batch(ZmqMessage::try_from(replies[0][1..].to_vec()).unwrap());
    assert_eq!(u64s(field(&dropped.events[0], "block_hashes")), prefix::block_hashes(&words(0, 16)));
    assert_eq!((replies[1][2].clone(), replies[1][3].clone()), (seq_frame(live.seq), live.payload));
    assert_eq!(replies[2][2], seq_frame(END_SEQ));
    // Nothing else was sent live.
    assert!(tokio::time::timeout(Duration::from_millis(100), sub.recv()).await.is_err());
}

// Worker threads, as in the binary: nothing else gets a turn before the ports are checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_both_sockets_while_senders_live() {
    let (app, publisher, mut sub, probe) = start("").await;
    let sender = publisher.sender();
    let endpoints = publisher.endpoints().clone();
    publisher.shutdown().await;
    // The router still holds senders, yet both addresses are free as soon as shutdown returns.
    for endpoint in [endpoints.events, endpoints.replay] {
        let addr = endpoint.unwrap().replace("tcp://", "");
        drop(std::net::TcpListener::bind(&addr).expect("still bound"));
    }
    // Later batches go nowhere, and requests are still answered.
    sender.publish(vec![KvEvent::AllBlocksCleared]);
    let body = json!({"model": "sim-small", "max_tokens": 1, "prompt": words(0, 16)});
    assert_eq!(post(&app, "/v1/completions", body).await.0, 200);
    let after = tokio::time::timeout(Duration::from_millis(100), sub.recv()).await;
    assert!(!matches!(after, Ok(Ok(_))), "batch after {probe}: {after:?}");
}

/// The replay from seq 0 once it holds `count` messages (the end marker included): batches
/// are kept by the publisher task a moment after the request that made them is answered.
async fn replay_until(dealer: &mut DealerSocket, count: usize) -> Vec<Vec<Bytes>> {
    for _ in 0..50 {
        let replies = replay_from(dealer, 0).await;
        if replies.len() >= count {
            assert_eq!(replies.len(), count, "{replies:?}");
            return replies;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the replay never held {count} messages");
}

/// A port that was free a moment ago.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `sim::run` on `http` with `kv`, and the sender that stops it.
async fn start_sim(http: u16, kv: &KvEventsArgs) -> (oneshot::Sender<()>, JoinHandle<io::Result<()>>) {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", http)).await.unwrap();
    let args = SimArgs { kv: kv.clone(), ..SimArgs::default() };
    let (stop, stopped) = oneshot::channel::<()>();
    (stop, tokio::spawn(run(args, listener, async move { drop(stopped.await) })))
}

/// A running sim on three ports that were free a moment ago (chosen again when another test
/// took one in between: `run` then fails at once binding it), and the sender that stops it.
async fn sim_on_free_ports() -> (u16, KvEventsArgs, oneshot::Sender<()>, JoinHandle<io::Result<()>>) {
    let client = reqwest::Client::new();
    for _ in 0..10 {
        let (http, events, replay) = (free_port(), free_port(), free_port());
        let kv = KvEventsArgs {
            kv_events: Some(format!("tcp://127.0.0.1:{events}")),
            kv_replay: Some(format!("tcp://127.0.0.1:{replay}")),
            ..KvEventsArgs::default()
        };
        let Ok(listener) = tokio::net::TcpListener::bind(("127.0.0.1", http)).await else { continue };
        let args = SimArgs { kv: kv.clone(), ..SimArgs::default() };
        let (stop, stopped) = oneshot::channel::<()>();
        let sim = tokio::spawn(run(args, listener, async move { drop(stopped.await) }));
        // `run` binds the KV sockets before it serves HTTP: an answer means all three are bound.
        let health = client.get(format!("http://127.0.0.1:{http}/health")).timeout(Duration::from_secs(5));
        if health.send().await.is_ok_and(|r| r.status().is_success()) {
            return (http, kv, stop, sim);
        }
        let _ = stop.send(());
        let _ = tokio::time::timeout(Duration::from_secs(5), sim).await;
    }
    panic!("no free ports for a sim after 10 tries");
}

/// A completion of a prompt no earlier request used (so it stores a block: one batch).
async fn complete(client: &reqwest::Client, http: u16, i: usize) {
    let body = json!({"model": "sim-small", "max_tokens": 1, "prompt": words(i * 100, 16)});
    let response = client.post(format!("http://127.0.0.1:{http}/v1/completions")).json(&body).send().await;
    assert_eq!(response.unwrap().status(), 200);
}

/// With a SUB and a DEALER connected to the sim running on `http` and the ports of `kv`,
/// publishes three batches (seqs 0..=2), then stops it and waits for `run` to return.
async fn run_then_stop(http: u16, kv: &KvEventsArgs, stop: oneshot::Sender<()>, sim: JoinHandle<io::Result<()>>) {
    // Both stay connected while the sim stops.
    let mut sub = SubSocket::new();
    sub.connect(kv.kv_events.as_deref().unwrap()).await.unwrap();
    sub.subscribe("").await.unwrap();
    let mut dealer = DealerSocket::new();
    dealer.connect(kv.kv_replay.as_deref().unwrap()).await.unwrap();
    for i in 0..3 {
        complete(&reqwest::Client::new(), http, i).await;
    }
    replay_until(&mut dealer, 4).await; // seqs 0..=2 and the end
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(5), sim).await.expect("run did not return").unwrap().unwrap();
}

/// Sends completions of new prompts until `sub` gets a batch (its subscription is then live:
/// at the first, unless the machine is very slow); returns it and the number sent.
async fn first_batch_seen(sub: &mut SubSocket, http: u16) -> (Batch, usize) {
    let client = reqwest::Client::new();
    for sent in 1..=50 {
        complete(&client, http, 10 + sent).await;
        if let Ok(frames) = tokio::time::timeout(Duration::from_millis(200), sub.recv()).await {
            return (batch(frames.unwrap()), sent);
        }
    }
    panic!("no batch after 50 requests");
}

// Worker threads, as in the binary: nothing else gets a turn before the ports are checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_sim_frees_its_ports_and_a_new_one_counts_from_zero() {
    let (http, kv, stop, sim) = sim_on_free_ports().await;
    run_then_stop(http, &kv, stop, sim).await;
    // Free as soon as `run` returned: the same three ports bind again.
    let port_of = |addr: &Option<String>| addr.as_deref().and_then(|a| a.rsplit(':').next()?.parse::<u16>().ok());
    for port in [port_of(&kv.kv_events), port_of(&kv.kv_replay)].into_iter().flatten() {
        drop(std::net::TcpListener::bind(("127.0.0.1", port)).expect("a KV-event port still bound"));
    }
    let (stop, sim) = start_sim(http, &kv).await;
    let mut sub = SubSocket::new();
    sub.connect(kv.kv_events.as_deref().unwrap()).await.unwrap();
    sub.subscribe("").await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await; // PUB/SUB's slow joiner
                                                          // The new sim numbers from 0 (seq 0 for the first request), not after the old one's 0..=2.
    let (seen, sent) = first_batch_seen(&mut sub, http).await;
    assert_eq!(seen.seq, u64::try_from(sent).unwrap() - 1);
    let mut dealer = DealerSocket::new();
    dealer.connect(kv.kv_replay.as_deref().unwrap()).await.unwrap();
    let replies = replay_until(&mut dealer, sent + 1).await;
    assert_eq!(replies[0][2], seq_frame(0));
    stop.send(()).unwrap();
    sim.await.unwrap().unwrap();
}
