//! The semantic cache's filter-facing routes end to end: a real `ferrogate sidecar` (its
//! configuration file naming an `openai_compatible` embedding model) driven over loopback
//! HTTP, as the filter calls it.
//!
//! The embedding model is a stand-in served in this process: a bag-of-words hash into 32
//! dimensions, deterministic, so the same words in any order embed identically and other
//! words do not. It also answers slowly (`slow` in the text: 3 s, over the 2 s timeout) or
//! fails (`broken`: 500) on demand. Since word order is lost, the lexical signature alone tells
//! "5 km to miles" from "5 miles to km" here. Real-model quality is measured in
//! tests/python/test_semantic_store.py.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use ferrogate_sidecar::standalone::Sidecar;
use serde_json::{json, Value};
use sidecar_link::start_sidecar;

#[path = "common/sidecar_link.rs"]
mod sidecar_link;

const TOKEN: &str = "t0k-semantic";
const KEY_ENV: &str = "FERROGATE_TEST_SEMANTIC_EMBED_KEY";

/// What the stand-in was asked: `(authorization, model)` per call.
type Seen = Arc<Mutex<Vec<(String, String)>>>;

/// The stand-in's vector of `text`.
fn bag_of_words(text: &str) -> Vec<f32> {
    let mut v = vec![0.0f32; 32];
    for word in text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
        let h = word
            .to_lowercase()
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
        v[(h % 32) as usize] += 1.0;
    }
    v
}

async fn embeddings(State(seen): State<Seen>, headers: HeaderMap, Json(body): Json<Value>) -> Response {
    let text = body["input"].as_str().unwrap_or_default().to_string();
    let auth = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    seen.lock().unwrap().push((auth, body["model"].as_str().unwrap_or_default().to_string()));
    if text.contains("slow") {
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    if text.contains("broken") {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    }
    let data = json!([{"object": "embedding", "index": 0, "embedding": bag_of_words(&text)}]);
    Json(json!({"object": "list", "data": data, "model": body["model"], "usage": {"prompt_tokens": 1, "total_tokens": 1}}))
        .into_response()
}

/// The stand-in embeddings server, and what it was asked.
async fn start_embedder() -> (SocketAddr, Seen) {
    let seen = Seen::default();
    let app =
        axum::Router::new().route("/prefix/v1/embeddings", axum::routing::post(embeddings)).with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, seen)
}

struct Setup {
    sidecar: Sidecar,
    seen: Seen,
    http: reqwest::Client,
    _dir: tempdir::Dir,
}

/// A sidecar whose model `embed` is the stand-in, with room for `max_entries` entries of at
/// most 64 bytes.
async fn setup(max_entries: u32) -> Setup {
    let (embedder, seen) = start_embedder().await;
    std::env::set_var(KEY_ENV, "sk-embed");
    let config = format!(
        "providers: [{{ name: local, kind: openai_compatible, base_url: 'http://{embedder}/prefix', api_key_env: {KEY_ENV} }},\n\
                     {{ name: claude, kind: anthropic, base_url: 'https://api.anthropic.com' }}]\n\
         models: [{{ name: embed, targets: [{{ provider: local, model: mini-lm }}] }},\n\
                  {{ name: chat, targets: [{{ provider: claude, model: claude-x }}] }}]\n\
         cache_store: {{ semantic_max_entries: {max_entries}, max_entry_bytes: 64 }}\n"
    );
    let dir = tempdir::Dir::new();
    let path = dir.path.join("config.yaml");
    std::fs::write(&path, config).unwrap();
    let sidecar = start_sidecar(&path, "127.0.0.1:0", TOKEN).await;
    Setup { sidecar, seen, http: reqwest::Client::new(), _dir: dir }
}

/// What a lookup answered: status, similarity, ticket, body.
#[derive(Debug)]
struct Looked {
    status: u16,
    similarity: Option<String>,
    ticket: Option<String>,
    body: Vec<u8>,
}

