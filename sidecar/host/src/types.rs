//! Public value types of the host API: plugin settings, connection facts, the events a
//! stream lets through, HTTP callouts and log levels.

use crate::Headers;
use std::collections::HashSet;
use std::net::SocketAddr;

/// How the plugin is configured (mirrors Envoy's `PluginConfig` + listener settings).
#[derive(Clone, Debug)]
pub struct PluginSpec {
    /// Property `plugin_name`, log prefix.
    pub name: String,
    /// Property `plugin_root_id`.
    pub root_id: String,
    /// Shared-data / queue namespace, property `plugin_vm_id`.
    pub vm_id: String,
    /// `on_configure` buffer (PluginConfiguration, type 7).
    pub configuration: Vec<u8>,
    /// `on_vm_start` buffer (VmConfiguration, type 6).
    pub vm_configuration: Vec<u8>,
    /// Envoy >=1.35 flag: a Pause from headers is StopIteration (mode D, true) instead of
    /// StopAllIterationAndWatermark (mode C, false, Envoy's default).
    pub allow_on_headers_stop_iteration: bool,
    /// Per-VM linear memory cap (default 256 MiB).
    pub max_memory_bytes: usize,
    /// Runaway guard per guest call via epoch interruption (default 1000).
    pub callback_deadline_ms: u64,
    /// Envoy `per_connection_buffer_limit_bytes` (default 1 MiB).
    pub body_buffer_limit: usize,
    /// Known cluster names for `proxy_http_call`; `None` = any.
    pub clusters: Option<HashSet<String>>,
}

impl Default for PluginSpec {
    fn default() -> Self {
        Self {
            name: String::new(),
            root_id: String::new(),
            vm_id: String::new(),
            configuration: Vec::new(),
            vm_configuration: Vec::new(),
            allow_on_headers_stop_iteration: false,
            max_memory_bytes: 256 << 20,
            callback_deadline_ms: 1000,
            body_buffer_limit: 1 << 20,
            clusters: None,
        }
    }
}

/// Connection facts for properties (`source.address` etc.).
#[derive(Clone, Debug, Default)]
pub struct StreamInfo {
    /// Downstream peer address.
    pub source_address: Option<SocketAddr>,
    /// Local (listener-side) address.
    pub destination_address: Option<SocketAddr>,
    /// Downstream connection id.
    pub connection_id: u64,
    /// "HTTP/1.1" | "HTTP/2".
    pub protocol: String,
}

/// Id of one HTTP stream inside a [`crate::Vm`] (its proxy-wasm context id).
pub type StreamId = u32;

/// What the filter chain lets through towards the upstream (router) or the client.
#[derive(Debug, PartialEq)]
pub enum StreamEvent {
    /// Request headers released to the router: route/cluster are decided from these NOW.
    RequestHeaders {
        /// The (possibly mutated) request headers.
        headers: Headers,
        /// No body follows.
        end_of_stream: bool,
    },
    /// Request body bytes released to the router.
    RequestData {
        /// Bytes to send upstream.
        data: Vec<u8>,
        /// Last request bytes.
        end_of_stream: bool,
    },
    /// Request trailers released to the router.
    RequestTrailers(Headers),
    /// Response headers released towards the client (may come from a local reply that
    /// already passed through this filter's on_response_* callbacks, like Envoy's encoder chain).
    ResponseHeaders {
        /// The (possibly mutated) response headers, `:status` first.
        headers: Headers,
        /// No body follows.
        end_of_stream: bool,
    },
    /// Response body bytes released towards the client.
    ResponseData {
        /// Bytes to send downstream.
        data: Vec<u8>,
        /// Last response bytes.
        end_of_stream: bool,
    },
    /// Response trailers released towards the client.
    ResponseTrailers(Headers),
    /// The upstream request (if started) must be abandoned: a local reply replaces it.
    /// Emitted before the local reply's ResponseHeaders. `details` e.g. "wasm_fail_stream",
    /// "request_payload_too_large".
    AbortUpstream {
        /// Envoy response-code details.
        details: String,
    },
    /// Reset the downstream stream (close_stream, or failure after response headers were sent).
    Reset {
        /// Envoy response-code details.
        details: String,
    },
}

/// An outgoing dispatch_http_call the caller must perform, then answer with
/// [`crate::Vm::http_call_response`].
#[derive(Debug, Clone)]
pub struct HttpCallRequest {
    /// Token the answer must carry (4, 8, 12, … per VM).
    pub token: u32,
    /// Envoy cluster name.
    pub cluster: String,
    /// Includes `:method`, `:path`, `:authority`.
    pub headers: Headers,
    /// Request body (`content-length` already set when non-empty).
    pub body: Vec<u8>,
    /// Request trailers.
    pub trailers: Headers,
    /// 0 = none.
    pub timeout_ms: u32,
}

/// The answer to an [`HttpCallRequest`]. Timeouts -> status 504 body "upstream request
/// timeout"; connect errors -> 503 (Envoy's async client does that); `None` at the call
/// site = reset (`num_headers == 0`).
#[derive(Debug, Clone, Default)]
pub struct HttpCallResponse {
    /// Response headers including `:status`.
    pub headers: Headers,
    /// Response body.
    pub body: Vec<u8>,
    /// Response trailers.
    pub trailers: Headers,
}

/// proxy-wasm log levels (`proxy_log` level 0..=5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    /// 0
    Trace,
    /// 1
    Debug,
    /// 2
    Info,
    /// 3
    Warn,
    /// 4
    Error,
    /// 5
    Critical,
}

impl LogLevel {
    /// Maps the ABI level number; out-of-range values count as critical.
    pub(crate) fn from_abi(level: i32) -> Self {
        match level {
            0 => Self::Trace,
            1 => Self::Debug,
            2 => Self::Info,
            3 => Self::Warn,
            4 => Self::Error,
            _ => Self::Critical,
        }
    }

    /// The `log` crate level used when forwarding guest lines.
    pub(crate) fn to_log(self) -> log::Level {
        match self {
            Self::Trace => log::Level::Trace,
            Self::Debug => log::Level::Debug,
            Self::Info => log::Level::Info,
            Self::Warn => log::Level::Warn,
            Self::Error | Self::Critical => log::Level::Error,
        }
    }
}
