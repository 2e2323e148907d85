//! End to end: `lmcache_aware` in `ferrogate serve` (the real filter wasm in the embedded
//! host, two worker VMs) over two `ferrogate sim` engines with LMCache CPU tiers
//! (`--lmcache-blocks`), publishing GPU- and CPU-medium KV events over ZMQ and their occupancy
//! on `/lmcache/occupancy`.
//!
//! The gateway also serves the endpoint picker (`--epp-listen`): one test asks it, playing an
//! Inference Extension gateway, for the same picks the in-proxy path makes.
//!
//! Engines are warmed behind the gateway's back (requests sent to them directly), so only
//! their events and occupancy can tell the gateway where a prefix is. Routing is observed with
//! probes the engines refuse before touching their caches (`x-sim-status: 400`); each probe
//! names the engine that answered (`x-sim-endpoint`). A probe is recorded as a pick all the
//! same (the approximate fallback remembers where a conversation went), so every phase uses
//! conversations no earlier probe has seen.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ferrogate_sidecar::sim::ENDPOINT_HEADER;
use serde_json::Value;

#[path = "common/gateway.rs"]
mod gateway_helper;
use gateway_helper::{gateway_flags, Setup};
#[path = "common/kv_sim.rs"]
mod kv_sim;
use kv_sim::KvSim;
#[path = "common/ext_proc.rs"]
mod ext_proc;
#[path = "common/sim.rs"]
mod sim_helper;

/// Longer than the worker VMs take to poll what the sidecar knows (the KV feed every tick,
/// the targets feed every second), with room for a loaded machine.
const VM_POLL: Duration = Duration::from_secs(3);

/// Conversations per phase.
const CONVERSATIONS: usize = 6;

use kv_sim::words;

/// `CONVERSATIONS` prompts of 4 full blocks each (with the role word, 64 words).
fn conversations(tag: &str) -> Vec<String> {
    conversations_n(tag, CONVERSATIONS)
}

/// `n` prompts of 4 full blocks each.
fn conversations_n(tag: &str, n: usize) -> Vec<String> {
    (0..n).map(|c| words(&format!("{tag}{c}w"), 63)).collect()
}

use kv_sim::chat_for as chat;

struct Fleet {
    client: reqwest::Client,
    gateway: Setup,
    sims: Vec<KvSim>,
    /// The pool's provider entry.
    provider: String,
}

/// The gateway's flags: the endpoint picker on a free port besides the HTTP listener.
const FLAGS: [&str; 2] = ["--epp-listen", "127.0.0.1:0"];

const MODELS: &str = "  - { name: lc, strategy: lmcache_aware, targets: [{ provider: pool, model: kv }] }\n  \
                      - { name: pc, strategy: precise_cache_aware, targets: [{ provider: pool, model: kv }] }\n";

impl Fleet {
    /// Two engines of `sim_flags`, a pool over them with an offload TTL of `ttl_secs` and
    /// their occupancy source, and models `lc` (`lmcache_aware`) and `pc`
    /// (`precise_cache_aware`) on it.
    async fn start(sim_flags: &[&str], ttl_secs: u64) -> Fleet {
        Self::start_each(|_| sim_flags.iter().map(ToString::to_string).collect(), ttl_secs, |_| String::new()).await
    }

    /// [`Fleet::start`] with each sim's flags from `flags(i)` and more of the pool's `lmcache`
    /// block from `lmcache(sims)`.
    async fn start_each(
        flags: impl Fn(usize) -> Vec<String>,
        ttl_secs: u64,
        lmcache: impl Fn(&[KvSim]) -> String,
    ) -> Fleet {
        Self::start_at([None, None], flags, ttl_secs, lmcache).await
    }

