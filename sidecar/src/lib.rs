//! The `ferrogate` binary's library: the standalone gateway (`serve`), the simulated engine
//! (`sim`) and the small commands (`check`, `keys`).

pub mod cli;
pub mod serve;
pub mod services;
pub mod sim;
