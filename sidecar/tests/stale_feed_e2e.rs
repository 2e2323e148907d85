//! A sidecar that dies under flow control: the real filter in the embedded host, fed by a real
//! `ferrogate sidecar` over HTTP the way Envoy carries its callouts, in front of a
//! `ferrogate sim` engine that runs at most two requests (`--max-running 2`) and a model that
//! counts an engine with two running requests as saturated (`flow_control.max_running: 2`).
//!
//! The sidecar goes away while its last feed says the engine is idle; the engine then fills up
//! (two requests from elsewhere). Once the feed is older than `targets_max_age_ms`, the filter
//! reports it stale (`ferrogate_targets_feed_stale` 1, one warning) and holds every request of
//! the model instead of trusting the frozen "idle": the engine never holds more than its two.
//! A new sidecar on the same address brings the feed back (the gauge 0, one info line) and the
//! held request goes as soon as the fresh figures show room.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ferrogate_host::{Headers, LogLevel, Runtime, StreamEvent, StreamId, Vm};
use sidecar_link::{carry, start_sidecar};

#[path = "common/sidecar_link.rs"]
mod sidecar_link;
#[path = "common/sim.rs"]
mod sim_helper;
#[path = "common/wasm.rs"]
mod wasm;

const TOKEN: &str = "t0k-stale";
/// The bound under test (the smallest allowed), so the test waits seconds, not minutes.
const MAX_AGE_MS: u64 = 2_000;
/// How long the engine is kept full from elsewhere while the sidecar is away.
const BUSY_MS: u64 = 12_000;
/// What the filter logs when the feed goes stale, and when it is current again.
const STALE_LINE: &str = "targets feed stale";
const CURRENT_LINE: &str = "targets feed current again";

fn config(sim: SocketAddr) -> String {
    format!(
        "providers: [{{ name: pool, kind: openai_compatible, base_url: 'http://{sim}', endpoints: ['{sim}'] }}]\n\
         models:\n  - name: chat\n    targets: [{{ provider: pool, model: sim-small }}]\n    \
         flow_control: {{ max_running: 2, queue_ttl_ms: 600000 }}\n"
    )
}

/// The filter VM, its snapshot polled every 100 ms, engine figures usable for [`MAX_AGE_MS`].
fn filter() -> (Runtime, Vm) {
    let plugin = format!(
        r#"{{"sidecar_cluster":"ferrogate_sidecar","internal_token":"{TOKEN}","poll_interval_ms":100,"targets_max_age_ms":{MAX_AGE_MS}}}"#
    );
    wasm::filter_vm(plugin)
}

/// The proxy's side of the test: the VM, its sidecar's address, the engine, what the VM logged.
struct Proxy {
    rt: Runtime,
    vm: Vm,
    sidecar: String,
    sim: SocketAddr,
    logs: Vec<(LogLevel, String)>,
}

/// What the filter did with a request so far.
#[derive(Debug, PartialEq)]
enum Outcome {
    /// Released upstream: the body it sends.
    Routed(Vec<u8>),
    /// Answered locally with this status.
    Answered(String),
    /// Neither yet: waiting in the model's queue.
    Held,
}