    /// [`Fleet::start_each`] with sim `i` serving HTTP at `addrs[i]` when given.
    async fn start_at(
        addrs: [Option<SocketAddr>; 2],
        flags: impl Fn(usize) -> Vec<String>,
        ttl_secs: u64,
        lmcache: impl Fn(&[KvSim]) -> String,
    ) -> Fleet {
        let mut sims = Vec::new();
        for (i, addr) in addrs.into_iter().enumerate() {
            let flags = flags(i);
            let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
            sims.push(KvSim::start_with(addr, &flags).await);
        }
        let endpoints: Vec<String> = sims.iter().map(KvSim::endpoint_entry).collect();
        let provider = format!(
            "{{ name: pool, kind: openai_compatible, base_url: 'http://pool.internal', kv_block_size: 16, \
             lmcache_ttl_secs: {ttl_secs}, lmcache: {{ occupancy: /lmcache/occupancy{} }}, endpoints: [{}] }}",
            lmcache(&sims),
            endpoints.join(", ")
        );
        let gateway = gateway_flags(std::slice::from_ref(&provider), MODELS, "", 2, &FLAGS).await;
        let fleet = Fleet { client: reqwest::Client::new(), gateway, sims, provider };
        fleet.until("both engines connected", |kv| (0..2).all(|i| kv[i]["connected"] == true)).await;
        fleet
    }

    /// Stops the gateway and starts a new one on the same configuration, once the old one has
    /// let go of `pull` (a new process binds it only then).
    async fn restart_gateway(self, pull: &str) -> Fleet {
        let Fleet { client, gateway, sims, provider } = self;
        gateway.gateway.shutdown().await;
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpListener::bind(pull).is_err() {
            assert!(Instant::now() < deadline, "the stopped gateway still holds {pull}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let gateway = gateway_flags(std::slice::from_ref(&provider), MODELS, "", 2, &FLAGS).await;
        Fleet { client, gateway, sims, provider }
    }

    async fn admin(&self, path: &str) -> Value {
        let url = format!("http://{}{path}", self.gateway.gateway.admin_addr());
        self.client.get(url).send().await.unwrap().json().await.unwrap()
    }

    async fn until(&self, what: &str, f: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        kv_sim::kv_until(&self.client, self.gateway.gateway.admin_addr(), what, Duration::from_secs(20), f).await
    }

    /// Sends `prompt` to engine `i` directly (it caches it and publishes events).
    async fn warm(&self, i: usize, prompt: &str) {
        let url = format!("http://{}/v1/chat/completions", self.sims[i].addr);
        assert_eq!(self.client.post(url).json(&chat("kv", prompt)).send().await.unwrap().status(), 200);
    }

    /// The engine's own token ids for `prompt`.
    async fn tokens(&self, prompt: &str) -> String {
        kv_sim::token_ids(&self.client, self.sims[0].addr, "kv", prompt).await
    }

    /// Which engine the gateway picks for `prompt` under `model`.
    async fn probe(&self, model: &str, prompt: &str) -> usize {
        let endpoint = kv_sim::probe(&self.client, &self.gateway.base, model, prompt, self.tokens(prompt).await).await;
        self.sims.iter().position(|s| s.addr.to_string() == endpoint).unwrap()
    }

    /// Which engine the endpoint picker picks for `prompt` under `model` (BUFFERED).
    async fn epp_probe(&self, model: &str, prompt: &str) -> usize {
        let epp = self.gateway.gateway.epp_addr().expect("the picker listens");
        let payload = serde_json::to_vec(&chat(model, prompt)).unwrap();
        let tokens = self.tokens(prompt).await;
        let extra = [("x-ferrogate-token-ids", tokens.as_str())];
        let endpoint = ext_proc::buffered_pick_of(epp, "no-keys-configured", &payload, &extra).await;
        self.sims.iter().position(|s| s.addr.to_string() == endpoint).unwrap()
    }

    /// The engines `prompts` go to under `model`.
    async fn picks(&self, model: &str, prompts: &[String]) -> Vec<usize> {
        let mut picks = Vec::new();
        for prompt in prompts {
            picks.push(self.probe(model, prompt).await);
        }
        picks
    }
}

/// A prefix pushed out of engine 0's GPU cache into its CPU tier still goes to engine 0 under
/// `lmcache_aware`, not to the idle engine 1 that holds nothing of it. Once the CPU entries
/// age out (`lmcache_ttl_secs`), they stop pinning. (That `precise_cache_aware` counts GPU
/// blocks only is shown by `kv::score_tests` and the routing bench.)
///
/// A prefix no engine holds goes to its home on the fallback's hash ring, whose points are the
/// sims' random ports: each aged conversation lands on engine 0 with even odds, so there are
/// 16 of them (all on engine 0 by chance: 1 run in 65,536; with 6 it was 1 in 64).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefix_in_the_cpu_tier_keeps_its_engine_until_it_ages_out() {
    let fleet = Fleet::start(&["--kv-blocks", "24", "--lmcache-blocks", "200"], 8).await;
    let (pinned, aged) = (conversations("pin"), conversations_n("aged", 16));
    // 22 conversations of 4 blocks, then 6 more: engine 0's GPU cache (24 blocks) keeps only
    // the last six, the first 88 blocks move to its CPU tier.
    for prompt in pinned.iter().chain(&aged).chain(&conversations("junk")) {
        fleet.warm(0, prompt).await;
    }
    fleet.until("88 blocks in engine 0's CPU tier", |kv| kv[0]["cpu_blocks"].as_u64() >= Some(88)).await;
    tokio::time::sleep(VM_POLL).await;
    assert_eq!(fleet.picks("lc", &pinned).await, [0; CONVERSATIONS], "lmcache_aware follows the CPU tier");
    // No removal comes for CPU-tier blocks (none were dropped): the index lets them age out.
    fleet.until("engine 0's CPU entries aged out", |kv| kv[0]["cpu_blocks"].as_u64() == Some(0)).await;
    // The worker VMs take the removals on their next poll of the KV feed (every tick).
    tokio::time::sleep(VM_POLL).await;
    let after = fleet.picks("lc", &aged).await;
    assert!(after.contains(&1), "aged-out entries no longer pin: {after:?}");
}

/// The same through the endpoint picker: a prefix in engine 0's CPU tier only is picked for
/// engine 0 by the picker as by the in-proxy filter. The picks are first awaited conversation
/// by conversation (four in a row each, so that both worker VMs, which take picker streams in
/// turn, hold its CPU-tier blocks: each VM polls the KV feed on its own), then every
/// conversation must go to engine 0 both ways, no miss tolerated. (Without the CPU tier, each
/// conversation would go to its home on the fallback's hash ring: all twelve on engine 0 by
/// chance is 1 run in 4,096.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_endpoint_picker_sends_a_cpu_tier_prefix_to_its_holder() {
    let fleet = Fleet::start(&["--kv-blocks", "24", "--lmcache-blocks", "200"], 300).await;
    // 12 conversations of 4 blocks, then 6 more: engine 0's GPU cache (24 blocks) keeps only
    // the last six; the first 48 blocks move to its CPU tier.
    let pinned = conversations_n("epp", 12);
    for prompt in pinned.iter().chain(&conversations("junk")) {
        fleet.warm(0, prompt).await;
    }
    fleet.until("48 blocks in engine 0's CPU tier", |kv| kv[0]["cpu_blocks"].as_u64() >= Some(48)).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    for prompt in &pinned {
        let mut streak = 0;
        while streak < 4 {
            streak = if fleet.epp_probe("lc", prompt).await == 0 { streak + 1 } else { 0 };
            assert!(Instant::now() < deadline, "the picker never followed engine 0's CPU tier");
        }
    }
    let mut through_picker = Vec::new();
    for prompt in &pinned {
        through_picker.push(fleet.epp_probe("lc", prompt).await);
    }
    assert_eq!(through_picker, [0; 12], "the picker follows the CPU tier");
    assert_eq!(fleet.picks("lc", &pinned).await, [0; 12], "as the in-proxy filter does");
}

