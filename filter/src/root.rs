//! Root context: owns the parsed plugin configuration, the configuration feed from the sidecar,
//! the usage queue's consuming side and the VM's metrics, and creates one stream per HTTP
//! request.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

use ferrogate_core::plugin::{PluginConfig, PluginConfigError, SidecarSettings};
use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::ContextType;

use crate::http::{KnownKeys, Shared, StreamHandle};
use crate::kv_feed::KvPoll;
use crate::limits_feed::LimitsFeed;
use crate::metrics::{Feed, Metrics};
use crate::routing::RoutingCell;
use crate::snapshot_feed::SnapshotFeed;
use crate::targets_feed::TargetsFeed;
use crate::usage_sink::{Outbox, UsageSink};
use crate::{flow_wake, sidecar_call};

/// How often queued usage records are shipped (and unacknowledged ones retried).
const FLUSH_PERIOD: Duration = Duration::from_secs(1);
/// Shared-data key marking that the open-gateway warning was logged (once per process).
const OPEN_WARNED: &str = "ferrogate.open_warned";

/// Plugin-wide state, one per VM and plugin.
pub(crate) struct Root {
    /// The root's context id (the effective context again after a stream ran from here).
    id: u32,
    shared: Shared,
    sink: UsageSink,
    feed: SnapshotFeed,
    limits: LimitsFeed,
    targets: TargetsFeed,
    kv: KvPoll,
    /// This VM's lease asks on their way to the sidecar.
    leases: crate::leases::LeaseFlush,
    /// The tick was shortened for the KV feed.
    kv_ticks: bool,
}

impl Root {
    /// The root context `id` of a new VM.
    pub(crate) fn new(id: u32) -> Self {
        let shared = Shared {
            plugin: None,
            active: Rc::new(RefCell::new(None)),
            seq: Rc::new(Cell::new(0)),
            routing: Rc::new(RefCell::new(RoutingCell::default())),
            rng: Rc::new(Cell::new(0)),
            usage_queue: Rc::new(Cell::new(None)),
            outbox: Rc::new(RefCell::new(Outbox::default())),
            metrics: Rc::new(RefCell::new(Metrics::default())),
            keys: Rc::new(RefCell::new(KnownKeys::default())),
            kv: Rc::new(RefCell::new(ferrogate_core::kv::KvIndex::default())),
            lease_asks: Rc::default(),
            flow_waiters: Rc::default(),
            flow_waker: Rc::default(),
            lease_holdings: Rc::default(),
        };
        Self {
            id,
            shared,
            sink: UsageSink::default(),
            feed: SnapshotFeed::default(),
            limits: LimitsFeed::default(),
            targets: TargetsFeed::default(),
            kv: KvPoll::default(),
            leases: crate::leases::LeaseFlush::default(),
            kv_ticks: false,
        }
    }
}

impl Root {
    fn sidecar(&self) -> Option<&SidecarSettings> {
        self.shared.plugin.as_deref().and_then(|p| p.sidecar.as_ref())
    }

    /// Whether limits are shared across replicas: `redis:` configured and some limit set.
    fn cross_replica_limits(&self) -> bool {
        self.shared.active.borrow().as_deref().is_some_and(|c| c.redis_url_env.is_some() && c.limit_plans.any)
    }

    /// Builds the balancers of a newly installed configuration (a pointer compare otherwise),
    /// and ticks as often as the KV feed needs when a pool publishes KV events.
    fn refresh_routing(&mut self) {
        let Some(config) = self.shared.active.borrow().clone() else { return };
        self.shared.routing.borrow_mut().for_config(&config);
        if !self.kv_ticks && self.sidecar().is_some() && crate::kv_feed::wanted(&config) {
            self.kv_ticks = true;
            self.set_tick_period(Duration::from_millis(crate::kv_feed::INTERVAL_MS));
        }
    }
}

impl Root {
    /// Sets the queue-depth gauges of every flow-controlled model (one shared-data read each).
    fn flow_depths(&self) {
        let Some(config) = self.shared.active.borrow().clone() else { return };
        let mut metrics = self.shared.metrics.borrow_mut();
        for m in config.models.iter().filter(|m| m.flow.is_some()) {
            metrics.depths(&m.name, &crate::flow_gate::depths(&m.name));
        }
    }
}

impl Context for Root {
    fn on_http_call_response(&mut self, token_id: u32, num_headers: usize, body_size: usize, trailers: usize) {
        // A call a waiting stream started while the root ran it (`flow_wake`): its answer.
        let forwarded = self.shared.flow_waiters.borrow_mut().forwarded(token_id);
        if let Some((ctx, stream)) = forwarded {
            let waiters = &self.shared.flow_waiters;
            flow_wake::run_on(waiters, ctx, &stream, |s| {
                s.on_http_call_response(token_id, num_headers, body_size, trailers)
            });
            flow_wake::back_to(self.id);
            return;
        }
        let status = sidecar_call::answer_status(num_headers);
        let ok = status.is_some_and(|s| (200..300).contains(&s) || s == 304);
        let count = |feed| self.shared.metrics.borrow_mut().sidecar_call(feed, ok);
        if self.leases.is_waiting_for(token_id) {
            count(Feed::Leases);
            let body = sidecar_call::ok_body(status, body_size);
            let now_ms = crate::raw::now_nanos() / 1_000_000;
            self.leases.on_response(status, body.as_deref(), now_ms, &self.shared);
            return;
        }
        if self.limits.is_waiting_for(token_id) {
            count(Feed::Limits);
            let body = sidecar_call::ok_body(status, body_size);
            let now_ms = crate::raw::now_nanos() / 1_000_000;
            self.limits.on_response(status, body.as_deref(), now_ms);
            return;
        }
        if self.feed.is_waiting_for(token_id) {
            count(Feed::Snapshot);
            let body = sidecar_call::ok_body(status, body_size);
            self.feed.on_response(token_id, status, body, &self.shared.active);
            self.refresh_routing();
            return;
        }
        if self.kv.is_waiting_for(token_id) {
            count(Feed::Kv);
            let body = sidecar_call::ok_body(status, body_size);
            self.kv.on_response(status, body, &self.shared.kv);
            return;
        }
        if self.targets.is_waiting_for(token_id) {
            count(Feed::Targets);
            let body = sidecar_call::ok_body(status, body_size);
            self.targets.on_response(status, body, &self.shared.routing);
            return;
        }
        // A full batch may be waiting behind the one just acknowledged.
        let ours = self.sink.on_response(token_id, status);
        if ours {
            count(Feed::Usage);
        }
        if ours && self.sink.has_full_batch() {
            let sidecar = self.sidecar().cloned();
            self.sink.send(sidecar.as_ref());
        }
    }
}