impl Proxy {
    /// One tick of the filter, its callouts (feed polls, queue timers) carried to the sidecar
    /// over HTTP; a refused connection is what Envoy's async client answers then: 503.
    async fn tick(&mut self) {
        self.vm.on_tick().unwrap();
        // A queue timer answered now can start the next one: carry those too, a few rounds.
        for _ in 0..4 {
            let calls = self.vm.take_http_calls();
            if calls.is_empty() {
                break;
            }
            for call in calls {
                let answer = carry(&self.sidecar, &call.headers, call.body.clone()).await;
                self.vm.http_call_response(call.token, Some(answer)).unwrap();
            }
        }
        self.logs.extend(self.vm.take_logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    /// Sends a chat request for `chat` into the filter; returns its stream.
    fn request(&mut self) -> StreamId {
        let s = self.vm.create_stream(ferrogate_host::StreamInfo::default(), None);
        let head = Headers::from_pairs([
            (":method", "POST"),
            (":path", "/v1/chat/completions"),
            (":authority", "gw"),
            ("content-type", "application/json"),
        ]);
        self.vm.request_headers(s, head, false).unwrap();
        let body = r#"{"model":"chat","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}"#;
        self.vm.request_data(s, body.as_bytes(), true).unwrap();
        s
    }

    /// What became of stream `s` (events since the last look).
    fn outcome(&mut self, s: StreamId) -> Outcome {
        for e in self.vm.take_events(s) {
            match e {
                StreamEvent::ResponseHeaders { headers, .. } => {
                    return Outcome::Answered(headers.get_str(":status").unwrap_or("").into())
                }
                StreamEvent::RequestData { data, .. } => return Outcome::Routed(data),
                _ => {}
            }
        }
        Outcome::Held
    }

    /// Sends what the filter released to the engine (the test plays Envoy's router), held
    /// there `hold_ms`, and ends the stream.
    fn forward(&mut self, s: StreamId, body: Vec<u8>, hold_ms: u64) -> tokio::task::JoinHandle<u16> {
        self.vm.finish_stream(s, false);
        let url = format!("http://{}/v1/chat/completions", self.sim);
        tokio::spawn(async move {
            let resp = reqwest::Client::new()
                .post(url)
                .header("content-type", "application/json")
                .header("x-sim-ttft-ms", hold_ms.to_string())
                .body(body)
                .send()
                .await;
            match resp {
                Ok(r) => {
                    let status = r.status().as_u16();
                    let _ = r.bytes().await;
                    status
                }
                Err(_) => 0,
            }
        })
    }

    /// The filter's `ferrogate_targets_feed_stale` gauge, if it is set.
    fn stale_gauge(&self) -> Option<u64> {
        self.series("ferrogate_targets_feed_stale")
    }

    /// How often the feed went stale: `ferrogate_targets_feed_stale_total`.
    fn turns(&self) -> u64 {
        self.series("ferrogate_targets_feed_stale_total").unwrap_or(0)
    }

    fn series(&self, name: &str) -> Option<u64> {
        let text = self.rt.prometheus_text();
        text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
    }

    /// Ticks until `done` holds, for at most 60 s (a loaded machine is slow, never this slow).
    async fn until(&mut self, what: &str, mut done: impl FnMut(&mut Proxy) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done(self) {
            assert!(Instant::now() < deadline, "timed out waiting for {what}; logs: {:?}", self.logs);
            self.tick().await;
        }
    }

    /// Ticks until a new request is routed; forwards it with a short hold.
    async fn until_routed(&mut self, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let s = self.request();
            match self.outcome(s) {
                Outcome::Routed(body) => {
                    assert_eq!(self.forward(s, body, 10).await.unwrap(), 200);
                    return;
                }
                other => self.vm.finish_stream(s, other == Outcome::Held),
            };
            assert!(Instant::now() < deadline, "{what}: never routed; logs: {:?}", self.logs);
            self.tick().await;
        }
    }

    fn logged(&self, level: LogLevel, text: &str) -> usize {
        self.logs.iter().filter(|(l, m)| *l == level && m.contains(text)).count()
    }
}

/// The most requests the sim held at once (running plus waiting), from its own `/metrics`.
async fn peak(sim: SocketAddr) -> u64 {
    let text = reqwest::get(format!("http://{sim}/metrics")).await.unwrap().text().await.unwrap();
    let peaks = text.lines().filter(|l| l.starts_with("sim:peak_requests{"));
    peaks.filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok()).max().unwrap_or_else(|| panic!("{text}"))
}