/// Both engines hold the same prefixes in GPU memory; engine 0's CPU tier is full, engine 1's
/// empty. `lmcache_aware` sends them to the engine with room. (Unknown occupancy is neutral:
/// `services::targets` tests a failing source, `balance::precise` the pick without it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ties_go_to_the_engine_with_cache_room() {
    let fleet = Fleet::start(&["--kv-blocks", "40", "--lmcache-blocks", "16"], 300).await;
    // 64 blocks of filler through engine 0's 40: 24 offloaded, its 16-block CPU tier full.
    for c in 0..16 {
        fleet.warm(0, &words(&format!("fill{c}w"), 63)).await;
    }
    let shared = conversations("shared");
    for prompt in &shared {
        fleet.warm(0, prompt).await;
        fleet.warm(1, prompt).await;
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let targets = fleet.admin("/api/v1/targets").await;
        let occupancy = |i: usize| targets["targets"][i]["cache_occupancy"].as_f64();
        if (occupancy(0), occupancy(1)) == (Some(1.0), Some(0.0)) {
            break;
        }
        assert!(Instant::now() < deadline, "occupancy never reached the targets: {targets}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    fleet.until("the shared prefixes on both", |kv| (0..2).all(|i| kv[i]["gpu_blocks"].as_u64() >= Some(24))).await;
    // The worker VMs take the targets feed once a second.
    tokio::time::sleep(VM_POLL).await;
    assert_eq!(fleet.picks("lc", &shared).await, [1; CONVERSATIONS], "the engine with room");
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The sims publish no CPU-tier events (`--lmcache-events false`): their LMCache workers report
/// the tier only through the controller channel the sidecar serves (`lmcache.pull`, `reply`),
/// registering first. A prefix pushed into engine 0's CPU tier still keeps its engine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_channel_alone_tells_the_cpu_tier() {
    let fleet = controller_fleet("ctl", 300).await;
    let pinned = conversations("ctl");
    for prompt in pinned.iter().chain(&conversations("ctljunk")) {
        fleet.warm(0, prompt).await;
    }
    // 24 blocks pushed out of engine 0's GPU cache, known only from its worker's admits.
    let kv =
        fleet.until("engine 0's CPU tier from the controller", |kv| kv[0]["cpu_blocks"].as_u64() >= Some(24)).await;
    assert!(kv[0]["lmcache_ops"].as_u64() >= Some(24), "{kv:?}");
    tokio::time::sleep(VM_POLL).await;
    assert_eq!(fleet.picks("lc", &pinned).await, [0; CONVERSATIONS], "lmcache_aware follows the reported tier");
}

/// [`Fleet::start_each`] with sims whose LMCache workers report only to the controller
/// channel (`lmcache.pull`, `reply`, each sim's instance named), with an offload TTL of
/// `ttl_secs`.
async fn controller_fleet(tag: &str, ttl_secs: u64) -> Fleet {
    let (pull, reply) = (format!("127.0.0.1:{}", free_port()), format!("127.0.0.1:{}", free_port()));
    let flags = |i: usize| {
        let fixed = ["--kv-blocks", "24", "--lmcache-blocks", "200", "--lmcache-events", "false"];
        let mut flags: Vec<String> = fixed.iter().map(ToString::to_string).collect();
        let sim = format!("{tag}-{i}");
        let controller =
            ["--lmcache-controller", &pull, "--lmcache-controller-reply", &reply, "--lmcache-instance-id", &sim];
        flags.extend(controller.iter().map(ToString::to_string));
        flags
    };
    let lmcache = |sims: &[KvSim]| {
        format!(
            ", pull: 'tcp://{pull}', reply: 'tcp://{reply}', instances: {{ {tag}-0: '{}', {tag}-1: '{}' }}",
            sims[0].addr, sims[1].addr
        )
    };
    Fleet::start_each(flags, ttl_secs, lmcache).await
}

/// A hot reload that changes the pool's layout (`lmcache_ttl_secs` 300 → 301) starts new
/// indexes; the engines' LMCache workers, connected before it and never again, are still
/// counted after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_connected_before_a_reload_are_counted_after_it() {
    let fleet = controller_fleet("reload", 300).await;
    for prompt in conversations("before").iter().chain(&conversations("beforejunk")) {
        fleet.warm(0, prompt).await;
    }
    fleet.until("admits before the reload", |kv| kv[0]["cpu_blocks"].as_u64() >= Some(24)).await;
    let path = fleet.gateway.config_path();
    let config = std::fs::read_to_string(&path).unwrap();
    let edited = config.replace("lmcache_ttl_secs: 300", "lmcache_ttl_secs: 301");
    assert_ne!(edited, config);
    std::fs::write(path.with_extension("tmp"), edited).unwrap();
    std::fs::rename(path.with_extension("tmp"), &path).unwrap();
    // New indexes: nothing counted yet, the engines' streams followed again.
    fleet.until("the reload", |kv| kv[0]["lmcache_ops"] == 0 && kv[0]["connected"] == true).await;
    for prompt in conversations("after").iter().chain(&conversations("afterjunk")) {
        fleet.warm(0, prompt).await;
    }
    let kv = fleet.until("admits after the reload", |kv| kv[0]["cpu_blocks"].as_u64() >= Some(24)).await;
    assert!(kv[0]["lmcache_ops"].as_u64() >= Some(24), "{kv:?}");
}

