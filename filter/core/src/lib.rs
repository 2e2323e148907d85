//! ferrogate-core: pure, target-independent gateway logic shared by the proxy-wasm filter and
//! the sidecar. No I/O, no clock, no randomness: time, counters and configuration are passed
//! in, so everything here is unit-testable natively and builds for `wasm32-unknown-unknown`.

pub mod config;
pub mod headers;
pub mod openai;
pub mod plugin;
pub mod route;

pub use config::{Config, ConfigError, Problem, RawConfig};
pub use plugin::PluginConfig;
pub use route::{classify, route, Api, Endpoint, RouteDecision};