impl RootContext for Root {
    fn on_configure(&mut self, _plugin_configuration_size: usize) -> bool {
        let Some(bytes) = self.get_plugin_configuration() else {
            log::error!("no plugin configuration (expected JSON with \"config\" or \"sidecar_cluster\")");
            return false;
        };
        match PluginConfig::from_json_slice(&bytes) {
            Ok(mut plugin) => {
                log_loaded(&plugin);
                // The usage queue is drained (failed batches retried), counters flushed, the
                // snapshot and the limits feed polled on this tick: with a sidecar, often
                // enough for the limits feed (usage reaches the other replicas that much sooner).
                let tick = plugin.sidecar.as_ref().map(|s| {
                    let poll = Duration::from_millis(s.poll_interval_ms.max(100));
                    poll.min(Duration::from_millis(crate::limits_feed::INTERVAL_MS))
                });
                self.set_tick_period(tick.map_or(FLUSH_PERIOD, |p| p.min(FLUSH_PERIOD)));
                *self.shared.active.borrow_mut() = plugin.config.take().map(Rc::new);
                self.shared.plugin = Some(Rc::new(plugin));
                self.shared.usage_queue.set(self.sink.register());
                if self.shared.flow_waker.get() == 0 {
                    self.shared.flow_waker.set(crate::flow_gate::register_waker());
                }
                self.refresh_routing();
                true
            }
            Err(PluginConfigError::Invalid(e)) => {
                for problem in &e.problems {
                    log::error!("plugin configuration: {problem}");
                }
                false
            }
            Err(e) => {
                log::error!("{e}");
                false
            }
        }
    }

    fn on_queue_ready(&mut self, queue_id: u32) {
        if queue_id != 0 && queue_id == self.shared.flow_waker.get() {
            flow_wake::deliver(&self.shared.flow_waiters, queue_id, self.id);
            return;
        }
        let sidecar = self.sidecar().cloned();
        self.sink.on_queue_ready(sidecar.as_ref());
    }

    fn on_tick(&mut self) {
        if let Some(queue) = self.shared.usage_queue.get() {
            self.shared.outbox.borrow_mut().post(queue);
        }
        let sidecar = self.sidecar().cloned();
        if let Some(sidecar) = &sidecar {
            let now_ns = crate::raw::now_nanos();
            self.feed.on_tick(now_ns, sidecar, &self.shared.active);
            self.refresh_routing();
            self.targets.on_tick(now_ns, sidecar, &self.shared.routing);
            if self.cross_replica_limits() {
                self.limits.on_tick(now_ns, sidecar);
                crate::leases::sweep(now_ns / 1_000_000, &self.shared);
                self.leases.on_tick(sidecar, &self.shared.lease_asks);
            }
            if self.shared.active.borrow().as_deref().is_some_and(crate::kv_feed::wanted) {
                self.kv.on_tick(sidecar, &self.shared.kv);
            }
        }
        self.sink.on_tick(sidecar.as_ref());
        self.flow_depths();
        flow_wake::recheck(&self.shared.flow_waiters, self.id);
        let mut metrics = self.shared.metrics.borrow_mut();
        if let Some(version) = self.feed.version() {
            metrics.snapshot(version);
        }
        metrics.flush();
    }

    fn create_http_context(&self, context_id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(StreamHandle::new(context_id, self.shared.clone())))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

fn log_loaded(plugin: &PluginConfig) {
    let Some(config) = &plugin.config else {
        log::info!("configured without inline config; waiting for a sidecar snapshot");
        return;
    };
    log::info!(
        "configured: {} providers, {} models, {} aliases, {} keys, body limit {} bytes",
        config.providers.len(),
        config.models.len(),
        config.aliases.len(),
        config.keys.len(),
        plugin.max_body_bytes
    );
    if config.keys.is_empty() && first_to_warn() {
        log::warn!("no keys configured: the gateway is OPEN to any caller (add keys to require one)");
    }
}

/// True for exactly one VM of the process: the warning is claimed in shared data with CAS.
fn first_to_warn() -> bool {
    match hostcalls::get_shared_data(OPEN_WARNED) {
        Ok((Some(_), _)) => false,
        Ok((None, cas)) => hostcalls::set_shared_data(OPEN_WARNED, Some(b"1"), cas).is_ok(),
        Err(_) => true,
    }
}