/// Engine 0's LMCache worker has no `instances` entry: it is matched by the address it
/// registers from, once, when it starts (engine 1 is on another host). After the gateway
/// restarts, its heartbeats (every second, to the `heartbeat_url` it was answered) teach the
/// new gateway where it runs, and its admits count again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_matched_worker_is_counted_again_after_a_gateway_restart() {
    let (pull, reply) = (format!("127.0.0.1:{}", free_port()), format!("127.0.0.1:{}", free_port()));
    let flags = |i: usize| {
        let fixed = ["--kv-blocks", "24", "--lmcache-blocks", "200", "--lmcache-events", "false"];
        let mut flags: Vec<String> = fixed.iter().map(ToString::to_string).collect();
        let controller = ["--lmcache-controller", &pull, "--lmcache-controller-reply", &reply];
        if i == 0 {
            flags.extend(controller.iter().chain(&["--lmcache-heartbeat-secs", "1"]).map(ToString::to_string));
        }
        flags
    };
    let lmcache = |_: &[KvSim]| format!(", pull: 'tcp://{pull}', reply: 'tcp://{reply}'");
    let other_host: SocketAddr = "127.0.0.2:0".parse().unwrap();
    let fleet = Fleet::start_at([None, Some(other_host)], flags, 300, lmcache).await;
    for prompt in conversations("first").iter().chain(&conversations("firstjunk")) {
        fleet.warm(0, prompt).await;
    }
    fleet.until("admits before the restart", |kv| kv[0]["cpu_blocks"].as_u64() >= Some(24)).await;
    let fleet = fleet.restart_gateway(&pull).await;
    fleet.until("a heartbeat after the restart", |kv| kv[0].get("lmcache_seen_age_ms").is_some()).await;
    for prompt in conversations("second").iter().chain(&conversations("secondjunk")) {
        fleet.warm(0, prompt).await;
    }
    let kv = fleet.until("admits after the restart", |kv| kv[0]["cpu_blocks"].as_u64() >= Some(24)).await;
    assert!(kv[0]["lmcache_ops"].as_u64() >= Some(24), "{kv:?}");
}