impl Setup {
    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.sidecar.sidecar_addr)
    }

    async fn lookup_as(&self, model: &str, scope: &str, text: &str, ttl_secs: u64) -> Looked {
        let body = json!({"embedding_model": model, "threshold": 0.9, "model": "chat", "scope": scope,
                          "context": "c0ffee", "text": text, "ttl_secs": ttl_secs});
        let r =
            self.http.post(self.url("/v1/cache/semantic/lookup")).bearer_auth(TOKEN).json(&body).send().await.unwrap();
        let header = |n: &str| r.headers().get(n).map(|v| v.to_str().unwrap().to_string());
        let (similarity, ticket) = (header("x-ferrogate-cache-similarity"), header("x-ferrogate-cache-ticket"));
        let status = r.status().as_u16();
        Looked { status, similarity, ticket, body: r.bytes().await.unwrap().to_vec() }
    }

    async fn lookup(&self, scope: &str, text: &str) -> Looked {
        self.lookup_as("embed", scope, text, 3600).await
    }

    async fn put(&self, ticket: &str, body: &str, ttl: &str) -> u16 {
        let r = self.http.put(self.url(&format!("/v1/cache/semantic/{ticket}"))).bearer_auth(TOKEN);
        r.header("x-ferrogate-cache-ttl", ttl).body(body.to_string()).send().await.unwrap().status().as_u16()
    }

    /// Looks `text` up (a miss) and stores `answer` under its ticket.
    async fn remember(&self, scope: &str, text: &str, answer: &str, ttl: &str) {
        let miss = self.lookup(scope, text).await;
        assert_eq!(miss.status, 404, "{text}: {miss:?}");
        assert_eq!(self.put(miss.ticket.as_deref().unwrap(), answer, ttl).await, 204);
    }
}

#[tokio::test]
async fn a_miss_stored_under_its_ticket_is_served_to_the_same_and_similar_turns() {
    let s = setup(100).await;
    let miss = s.lookup("key:a", "what is the capital of austria").await;
    assert_eq!((miss.status, miss.similarity.as_deref()), (404, None));
    let ticket = miss.ticket.unwrap();
    assert_eq!(ticket.len(), 32);
    assert_eq!(s.put(&ticket, "vienna-entry", "60").await, 204);
    // A ticket is used once.
    assert_eq!(s.put(&ticket, "vienna-entry", "60").await, 404);
    assert_eq!(s.put("0123456789abcdef0123456789abcdef", "x", "60").await, 404);

    let hit = s.lookup("key:a", "what is the capital of austria").await;
    assert_eq!((hit.status, hit.similarity.as_deref(), hit.ticket.as_deref()), (200, Some("1.0000"), None));
    assert_eq!(hit.body, b"vienna-entry");
    let reordered = s.lookup("key:a", "the capital of austria is what").await;
    assert_eq!((reordered.status, reordered.body.as_slice()), (200, &b"vienna-entry"[..]));
    let other = s.lookup("key:a", "how do I reset my password").await;
    assert_eq!(other.status, 404);
    assert!(other.ticket.is_some());

    // The embedding call: the provider's credential, the upstream model id.
    let seen = s.seen.lock().unwrap().clone();
    assert!(seen.iter().all(|(auth, model)| auth == "Bearer sk-embed" && model == "mini-lm"), "{seen:?}");
}

#[tokio::test]
async fn a_turn_of_another_lexical_signature_is_not_served() {
    let s = setup(100).await;
    // The same words in another order embed identically here (similarity 1.0): only the
    // signature (which unit carries the number, the order of names) tells them apart.
    s.remember("global", "Convert 5 km to miles", "5km-entry", "60").await;
    s.remember("global", "flights from Paris to London", "paris-entry", "60").await;
    for (text, entry) in [("to miles, convert 5 km", "5km-entry"), ("Flights from Paris to London?", "paris-entry")] {
        let hit = s.lookup("global", text).await;
        assert_eq!((hit.status, hit.body.as_slice()), (200, entry.as_bytes()), "{text}");
    }
    for text in ["Convert 5 miles to km", "flights from London to Paris", "flights not from Paris to London"] {
        let miss = s.lookup("global", text).await;
        assert_eq!(miss.status, 404, "{text}: {miss:?}");
        assert!(miss.ticket.is_some());
    }
}

