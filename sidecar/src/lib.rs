//! The `ferrogate` binary's library: the standalone gateway (`serve`), the sidecar of a filter
//! running in Envoy (`standalone`, the `sidecar` command), the services both run
//! (`services`), the simulated engine (`sim`), the http-wasm middleware runner
//! (`httpwasm_cmd`, the `http-wasm` command), the small commands (`check`, `keys`; `admin`
//! in `admin_cmd`) and the process's logs and trace export (`telemetry`).

pub mod admin_cmd;
pub mod cli;
pub mod httpwasm_cmd;
pub mod serve;
pub mod services;
pub mod sim;
pub mod standalone;
pub mod telemetry;
