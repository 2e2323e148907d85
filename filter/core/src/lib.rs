//! ferrogate-core: pure, target-independent gateway logic shared by the proxy-wasm filter and
//! the sidecar. No I/O, no clock, no randomness: time, counters and configuration are passed
//! in, so everything here is unit-testable natively and builds for `wasm32-unknown-unknown`.

pub mod a2a;
pub mod auth;
pub mod backoff;
pub mod balance;
pub mod bytes;
pub mod cache;
pub mod clouds;
pub mod config;
pub mod decimal;
pub mod dialect;
pub mod egress;
pub mod epp;
pub mod error;
pub mod failover;
pub mod flow;
pub mod gen_ai;
pub mod grants;
pub mod guard;
pub mod header_map;
pub mod headers;
pub mod hex;
pub mod inference_pool;
pub mod keypool;
pub mod kv;
pub mod limits;
pub mod mcp;
pub mod metrics;
pub mod multipart;
pub mod openai;
pub mod passive;
pub mod plugin;
pub mod route;
pub mod snapshot;
pub mod stored;
pub mod targets;
pub mod traefik;
pub mod translate;
pub mod usage;

#[cfg(test)]
pub(crate) mod testing;

pub use auth::{extract_key, AuthError, Caller, KeyMemo};
pub use config::{Config, ConfigError, Problem, RawConfig};
pub use dialect::Dialect;
pub use error::ApiError;
pub use grants::Grants;
pub use plugin::PluginConfig;
pub use route::{classify, route, Api, Endpoint, RouteDecision};