#[tokio::test]
async fn no_hit_crosses_a_scope() {
    let s = setup(100).await;
    s.remember("key:a", "summarize this contract", "a's answer", "60").await;
    assert_eq!(s.lookup("key:a", "summarize this contract").await.status, 200);
    for scope in ["key:b", "group:a", "global"] {
        let looked = s.lookup(scope, "summarize this contract").await;
        assert_eq!(looked.status, 404, "{scope}");
        assert!(looked.ticket.is_some());
    }
}

#[tokio::test]
async fn entries_expire_and_the_store_stays_bounded() {
    let s = setup(2).await;
    s.remember("global", "short lived answer", "soon gone", "1").await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(s.lookup("global", "short lived answer").await.status, 404);

    s.remember("global", "first question here", "1st", "60").await;
    s.remember("global", "second question here", "2nd", "60").await;
    // A hit on the first makes the second the least recently used.
    assert_eq!(s.lookup("global", "first question here").await.status, 200);
    s.remember("global", "third question here", "3rd", "60").await;
    assert_eq!(s.lookup("global", "second question here").await.status, 404);
    assert_eq!(s.lookup("global", "first question here").await.status, 200);
    assert_eq!(s.lookup("global", "third question here").await.status, 200);
}

#[tokio::test]
async fn oversized_entries_bad_requests_and_missing_tokens_are_refused() {
    let s = setup(100).await;
    let ticket = s.lookup("global", "a long answer follows").await.ticket.unwrap();
    assert_eq!(s.put(&ticket, &"x".repeat(65), "60").await, 413);
    // The ticket went with it.
    assert_eq!(s.put(&ticket, "small", "60").await, 404);
    let ticket = s.lookup("global", "a long answer follows").await.ticket.unwrap();
    assert_eq!(s.put(&ticket, "small", "soon").await, 400);
    assert_eq!(s.put(&ticket, &"x".repeat(64), "60").await, 204);

    let bad = s.http.post(s.url("/v1/cache/semantic/lookup")).bearer_auth(TOKEN).body("{}").send().await.unwrap();
    assert_eq!(bad.status(), 400);
    let anonymous = s.http.post(s.url("/v1/cache/semantic/lookup")).json(&json!({})).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
    let anonymous = s.http.put(s.url("/v1/cache/semantic/abc")).body("x").send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
}

#[tokio::test]
async fn the_cache_fails_open_without_a_ticket() {
    let s = setup(100).await;
    for model in ["no-such-model", "chat"] {
        let looked = s.lookup_as(model, "global", "hello there", 60).await;
        assert_eq!((looked.status, looked.ticket), (404, None), "{model}");
    }
    let broken = s.lookup("global", "a broken embedder").await;
    assert_eq!((broken.status, broken.ticket), (404, None));
    let started = Instant::now();
    let slow = s.lookup("global", "a slow embedder").await;
    assert_eq!((slow.status, slow.ticket), (404, None));
    let took = started.elapsed();
    assert!(took >= Duration::from_secs(2) && took < Duration::from_millis(2900), "{took:?}");
    // And it recovers by itself.
    assert!(s.lookup("global", "a healthy embedder").await.ticket.is_some());
}

mod tempdir {
    /// A scratch directory removed on drop.
    pub struct Dir {
        pub path: std::path::PathBuf,
    }

    impl Dir {
        pub fn new() -> Dir {
            let path = std::env::temp_dir().join(format!("ferrogate-semantic-{}", rand::random::<u64>()));
            std::fs::create_dir_all(&path).unwrap();
            Dir { path }
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

#[tokio::test]
async fn the_admin_purge_reaches_the_semantic_store() {
    let s = setup(100).await;
    s.remember("key:a", "explain our refund policy", "refunds", "60").await;
    s.remember("global", "explain our shipping policy", "shipping", "60").await;
    let admin = format!("http://{}/api/v1/cache/purge", s.sidecar.admin_addr);
    let r = s.http.post(&admin).json(&json!({"model": "chat"})).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap()["semantic"], 2);
    assert_eq!(s.lookup("key:a", "explain our refund policy").await.status, 404);
    assert_eq!(s.lookup("global", "explain our shipping policy").await.status, 404);
}
