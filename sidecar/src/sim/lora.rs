//! The simulated engine's LoRA adapters (`--max-loras N`), so routing tests can tell whether a
//! request landed where its adapter was already loaded.
//!
//! Like vLLM with `--enable-lora --max-loras N`: a request whose model is not one of the base
//! models (`--model`) names an adapter, and any name is accepted as one (served by the first
//! base model). At most N adapters are loaded, least recently used out first; a request for
//! one not loaded loads it first (taking `--lora-load-ms`), which its answer reports as
//! `x-sim-lora-load: 1` (`0` when the adapter was loaded already) and `sim:lora_loads_total`
//! counts. `/metrics` carries vLLM's `vllm:lora_requests_info` gauge: `max_lora` and the
//! loaded adapters as `running_lora_adapters` (most recent first; `waiting_lora_adapters` is
//! empty), valued at the Unix time of the latest change as vLLM does. Without `--max-loras`
//! the sim serves its base models only, as vLLM without LoRA.
//!
//! The residency is decided in a middleware on the inference routes, inside fault injection
//! (a request refused with a simulated 429 loads nothing): it reads the model from the path
//! (Gemini) or the body's `model` field, then hands the request on unchanged.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;

use super::SimState;

/// Response header: `1` when the request's adapter had to be loaded, `0` when it was resident.
pub const LORA_LOAD_HEADER: &str = "x-sim-lora-load";

/// Largest body read to find the model (bigger ones pass on without an adapter decision).
const MAX_BODY: usize = 64 << 20;

/// The loaded adapters of one sim instance.
#[derive(Debug)]
pub struct Adapters {
    max: usize,
    load_delay: Duration,
    state: Mutex<Loaded>,
    loads: AtomicU64,
}

#[derive(Debug, Default)]
struct Loaded {
    /// Most recent first.
    names: Vec<String>,
    /// Unix seconds of the latest change (the gauge's value).
    changed_at: f64,
}

