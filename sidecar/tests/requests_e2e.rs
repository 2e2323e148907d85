//! End to end: the request log of `ferrogate sidecar` (the binary, a child process, on free
//! ports, the admin API behind a token), with the Postgres store on the machine's real
//! PostgreSQL and with the memory store.
//!
//! - `GET /api/v1/requests`: each filter returns exactly its matches, newest first, across
//!   cursor pages; paging through more than two pages collects every record once and in order
//!   while records arrive between pages; a malformed cursor or status class is 400 JSON, a
//!   missing token 401.
//! - `GET /api/v1/requests/{request_id}`: every record of the id; 404 JSON for none.
//! - `--request-log FILE` (Postgres: a batch sent twice is logged once) and `--request-log -`
//!   (memory store, stdout: kept twice, logged twice): one line per stored record, with the
//!   API item's fields, `log` and `time`.
//!
//! Database: `FERROGATE_TEST_DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/test`),
//! a schema of its own per test.

use std::io::BufRead;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferrogate_core::usage::Record;
use serde_json::Value;

const ADMIN_TOKEN: &str = "admin-secret";

#[path = "common/pg_scratch.rs"]
mod pg_scratch;
use pg_scratch::Scratch;

fn free_port() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

/// `ferrogate sidecar` as a child process, ready once its admin API answers; its stdout lines
/// are collected.
struct Sidecar {
    child: Child,
    listen: SocketAddr,
    admin: SocketAddr,
    stdout: Arc<Mutex<Vec<String>>>,
    http: reqwest::Client,
}