/// No telemetry at all: the engines' event sockets and occupancy source answer nothing. Every
/// request is still served, and the picks fall to the load-guarded fallback, which spreads
/// new conversations over both engines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_telemetry_requests_are_served_by_the_fallback() {
    let sims = [sim_helper::start_sim(&["--model", "kv"]).await, sim_helper::start_sim(&["--model", "kv"]).await];
    let dead = |_| format!("tcp://127.0.0.1:{}", free_port());
    let endpoints: Vec<String> =
        sims.iter().map(|a| format!("{{ address: '{a}', kv_events: '{}' }}", dead(a))).collect();
    let provider = format!(
        "{{ name: pool, kind: openai_compatible, base_url: 'http://pool.internal', kv_tokenize: true, \
         lmcache: {{ occupancy: /no-such-source }}, endpoints: [{}] }}",
        endpoints.join(", ")
    );
    let models = "  - { name: lc, strategy: lmcache_aware, targets: [{ provider: pool, model: kv }] }\n";
    let gateway = gateway_flags(&[provider], models, "", 2, &FLAGS).await;
    let client = reqwest::Client::new();
    let mut engines = std::collections::BTreeSet::new();
    for c in 0..12 {
        let response = client
            .post(format!("{}/v1/chat/completions", gateway.base))
            .json(&chat("lc", &words(&format!("lost{c}w"), 40)))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "served without telemetry");
        engines.insert(response.headers()[ENDPOINT_HEADER].to_str().unwrap().to_string());
    }
    assert_eq!(engines.len(), 2, "new conversations spread over both engines: {engines:?}");
    let kv = kv_sim::kv_view(&client, gateway.gateway.admin_addr()).await;
    assert!(kv.iter().all(|e| e["connected"] == false), "{kv:?}");
    let url = format!("http://{}/api/v1/targets", gateway.gateway.admin_addr());
    let targets: Value = client.get(url).send().await.unwrap().json().await.unwrap();
    assert!(targets["targets"].as_array().unwrap().iter().all(|t| t.get("cache_occupancy").is_none()), "{targets}");
}