impl Adapters {
    /// At most `max` (≥ 1) adapters loaded; loading one takes `load_delay`.
    pub fn new(max: u32, load_delay: Duration) -> Self {
        let state = Loaded { names: Vec::new(), changed_at: unix_seconds() };
        Self { max: (max as usize).max(1), load_delay, state: Mutex::new(state), loads: AtomicU64::new(0) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Loaded> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Serves a request for `adapter`: it becomes the most recent; true when it had to be
    /// loaded (the least recent one is evicted when full).
    pub fn serve(&self, adapter: &str) -> bool {
        let mut state = self.lock();
        let loaded = match state.names.iter().position(|n| n == adapter) {
            Some(0) => return false,
            Some(pos) => {
                if let Some(head) = state.names.get_mut(..=pos) {
                    head.rotate_right(1);
                }
                false
            }
            None => {
                state.names.insert(0, adapter.to_owned());
                state.names.truncate(self.max);
                self.loads.fetch_add(1, Ordering::Relaxed);
                true
            }
        };
        state.changed_at = unix_seconds();
        loaded
    }

    /// Adapters loaded, most recent first.
    #[cfg(test)]
    pub fn loaded(&self) -> Vec<String> {
        self.lock().names.clone()
    }

    /// Adapters loaded so far.
    pub fn loads(&self) -> u64 {
        self.loads.load(Ordering::Relaxed)
    }

    /// Appends the LoRA series to a metrics page.
    pub fn render(&self, out: &mut String) {
        let (names, at) = {
            let state = self.lock();
            (state.names.join(","), state.changed_at)
        };
        let name = "vllm:lora_requests_info";
        let _ = writeln!(out, "# HELP {name} Running stats on lora requests.\n# TYPE {name} gauge");
        let (max, running) = (self.max, escape(&names));
        let labels = format!("max_lora=\"{max}\",running_lora_adapters=\"{running}\",waiting_lora_adapters=\"\"");
        let _ = writeln!(out, "{name}{{{labels}}} {at}");
        let name = "sim:lora_loads_total";
        let _ = writeln!(out, "# HELP {name} Adapters loaded (requests for an adapter not loaded).");
        let _ = writeln!(out, "# TYPE {name} counter\n{name} {}", self.loads());
    }
}

fn escape(label: &str) -> String {
    label.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn unix_seconds() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// The model a request names: the path's (Gemini) or the body's `model` field.
fn requested_model(path: &str, body: &[u8]) -> Option<String> {
    if let Some(action) = path.strip_prefix("/v1beta/models/") {
        return action.rsplit_once(':').map(|(model, _)| model.to_owned());
    }
    #[derive(serde::Deserialize)]
    struct Named {
        model: Option<String>,
    }
    serde_json::from_slice::<Named>(body).ok()?.model
}

/// Middleware: loads the request's adapter (when it names one and LoRA is on) and marks the
/// answer with [`LORA_LOAD_HEADER`].
pub async fn layer(State(state): State<Arc<SimState>>, request: Request, next: Next) -> Response {
    let Some(adapters) = &state.adapters else { return next.run(request).await };
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY).await else {
        return next.run(Request::from_parts(parts, Body::empty())).await;
    };
    let adapter = requested_model(parts.uri.path(), &bytes).filter(|m| !state.is_base(m));
    let loaded = adapter.map(|a| adapters.serve(&a));
    if loaded == Some(true) && !adapters.load_delay.is_zero() {
        tokio::time::sleep(adapters.load_delay).await;
    }
    let mut response = next.run(Request::from_parts(parts, Body::from(bytes))).await;
    if let Some(loaded) = loaded {
        let value = HeaderValue::from_static(if loaded { "1" } else { "0" });
        response.headers_mut().insert(LORA_LOAD_HEADER, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adapters_are_kept_least_recently_used_first_out() {
        let a = Adapters::new(2, Duration::ZERO);
        assert!(a.serve("x"));
        assert!(a.serve("y"));
        assert!(!a.serve("x"), "resident");
        assert!(a.serve("z"), "loads, evicting y (least recent)");
        assert_eq!(a.loaded(), ["z", "x"]);
        assert!(a.serve("y"));
        assert_eq!((a.loaded(), a.loads()), (vec!["y".to_string(), "z".to_string()], 4));
        let one = Adapters::new(0, Duration::ZERO); // at least one slot
        assert!(one.serve("x") && !one.serve("x") && one.serve("y"));
        assert_eq!(one.loaded(), ["y"]);
    }

    #[test]
    fn metrics_follow_vllm_and_escape_names() {
        let a = Adapters::new(2, Duration::ZERO);
        a.serve("sql");
        a.serve("q\"x");
        let mut page = String::new();
        a.render(&mut page);
        assert!(page.contains("vllm:lora_requests_info{max_lora=\"2\",running_lora_adapters=\"q\\\"x,sql\",waiting_lora_adapters=\"\"} "), "{page}");
        assert!(page.contains("\nsim:lora_loads_total 2\n"), "{page}");
    }

    /// Status and [`LORA_LOAD_HEADER`] of `path` answering a request for `model`.
    async fn send(app: &axum::Router, path: &str, model: &str) -> (u16, Option<String>) {
        use tower::ServiceExt as _;
        let body = serde_json::json!({"model": model, "max_tokens": 1,
            "messages": [{"role": "user", "content": "hi"}], "contents": [{"role": "user", "parts": [{"text": "hi"}]}]});
        let (body, path) = match path {
            "gemini" => {
                (serde_json::json!({"contents": body["contents"]}), format!("/v1beta/models/{model}:generateContent"))
            }
            "anthropic" => (
                serde_json::json!({"model": model, "max_tokens": 1, "messages": body["messages"]}),
                "/v1/messages".into(),
            ),
            _ => (serde_json::json!({"model": model, "max_tokens": 1, "messages": body["messages"]}), path.into()),
        };
        let request = axum::http::Request::post(path)
            .header("content-type", "application/json")
            .header("anthropic-version", "2023-06-01")
            .body(Body::from(body.to_string()))
            .unwrap();
        let response = app.clone().oneshot(request).await.unwrap();
        let loaded = response.headers().get(LORA_LOAD_HEADER).map(|v| v.to_str().unwrap().to_owned());
        (response.status().as_u16(), loaded)
    }

    #[tokio::test]
    async fn adapters_load_on_demand_in_every_dialect() {
        use super::super::{router, SimArgs};
        let args = SimArgs { models: vec!["base".into()], max_loras: 1, ..SimArgs::default() };
        let app = router(&args);
        let chat = "/v1/chat/completions";
        assert_eq!(send(&app, chat, "sql").await, (200, Some("1".into())));
        assert_eq!(send(&app, chat, "sql").await, (200, Some("0".into())));
        assert_eq!(send(&app, "anthropic", "sql").await, (200, Some("0".into())));
        assert_eq!(send(&app, "gemini", "chat").await, (200, Some("1".into())), "evicts sql");
        assert_eq!(send(&app, chat, "base").await, (200, None), "the base model is no adapter");
        assert_eq!(send(&app, "anthropic", "sql").await, (200, Some("1".into())));
        let request = axum::http::Request::get("/metrics").body(Body::empty()).unwrap();
        let page = tower::ServiceExt::oneshot(app.clone(), request).await.unwrap().into_body();
        let page = String::from_utf8(axum::body::to_bytes(page, 1 << 20).await.unwrap().to_vec()).unwrap();
        assert!(page.contains("vllm:lora_requests_info{max_lora=\"1\",running_lora_adapters=\"sql\""), "{page}");
        assert!(page.contains("\nsim:lora_loads_total 3\n"), "{page}");
        // Without --max-loras an adapter is an unknown model, as in vLLM without LoRA.
        let plain = router(&SimArgs { models: vec!["base".into()], ..SimArgs::default() });
        assert_eq!(send(&plain, chat, "sql").await, (404, None));
    }

    #[test]
    fn the_model_comes_from_the_path_or_the_body() {
        assert_eq!(requested_model("/v1beta/models/sql:generateContent", b"{}").as_deref(), Some("sql"));
        assert_eq!(requested_model("/v1/chat/completions", br#"{"messages":[],"model":"a"}"#).as_deref(), Some("a"));
        assert_eq!(requested_model("/v1/chat/completions", b"not json"), None);
        assert_eq!(requested_model("/v1/chat/completions", br#"{"model":7}"#), None);
    }
}