/// Requests the sim runs now.
async fn running(sim: SocketAddr) -> u64 {
    let text = reqwest::get(format!("http://{sim}/metrics")).await.unwrap().text().await.unwrap();
    let lines = text.lines().filter(|l| l.starts_with("vllm:num_requests_running{"));
    lines.filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum::<f64>() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_engine_figures_hold_traffic_until_the_sidecar_is_back() {
    let sim = sim_helper::start_sim(&["--max-running", "2"]).await;
    let dir = std::env::temp_dir().join(format!("ferrogate-stale-{}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("config.yaml");
    std::fs::write(&file, config(sim)).unwrap();
    let first = start_sidecar(&file, "127.0.0.1:0", TOKEN).await;
    let (rt, vm) = filter();
    let mut p = Proxy { rt, vm, sidecar: first.sidecar_addr.to_string(), sim, logs: Vec::new() };

    // A request goes only once the feed says the engine runs fewer than two (unknown figures
    // are saturated): the feed is current and idle.
    p.until_routed("the first feed").await;
    p.until("the gauge at 0", |p| p.stale_gauge() == Some(0)).await;
    // A sidecar slow to start on a loaded machine may have been reported stale already.
    let (warned, recovered) = (p.logged(LogLevel::Warn, STALE_LINE), p.logged(LogLevel::Info, CURRENT_LINE));
    let turns = p.turns();

    // The sidecar goes away; its last feed said idle. Then the engine fills up from elsewhere.
    first.shutdown();
    let addr = p.sidecar.clone();
    p.until("the sidecar to stop answering", |_| std::net::TcpStream::connect(&addr).is_err()).await;
    let busy: Vec<_> = (0..2)
        .map(|_| {
            let url = format!("http://{sim}/v1/chat/completions");
            tokio::spawn(async move {
                let body = r#"{"model":"sim-small","max_tokens":2,"messages":[{"role":"user","content":"x"}]}"#;
                let req = reqwest::Client::new().post(url).header("content-type", "application/json");
                let resp = req.header("x-sim-ttft-ms", BUSY_MS.to_string()).body(body).send().await;
                resp.map_or(0, |r| r.status().as_u16())
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    while running(sim).await < 2 {
        assert!(Instant::now() < deadline, "the engine never ran the two requests from elsewhere");
        p.tick().await;
    }

    // Past the bound the feed is stale: reported once, and requests wait instead of going.
    p.until("the stale gauge", |p| p.stale_gauge() == Some(1)).await;
    assert_eq!(p.logged(LogLevel::Warn, STALE_LINE), warned + 1, "{:?}", p.logs);
    assert_eq!(p.turns(), turns + 1);
    let held = p.request();
    let mut sent = Vec::new();
    for _ in 0..10 {
        let s = p.request();
        for (stream, outcome) in [(s, p.outcome(s)), (held, p.outcome(held))] {
            if let Outcome::Routed(body) = outcome {
                sent.push(p.forward(stream, body, BUSY_MS)); // what the old figures let through
            }
        }
        p.vm.finish_stream(s, true);
        p.tick().await;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while !sent.is_empty() && peak(sim).await <= 2 && Instant::now() < deadline {
        p.tick().await; // what went through is on its way to the engine
    }
    let (went, held_at_once) = (sent.len(), peak(sim).await);
    assert!(went == 0 && held_at_once <= 2, "{went} requests went on stale figures; the engine held {held_at_once}");

    // A new sidecar on the same address: the feed is current again (reported once), and the
    // held request goes once the fresh figures show room (the busy requests end).
    let second = start_sidecar(&file, &p.sidecar, TOKEN).await;
    p.until("the feed to be current again", |p| p.stale_gauge() == Some(0)).await;
    assert_eq!(p.logged(LogLevel::Info, CURRENT_LINE), recovered + 1, "{:?}", p.logs);
    let deadline = Instant::now() + Duration::from_secs(60);
    let body = loop {
        match p.outcome(held) {
            Outcome::Routed(body) => break body,
            Outcome::Held => {}
            other => panic!("the held request ended as {other:?}"),
        }
        assert!(Instant::now() < deadline, "the held request never went; logs: {:?}", p.logs);
        p.tick().await;
    };
    assert_eq!(p.forward(held, body, 10).await.unwrap(), 200);
    for b in busy {
        assert_eq!(b.await.unwrap(), 200);
    }
    p.until_routed("a request after the recovery").await;
    assert!(peak(sim).await <= 2, "the engine held more than its two");
    assert_eq!(p.turns(), turns + 1, "one turn to stale, one back");
    second.shutdown();
    let _ = std::fs::remove_dir_all(dir);
}
