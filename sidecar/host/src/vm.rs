//! One VM: a wasmtime Store + instance of the plugin (one Envoy worker's thread-local
//! clone). Runs every guest callback under the epoch deadline, turns traps into "VM
//! failed", and serves the root-level entry points (callout responses, ticks, queues).
//! The per-stream entry points live in `crate::stream`.

use crate::runtime::{RuntimeInner, EPOCH_TICK};
use crate::state::{HostState, Phase};
use crate::{HostError, HttpCallRequest, HttpCallResponse, LogLevel, StreamId};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wasmtime::{Instance, Store, StoreLimitsBuilder, TypedFunc, WasmParams, WasmResults};

type Cb1 = TypedFunc<i32, ()>;
type Cb2 = TypedFunc<(i32, i32), ()>;
type Cb2R = TypedFunc<(i32, i32), i32>;
type Cb3R = TypedFunc<(i32, i32, i32), i32>;
type Cb5 = TypedFunc<(i32, i32, i32, i32, i32), ()>;

/// `proxy_get_status` code after a reset callout (`WasmResult::BrokenConnection`).
const BROKEN_CONNECTION: u32 = 11;

/// The module's callback exports (absent ones are simply not called).
pub(crate) struct Guest {
    pub(crate) context_create: Option<Cb2>,
    vm_start: Option<Cb2R>,
    configure: Option<Cb2R>,
    request_headers: Option<Cb3R>,
    request_body: Option<Cb3R>,
    request_trailers: Option<Cb2R>,
    response_headers: Option<Cb3R>,
    response_body: Option<Cb3R>,
    response_trailers: Option<Cb2R>,
    http_call_response: Option<Cb5>,
    tick: Option<Cb1>,
    queue_ready: Option<Cb2>,
    pub(crate) done: Option<TypedFunc<i32, i32>>,
    pub(crate) log: Option<Cb1>,
    pub(crate) delete: Option<Cb1>,
}

impl Guest {
    fn load(store: &mut Store<HostState>, i: &Instance) -> Self {
        let mut f2r = |n: &str| i.get_typed_func::<(i32, i32), i32>(&mut *store, n).ok();
        let (vm_start, configure) = (f2r("proxy_on_vm_start"), f2r("proxy_on_configure"));
        let (request_trailers, response_trailers) =
            (f2r("proxy_on_request_trailers"), f2r("proxy_on_response_trailers"));
        let mut f3r = |n: &str| i.get_typed_func::<(i32, i32, i32), i32>(&mut *store, n).ok();
        let (request_headers, request_body) = (f3r("proxy_on_request_headers"), f3r("proxy_on_request_body"));
        let (response_headers, response_body) = (f3r("proxy_on_response_headers"), f3r("proxy_on_response_body"));
        let mut f1 = |n: &str| i.get_typed_func::<i32, ()>(&mut *store, n).ok();
        let (tick, log, delete) = (f1("proxy_on_tick"), f1("proxy_on_log"), f1("proxy_on_delete"));
        let mut f2 = |n: &str| i.get_typed_func::<(i32, i32), ()>(&mut *store, n).ok();
        let (context_create, queue_ready) = (f2("proxy_on_context_create"), f2("proxy_on_queue_ready"));
        Self {
            context_create,
            vm_start,
            configure,
            request_headers,
            request_body,
            request_trailers,
            response_headers,
            response_body,
            response_trailers,
            http_call_response: i.get_typed_func(&mut *store, "proxy_on_http_call_response").ok(),
            tick,
            queue_ready,
            done: i.get_typed_func(&mut *store, "proxy_on_done").ok(),
            log,
            delete,
        }
    }

    /// `proxy_on_{request,response}_headers`.
    pub(crate) fn headers(&self, request: bool) -> Option<&Cb3R> {
        (if request { &self.request_headers } else { &self.response_headers }).as_ref()
    }

    /// `proxy_on_{request,response}_body`.
    pub(crate) fn body(&self, request: bool) -> Option<&Cb3R> {
        (if request { &self.request_body } else { &self.response_body }).as_ref()
    }

    /// `proxy_on_{request,response}_trailers`.
    pub(crate) fn trailers(&self, request: bool) -> Option<&Cb2R> {
        (if request { &self.request_trailers } else { &self.response_trailers }).as_ref()
    }
}

/// One VM (one Envoy worker's thread-local clone). Send, not Sync; one thread drives it.
pub struct Vm {
    pub(crate) store: Store<HostState>,
    /// Shared so a callback can be called while `self` is borrowed mutably, without cloning
    /// the typed function (a clone re-registers its type: measurable per request).
    pub(crate) guest: Arc<Guest>,
    worker: usize,
    /// Trap text once the VM failed; no guest code runs afterwards.
    pub(crate) failed: Option<String>,
    deadline_ticks: u64,
}