impl Sidecar {
    async fn start(scratch: &Scratch, postgres: bool, request_log: &str) -> Sidecar {
        let store = if postgres { "store: { kind: postgres, url_env: FG_REQUESTS_E2E_DB }\n" } else { "" };
        let config = scratch.dir.join("sidecar.yaml");
        let models = "models: [{ name: chat, targets: [{ provider: local, model: sim-small }] }]\n";
        let providers = "providers: [{ name: local, kind: openai_compatible, base_url: 'http://127.0.0.1:8000' }]\n";
        std::fs::write(&config, format!("{store}{providers}{models}")).unwrap();
        let (listen, admin) = (free_port(), free_port());
        let mut child = Command::new(env!("CARGO_BIN_EXE_ferrogate"))
            .args(["sidecar", "--config", config.to_str().unwrap(), "--request-log", request_log])
            .args(["--sidecar-listen", &listen.to_string(), "--admin-listen", &admin.to_string()])
            .env("FG_REQUESTS_E2E_DB", &scratch.url)
            .env("FERROGATE_INTERNAL_TOKEN", "internal")
            .env("FERROGATE_ADMIN_TOKEN", ADMIN_TOKEN)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("ferrogate sidecar starts");
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let (pipe, lines) = (child.stdout.take().unwrap(), stdout.clone());
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
                lines.lock().unwrap().push(line);
            }
        });
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        while http.get(format!("http://{admin}/readyz")).send().await.map_or(true, |r| !r.status().is_success()) {
            assert!(Instant::now() < deadline, "sidecar never became ready on {admin}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Sidecar { child, listen, admin, stdout, http }
    }

    /// Posts records as the filter does; returns the answer's body.
    async fn post(&self, records: &[Record]) -> Value {
        let body: String = records.iter().map(Record::to_json_line).collect();
        let url = format!("http://{}/v1/usage", self.listen);
        let r = self.http.post(url).bearer_auth("internal").body(body).send().await.unwrap();
        assert_eq!(r.status(), 200);
        r.json().await.unwrap()
    }

    /// `GET` on the admin API with the token (or `token`): status and JSON body (null if none).
    async fn get_as(&self, path_and_query: &str, token: Option<&str>) -> (u16, Value) {
        let mut req = self.http.get(format!("http://{}{path_and_query}", self.admin));
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        let r = req.send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    async fn get(&self, path_and_query: &str) -> (u16, Value) {
        self.get_as(path_and_query, Some(ADMIN_TOKEN)).await
    }

    /// Follows `next_cursor` from the first page of `query` (pages of `limit`): the items'
    /// record numbers.
    async fn all_pages(&self, query: &str, limit: usize) -> Vec<u64> {
        let (mut seen, mut cursor, mut pages) = (Vec::new(), String::new(), 0);
        loop {
            let (status, page) = self.get(&format!("/api/v1/requests?{query}&limit={limit}&cursor={cursor}")).await;
            assert_eq!(status, 200, "{query}: {page}");
            pages += 1;
            let items = page["requests"].as_array().unwrap();
            assert!(items.len() <= limit);
            seen.extend(items.iter().map(number));
            match page["next_cursor"].as_str() {
                Some(next) => cursor = next.to_string(),
                None => return seen,
            }
            assert!(pages < 100, "{query}: the cursor does not advance");
        }
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Record number `i` (its `prompt_tokens`): request ids repeat every 7, keys alice, bob, carol
/// or none, two models, three providers, six statuses, two per start millisecond, some
/// streamed and some of those partial, retries 0 to 2.
fn record(i: u64) -> Record {
    let pick = |options: &[&str], n: u64| options[(i % n) as usize].to_string();
    Record {
        request_id: format!("req-{}", i % 7),
        key: (i % 4 != 3).then(|| pick(&["alice", "bob", "carol", ""], 4)),
        groups: vec!["dev".into()],
        model_requested: pick(&["chat", "embed"], 2),
        provider: pick(&["local", "cloud", "edge"], 3),
        upstream_model: "sim-small".into(),
        status: [200, 200, 429, 502, 499, 201][(i % 6) as usize],
        prompt_tokens: i,
        completion_tokens: 3,
        cost_micro_usd: i.is_multiple_of(2).then_some(7),
        latency_ms: 50,
        ttft_ms: Some(4),
        started_at_unix_ms: 1_700_000_000_000 + i / 2 * 10,
        streamed: i % 5 < 2,
        partial: i.is_multiple_of(5),
        retries: i % 3,
        ..Record::default()
    }
}

fn records(numbers: impl Iterator<Item = u64>) -> Vec<Record> {
    numbers.map(record).collect()
}

fn number(item: &Value) -> u64 {
    item["prompt_tokens"].as_u64().unwrap()
}

/// The numbers of `stored` (arrival order) that pass `keep`, newest first (start, then arrival).
fn newest_first(stored: &[Record], keep: impl Fn(&Record) -> bool) -> Vec<u64> {
    let mut hits: Vec<(u64, usize, u64)> = stored
        .iter()
        .enumerate()
        .filter(|(_, r)| keep(r))
        .map(|(at, r)| (r.started_at_unix_ms, at, r.prompt_tokens))
        .collect();
    hits.sort_unstable_by(|a, b| b.cmp(a));
    hits.into_iter().map(|(_, _, i)| i).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_each_filter_returns_exactly_its_matches_across_pages() {
    let scratch = Scratch::new("fg_requests_e2e").await;
    let sidecar = Sidecar::start(&scratch, true, scratch.dir.join("requests.jsonl").to_str().unwrap()).await;
    let stored = records(0..30);
    sidecar.post(&stored[..17]).await;
    sidecar.post(&stored[17..]).await;
    let since = 1_700_000_000_050u64;
    type Keep = Box<dyn Fn(&Record) -> bool>;
    let cases: Vec<(String, Keep)> = vec![
        ("request_id=req-3".into(), Box::new(|r| r.request_id == "req-3")),
        ("key=alice".into(), Box::new(|r| r.key.as_deref() == Some("alice"))),
        ("model=embed".into(), Box::new(|r| r.model_requested == "embed")),
        ("provider=cloud".into(), Box::new(|r| r.provider == "cloud")),
        ("status=429".into(), Box::new(|r| r.status == 429)),
        ("status_class=2xx".into(), Box::new(|r| (200..300).contains(&r.status))),
        ("status_class=4xx".into(), Box::new(|r| (400..500).contains(&r.status))),
        (format!("since={since}"), Box::new(move |r| r.started_at_unix_ms >= since)),
        (format!("until={since}"), Box::new(move |r| r.started_at_unix_ms < since)),
        ("streamed=true".into(), Box::new(|r| r.streamed)),
        ("streamed=false".into(), Box::new(|r| !r.streamed)),
        ("partial=true".into(), Box::new(|r| r.partial)),
        ("partial=false".into(), Box::new(|r| !r.partial)),
        ("key=bob&status_class=5xx".into(), Box::new(|r| r.key.as_deref() == Some("bob") && r.status >= 500)),
    ];
    for (query, keep) in &cases {
        let want = newest_first(&stored, keep);
        assert!(!want.is_empty() && want.len() < stored.len(), "{query} selects {} of 30", want.len());
        assert_eq!(sidecar.all_pages(query, 4).await, want, "{query}");
    }
    // An item: every record field (defaults written), and attempts = retries + 1.
    let (_, page) = sidecar.get("/api/v1/requests?limit=1").await;
    let newest = &page["requests"][0];
    assert_eq!((number(newest), &newest["retries"], &newest["attempts"]), (29, &Value::from(2), &Value::from(3)));
    assert_eq!(
        (&newest["key"], &newest["partial"], &newest["queued_ms"]),
        (&Value::from("bob"), &Value::from(false), &Value::from(0))
    );
    drop(sidecar);
    scratch.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_paging_collects_every_record_once_in_order_while_new_ones_arrive() {
    let scratch = Scratch::new("fg_requests_e2e").await;
    let sidecar = Sidecar::start(&scratch, true, scratch.dir.join("requests.jsonl").to_str().unwrap()).await;
    let stored = records(0..23);
    sidecar.post(&stored).await;
    let (mut seen, mut cursor, mut pages) = (Vec::new(), String::new(), 0u64);
    loop {
        let (status, page) = sidecar.get(&format!("/api/v1/requests?limit=5&cursor={cursor}")).await;
        assert_eq!(status, 200, "{page}");
        pages += 1;
        seen.extend(page["requests"].as_array().unwrap().iter().map(number));
        let Some(next) = page["next_cursor"].as_str() else { break };
        cursor = next.to_string();
        // (record, its new number): records like `record`, told apart by their number.
        let arriving: Vec<(u64, u64)> = match pages {
            // Newer than anything read: they belong before the first page.
            1 => vec![(100, 1_100), (101, 1_101)],
            // A long request reported late: it started with records 2 and 3, arrived after.
            2 => vec![(2, 1_002)],
            _ => vec![(200 + pages, 2_000 + pages)],
        };
        sidecar
            .post(&arriving.iter().map(|&(i, n)| Record { prompt_tokens: n, ..record(i) }).collect::<Vec<_>>())
            .await;
        assert!(pages < 20, "the cursor does not advance");
    }
    assert_eq!(pages, 5, "23 records and the late one, 5 a page");
    let mut want = newest_first(&stored, |_| true);
    let at = want.iter().position(|&i| i == 3).unwrap();
    want.insert(at, 1_002);
    assert_eq!(seen, want, "every record once, in order, plus the late one in its place");
    // The first page now starts with the newest arrivals.
    let (_, first) = sidecar.get("/api/v1/requests?limit=1").await;
    assert_eq!(number(&first["requests"][0]), 2_004);
    drop(sidecar);
    scratch.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_finds_a_request_by_id_and_refuses_bad_cursors_and_missing_tokens() {
    let scratch = Scratch::new("fg_requests_e2e").await;
    let sidecar = Sidecar::start(&scratch, true, scratch.dir.join("requests.jsonl").to_str().unwrap()).await;
    sidecar.post(&records(0..20)).await;
    let (status, found) = sidecar.get("/api/v1/requests/req-3").await;
    assert_eq!(status, 200, "{found}");
    let numbers: Vec<u64> = found["requests"].as_array().unwrap().iter().map(number).collect();
    assert_eq!(numbers, [17, 10, 3], "a client-chosen id repeats: every record of it, newest first");
    assert_eq!(found["requests"][0]["attempts"], 3);
    let (status, none) = sidecar.get("/api/v1/requests/req-nothing").await;
    assert_eq!((status, none["error"].as_str().unwrap()), (404, "no request with id \"req-nothing\""));

    for bad in ["cursor=not-a-cursor", "cursor=MTIz", "status_class=6xx"] {
        let (status, body) = sidecar.get(&format!("/api/v1/requests?{bad}")).await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert!(body["error"].as_str().is_some_and(|e| e.starts_with(bad.split('=').next().unwrap())), "{body}");
    }
    for path in ["/api/v1/requests", "/api/v1/requests/req-3"] {
        let (status, body) = sidecar.get_as(path, None).await;
        assert_eq!((status, &body["error"]), (401, &Value::from("missing or wrong bearer token")));
        assert_eq!(sidecar.get_as(path, Some("wrong")).await.0, 401);
    }
    drop(sidecar);
    scratch.drop_all().await;
}

/// The lines of a request log that are request records (stdout also carries the banner).
fn log_lines(text: &[String]) -> Vec<Value> {
    text.iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["log"] == "ferrogate.request")
        .collect()
}

/// Waits until `read` gives `n` log lines, then a little longer to see that no more come.
async fn wait_lines(n: usize, read: impl Fn() -> Vec<Value>) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while read().len() < n {
        assert!(Instant::now() < deadline, "{} of {n} log lines", read().len());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    read()
}

/// Each line is the API's item for its record plus `log` and an RFC 3339 `time`.
async fn check_lines(sidecar: &Sidecar, lines: &[Value]) {
    let (_, page) = sidecar.get("/api/v1/requests?limit=1000").await;
    let items = page["requests"].as_array().unwrap();
    for line in lines {
        let mut item = line.clone();
        let fields = item.as_object_mut().unwrap();
        let time = fields.remove("time").unwrap();
        let time = time.as_str().unwrap();
        assert!(time.len() == 24 && time.starts_with("20") && time.ends_with('Z') && &time[10..11] == "T", "{time}");
        assert_eq!(fields.remove("log").unwrap(), "ferrogate.request");
        assert!(items.contains(&item), "{line} is not an API item");
        assert_eq!(item["attempts"].as_u64(), item["retries"].as_u64().map(|r| r + 1));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_request_log_file_has_one_line_per_stored_record() {
    let scratch = Scratch::new("fg_requests_e2e").await;
    let path = scratch.dir.join("requests.jsonl");
    let sidecar = Sidecar::start(&scratch, true, path.to_str().unwrap()).await;
    let first = records(0..10);
    assert_eq!(sidecar.post(&first).await["stored"], 10);
    // The acknowledgement was lost: the same batch again is skipped, and not logged again.
    assert_eq!(sidecar.post(&first).await["duplicates"], 10);
    sidecar.post(&records(10..15)).await;
    let read =
        || log_lines(&std::fs::read_to_string(&path).unwrap_or_default().lines().map(String::from).collect::<Vec<_>>());
    let lines = wait_lines(15, read).await;
    assert_eq!(lines.len(), 15, "one line per stored record");
    let mut numbers: Vec<u64> = lines.iter().map(number).collect();
    numbers.sort_unstable();
    assert_eq!(numbers, (0..15).collect::<Vec<_>>());
    check_lines(&sidecar, &lines).await;
    let metrics = sidecar.http.get(format!("http://{}/metrics", sidecar.admin)).send().await.unwrap();
    let metrics = metrics.text().await.unwrap();
    assert!(metrics.contains("# HELP ferrogate_request_log_dropped_total "), "{metrics}");
    assert!(metrics.contains("\nferrogate_request_log_dropped_total 0\n"), "{metrics}");
    drop(sidecar);
    scratch.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_request_log_on_stdout_has_one_line_per_stored_record() {
    let scratch = Scratch::new("fg_requests_e2e").await;
    let sidecar = Sidecar::start(&scratch, false, "-").await;
    let first = records(0..10);
    sidecar.post(&first).await;
    // The memory store keeps a batch sent twice twice, and logs it twice.
    sidecar.post(&first).await;
    sidecar.post(&records(10..12)).await;
    let stdout = sidecar.stdout.clone();
    let lines = wait_lines(22, move || log_lines(&stdout.lock().unwrap())).await;
    assert_eq!(lines.len(), 22);
    let numbers: Vec<u64> = lines.iter().map(number).collect();
    let want: Vec<u64> = (0..10).chain(0..10).chain(10..12).collect();
    assert_eq!(numbers, want, "in ingestion order");
    check_lines(&sidecar, &lines).await;
    drop(sidecar);
    scratch.drop_all().await;
}

#[test]
fn an_unwritable_request_log_stops_the_start() {
    let out = Command::new(env!("CARGO_BIN_EXE_ferrogate"))
        .args(["sidecar", "--config", "/nonexistent/x.yaml", "--request-log", "/nonexistent/dir/requests.jsonl"])
        .args(["--sidecar-listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        .env_remove("FERROGATE_ADMIN_TOKEN")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--request-log /nonexistent/dir/requests.jsonl"), "{stderr}");
}
