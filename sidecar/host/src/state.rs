//! Per-Store host state: everything a hostcall may read or change while the guest runs
//! (current/effective context, per-stream header maps and body buffers, deferred stream
//! actions, outgoing callouts, logs, tick period, metric ids). No globals: each VM owns one.

use crate::metrics::MetricIds;
use crate::runtime::RuntimeInner;
use crate::{Headers, HttpCallRequest, HttpCallResponse, LogLevel, StreamEvent, StreamInfo};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use wasmtime::StoreLimits;

/// ABI status codes (`proxy_status_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub(crate) enum Status {
    Ok = 0,
    NotFound = 1,
    BadArgument = 2,
    InvalidMemoryAccess = 6,
    Empty = 7,
    CasMismatch = 8,
    InternalFailure = 10,
    Unimplemented = 12,
}

/// Which side of the stream an operation is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    Request,
    Response,
}

/// Which root-level callback is running (decides which buffers exist).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    Other,
    VmStart,
    Configure,
}

/// How a filter holds headers it paused on (Envoy `FilterHeadersStatus`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hold {
    /// Not held: not received yet, or already released.
    None,
    /// StopIteration (mode D): data still reaches this filter.
    Iteration,
    /// StopAllIteration (mode C): data is buffered by the HCM, this filter sees nothing.
    All,
}

/// Stream operations a hostcall requests; Envoy runs them after the VM call returns.
#[derive(Debug)]
pub(crate) enum Deferred {
    Continue(Side),
    Close,
    LocalReply(LocalReply),
}

/// A `proxy_send_local_response` request.
#[derive(Debug, Clone)]
pub(crate) struct LocalReply {
    pub(crate) status: u32,
    pub(crate) details: String,
    pub(crate) body: Vec<u8>,
    pub(crate) headers: Headers,
}

/// One direction (request = decoder side, response = encoder side) of a stream.
#[derive(Debug)]
pub(crate) struct Direction {
    /// Headers as received (and mutated); `None` before they arrive.
    pub(crate) headers: Option<Headers>,
    /// Envoy still holds the map pointer (it is nulled on Continue / continue_stream).
    pub(crate) headers_live: bool,
    pub(crate) hold: Hold,
    pub(crate) headers_released: bool,
    /// Headers arrived with end_of_stream (no body, no trailers).
    pub(crate) headers_eos: bool,
    pub(crate) trailers: Option<Headers>,
    pub(crate) trailers_live: bool,
    pub(crate) trailers_held: bool,
    /// Trailers the HCM holds that this filter has not seen (stopped-all).
    pub(crate) trailers_unseen: bool,
    /// The chunk of the running body callback (Envoy's `request_body_buffer_`).
    pub(crate) chunk: Option<Vec<u8>>,
    /// Body held by the filter manager (buffered or stopped-all data).
    pub(crate) buffer: Option<Vec<u8>>,
    /// The last body callback returned Pause: the view is the whole buffer.
    pub(crate) buffering: bool,
    /// A body/trailers callback stopped iteration; the next Continue releases held data.
    pub(crate) data_stopped: bool,
    /// The peer finished sending (eos on headers/data, or trailers).
    pub(crate) end: bool,
    /// end_of_stream has been passed on (to the router or the client).
    pub(crate) eos_emitted: bool,
}

impl Default for Direction {
    fn default() -> Self {
        Self {
            headers: None,
            headers_live: false,
            hold: Hold::None,
            headers_released: false,
            headers_eos: false,
            trailers: None,
            trailers_live: false,
            trailers_held: false,
            trailers_unseen: false,
            chunk: None,
            buffer: None,
            buffering: false,
            data_stopped: false,
            end: false,
            eos_emitted: false,
        }
    }
}

impl Direction {
    /// Envoy's body view: the whole buffer while buffering, else the current chunk.
    pub(crate) fn body_view(&mut self) -> Option<&mut Vec<u8>> {
        if self.buffering && self.buffer.is_some() {
            self.buffer.as_mut()
        } else {
            self.chunk.as_mut()
        }
    }

    /// Nulls the map pointers (Continue / continue_stream).
    pub(crate) fn null_maps(&mut self) {
        self.headers_live = false;
        self.trailers_live = false;
    }
}

/// Everything the host keeps about one HTTP stream context.
pub(crate) struct StreamState {
    pub(crate) info: StreamInfo,
    pub(crate) started: SystemTime,
    /// `proxy_on_context_create` was sent.
    pub(crate) created: bool,
    pub(crate) req: Direction,
    pub(crate) resp: Direction,
    pub(crate) deferred: Vec<Deferred>,
    /// A local reply replaced the upstream: request inputs and upstream response are ignored.
    pub(crate) local_reply: bool,
    /// Counts local replies, so a reply replaced by a newer one stops half-way.
    pub(crate) reply_gen: u32,
    /// Response headers went to the client.
    pub(crate) response_started: bool,
    /// Reset or failed: nothing more flows.
    pub(crate) done: bool,
    pub(crate) events: Vec<StreamEvent>,
    /// Events were queued since the driver last looked (for waking).
    pub(crate) dirty: bool,
    pub(crate) wake: Option<Box<dyn Fn() + Send>>,
    /// Filter state written by `proxy_set_property`, keyed by the raw path.
    pub(crate) filter_state: HashMap<Vec<u8>, Vec<u8>>,
    pub(crate) cpu: Duration,
    /// `on_log` is running: maps are readable again (access-log copies).
    pub(crate) in_log: bool,
    /// Envoy's `response.code_details` once the host set one (an upstream reset, say).
    pub(crate) code_details: Option<String>,
}