impl Vm {
    /// Instantiates and starts the plugin (see [`crate::Runtime::new_vm`]).
    pub(crate) fn start(rt: Arc<RuntimeInner>, worker: usize) -> Result<Vm, HostError> {
        let uid = rt.next_vm_uid();
        let limits = StoreLimitsBuilder::new().memory_size(rt.spec.max_memory_bytes).build();
        let deadline_ticks = (rt.spec.callback_deadline_ms / EPOCH_TICK.as_millis() as u64).max(1);
        let mut store = Store::new(&rt.engine, HostState::new(rt.clone(), uid, limits));
        store.limiter(|s| &mut s.limits);
        store.set_epoch_deadline(deadline_ticks);
        let instance = rt.pre.instantiate(&mut store).map_err(|e| HostError::Module(format!("{e:#}")))?;
        let init = instance
            .get_typed_func::<(), ()>(&mut store, "_initialize")
            .or_else(|_| instance.get_typed_func::<(), ()>(&mut store, "_start"));
        if let Ok(init) = init {
            init.call(&mut store, ()).map_err(|e| HostError::Trap(format!("{e:#}")))?;
        }
        let guest = Guest::load(&mut store, &instance);
        let memory = instance.get_memory(&mut store, "memory");
        let alloc = instance
            .get_typed_func::<i32, i32>(&mut store, "proxy_on_memory_allocate")
            .or_else(|_| instance.get_typed_func::<i32, i32>(&mut store, "malloc"))
            .ok()
            .map(Arc::new);
        store.data_mut().exports = crate::state::GuestExports { memory, alloc };
        rt.shared.add_vm(uid);
        let mut vm = Vm { store, guest: Arc::new(guest), worker, failed: None, deadline_ticks };
        vm.start_root()?;
        Ok(vm)
    }

    /// Root context 1: create, on_vm_start(vm config len), on_configure(plugin config len).
    fn start_root(&mut self) -> Result<(), HostError> {
        let root = self.root();
        let spec = self.store.data().rt.spec.clone();
        let g = Arc::clone(&self.guest);
        let create = g.context_create.as_ref();
        self.call(create, root, (root as i32, 0)).map_err(HostError::Trap)?;
        self.store.data_mut().phase = Phase::VmStart;
        let g = Arc::clone(&self.guest);
        let f = g.vm_start.as_ref();
        let started = self.call(f, root, (root as i32, len_i32(spec.vm_configuration.len())));
        self.store.data_mut().phase = Phase::Configure;
        let configured = match started {
            Ok(Some(0)) => Ok(Some(0)),
            Ok(_) => {
                let g = Arc::clone(&self.guest);
                let f = g.configure.as_ref();
                self.call(f, root, (root as i32, len_i32(spec.configuration.len())))
            }
            Err(e) => Err(e),
        };
        self.store.data_mut().phase = Phase::Other;
        match configured.map_err(HostError::Trap)? {
            Some(0) => Err(HostError::ConfigRejected),
            _ => Ok(()),
        }
    }

    pub(crate) fn root(&self) -> u32 {
        self.store.data().root_id
    }

    /// Runs one guest callback on behalf of context `ctx` under the epoch deadline.
    /// `Ok(None)` = the module does not export it. A trap marks the VM failed (and fails
    /// its streams) and returns the trap text.
    pub(crate) fn call<P: WasmParams, R: WasmResults>(
        &mut self,
        f: Option<&TypedFunc<P, R>>,
        ctx: u32,
        args: P,
    ) -> Result<Option<R>, String> {
        if let Some(reason) = &self.failed {
            return Err(reason.clone());
        }
        let Some(f) = f else {
            return Ok(None);
        };
        self.store.set_epoch_deadline(self.deadline_ticks);
        let state = self.store.data_mut();
        (state.active, state.effective, state.stop_next) = (ctx, None, false);
        let started = Instant::now();
        let result = f.call(&mut self.store, args);
        let state = self.store.data_mut();
        (state.active, state.effective) = (0, None);
        if let Some(s) = state.streams.get_mut(&ctx) {
            s.cpu += started.elapsed();
        }
        result.map(Some).map_err(|e| {
            let reason = format!("{e:#}");
            self.fail(&reason);
            reason
        })
    }

    /// Marks the VM failed (Envoy `FailState::RuntimeError`) and fails every live stream.
    fn fail(&mut self, reason: &str) {
        log::error!("wasm vm {} failed: {reason}", self.worker);
        self.failed = Some(reason.to_string());
        for s in self.store.data_mut().streams.values_mut() {
            crate::reply::fail_stream(s);
        }
    }

    /// The worker index this VM was created for.
    pub fn worker(&self) -> usize {
        self.worker
    }

    /// A trap happened: the caller should build a new VM (fail-reload).
    pub fn is_failed(&self) -> bool {
        self.failed.is_some()
    }

    /// HTTP callouts issued by the guest since the last call.
    pub fn take_http_calls(&mut self) -> Vec<HttpCallRequest> {
        std::mem::take(&mut self.store.data_mut().calls.outbox)
    }

    /// Delivers the answer to callout `token` (`None` = reset) via
    /// `proxy_on_http_call_response` on the root context; the response maps and body are
    /// readable only during that callback. Unknown tokens are ignored (the SDK would panic).
    pub fn http_call_response(&mut self, token: u32, response: Option<HttpCallResponse>) -> Result<(), HostError> {
        if self.failed.is_some() {
            return Err(HostError::VmFailed);
        }
        let state = self.store.data_mut();
        if state.calls.pending.remove(&token).is_none() {
            log::warn!("http call response for unknown token {token} ignored");
            return Ok(());
        }
        let counts = response
            .as_ref()
            .map_or((0, 0, 0), |r| (len_i32(r.headers.len()), len_i32(r.body.len()), len_i32(r.trailers.len())));
        state.status = match response {
            Some(_) => (0, Vec::new()),
            None => (BROKEN_CONNECTION, b"reset".to_vec()),
        };
        state.call_response = response;
        let root = self.root();
        let g = Arc::clone(&self.guest);
        let f = g.http_call_response.as_ref();
        let r = self.call(f, root, (root as i32, token as i32, counts.0, counts.1, counts.2));
        self.store.data_mut().call_response = None;
        self.settle(None);
        r.map(|_| ()).map_err(HostError::Trap)
    }

    /// Current tick period of the root context (None = disabled). The caller runs
    /// [`Vm::on_tick`] on schedule (first tick one period after it was set).
    pub fn tick_period(&self) -> Option<Duration> {
        self.store.data().tick_period
    }

    /// Runs `proxy_on_tick` on the root context.
    pub fn on_tick(&mut self) -> Result<(), HostError> {
        if self.failed.is_some() {
            return Err(HostError::VmFailed);
        }
        let root = self.root();
        let g = Arc::clone(&self.guest);
        let f = g.tick.as_ref();
        let r = self.call(f, root, root as i32);
        self.settle(None);
        r.map(|_| ()).map_err(HostError::Trap)
    }

    /// Delivers pending `proxy_on_queue_ready` notifications targeted at this VM (enqueue
    /// from any VM posts to the last registrant). Returns how many were delivered.
    pub fn deliver_queue_ready(&mut self) -> Result<usize, HostError> {
        if self.failed.is_some() {
            return Err(HostError::VmFailed);
        }
        let state = self.store.data();
        let pending = state.rt.shared.take_notifications(state.vm_uid);
        let g = Arc::clone(&self.guest);
        let f = g.queue_ready.as_ref();
        let mut delivered = 0;
        for (root, token) in pending {
            let r = self.call(f, root, (root as i32, token as i32));
            if let Err(e) = r {
                self.settle(None);
                return Err(HostError::Trap(e));
            }
            delivered += 1;
        }
        self.settle(None);
        Ok(delivered)
    }

    /// Sets the callback run when another VM (or this one) enqueues for this VM.
    pub fn set_queue_waker(&mut self, wake: Box<dyn Fn() + Send + Sync>) {
        let state = self.store.data();
        state.rt.shared.set_waker(state.vm_uid, Arc::from(wake));
    }

    /// Log lines the guest wrote (level, message), drained. Also forwarded to the `log`
    /// crate with prefix "wasm log <plugin name> <root_id> <vm_id>:".
    pub fn take_logs(&mut self) -> Vec<(LogLevel, String)> {
        std::mem::take(&mut self.store.data_mut().logs)
    }

    /// Per-stream filter CPU time used so far (sum of guest call durations).
    pub fn stream_cpu_time(&self, s: StreamId) -> Duration {
        self.store.data().streams.get(&s).map_or(Duration::ZERO, |st| st.cpu)
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        let state = self.store.data();
        state.rt.shared.remove_vm(state.vm_uid);
    }
}

/// Sizes the ABI passes as i32 (wasm32 `usize`).
pub(crate) fn len_i32(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}