impl StreamState {
    pub(crate) fn new(info: StreamInfo, wake: Option<Box<dyn Fn() + Send>>) -> Self {
        Self {
            info,
            started: SystemTime::now(),
            created: false,
            req: Direction::default(),
            resp: Direction::default(),
            deferred: Vec::new(),
            local_reply: false,
            reply_gen: 0,
            response_started: false,
            done: false,
            code_details: None,
            events: Vec::new(),
            dirty: false,
            wake,
            filter_state: HashMap::new(),
            cpu: Duration::ZERO,
            in_log: false,
        }
    }

    pub(crate) fn dir(&mut self, side: Side) -> &mut Direction {
        match side {
            Side::Request => &mut self.req,
            Side::Response => &mut self.resp,
        }
    }

    pub(crate) fn emit(&mut self, event: StreamEvent) {
        self.events.push(event);
        self.dirty = true;
    }
}

/// Outgoing HTTP callouts of one VM.
#[derive(Default)]
pub(crate) struct Calls {
    pub(crate) last_token: u32,
    /// token → context that issued it (to fail/wake the right stream).
    pub(crate) pending: HashMap<u32, u32>,
    pub(crate) outbox: Vec<HttpCallRequest>,
}

/// The data of one wasmtime `Store`: one VM.
pub(crate) struct HostState {
    pub(crate) limits: StoreLimits,
    pub(crate) rt: Arc<RuntimeInner>,
    pub(crate) vm_uid: u64,
    pub(crate) root_id: u32,
    pub(crate) next_context_id: u32,
    /// Context of the running callback (0 = none).
    pub(crate) active: u32,
    /// `proxy_set_effective_context` target for the rest of the running callback.
    pub(crate) effective: Option<u32>,
    pub(crate) phase: Phase,
    /// A local reply was requested in the running VM call: the callback's return value is
    /// overridden by a forced stop (Envoy keeps this flag per VM and per call too).
    pub(crate) stop_next: bool,
    pub(crate) streams: HashMap<u32, StreamState, ContextIds>,
    /// The callout response, readable only during `on_http_call_response`.
    pub(crate) call_response: Option<HttpCallResponse>,
    pub(crate) calls: Calls,
    /// `proxy_get_status` answer (code, message).
    pub(crate) status: (u32, Vec<u8>),
    pub(crate) logs: Vec<(LogLevel, String)>,
    pub(crate) tick_period: Option<Duration>,
    pub(crate) metric_ids: MetricIds,
    /// The guest's linear memory and allocator, resolved once after instantiation: looking
    /// exports up by name on every hostcall showed up in profiles.
    pub(crate) exports: GuestExports,
}

/// Export handles the imports need on every call.
#[derive(Clone, Default)]
pub(crate) struct GuestExports {
    /// `memory`.
    pub(crate) memory: Option<wasmtime::Memory>,
    /// `proxy_on_memory_allocate`, else `malloc`; shared because a clone of the typed function
    /// itself is costly.
    pub(crate) alloc: Option<std::sync::Arc<wasmtime::TypedFunc<i32, i32>>>,
}

impl HostState {
    pub(crate) fn new(rt: Arc<RuntimeInner>, vm_uid: u64, limits: StoreLimits) -> Self {
        Self {
            limits,
            rt,
            vm_uid,
            root_id: 1,
            next_context_id: 2,
            active: 0,
            effective: None,
            phase: Phase::Other,
            stop_next: false,
            streams: HashMap::default(),
            call_response: None,
            calls: Calls::default(),
            status: (0, Vec::new()),
            logs: Vec::new(),
            tick_period: None,
            exports: GuestExports::default(),
            metric_ids: MetricIds::default(),
        }
    }

    /// The context hostcalls act on (`contextOrEffectiveContext()`).
    pub(crate) fn context(&self) -> u32 {
        self.effective.unwrap_or(self.active)
    }

    /// The stream hostcalls act on, if the context is a stream.
    pub(crate) fn stream(&mut self) -> Option<&mut StreamState> {
        let id = self.context();
        self.streams.get_mut(&id)
    }

    /// Records a deferred action on the current stream; root contexts have none.
    pub(crate) fn defer(&mut self, action: Deferred) {
        if let Some(s) = self.stream() {
            s.deferred.push(action);
        }
    }
}

/// Hashing for context-id keys: nearly every hostcall looks up the current stream, and SipHash
/// (DoS-resistant, for keys an attacker picks) is wasted on ids the host hands out itself.
pub(crate) type ContextIds = BuildHasherDefault<ContextIdHasher>;

/// Fibonacci hashing of one integer key (spreads sequential ids over the table's bits).
#[derive(Default)]
pub(crate) struct ContextIdHasher(u64);

impl Hasher for ContextIdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Not used by `u32` keys; kept correct for any other key type all the same.
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = u64::from(n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}
