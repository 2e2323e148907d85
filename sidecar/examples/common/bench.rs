//! What the benches that run `ferrogate` as child processes share: keys' digests, free ports,
//! quiet child processes and percentiles.

#![allow(dead_code)] // Each bench uses its own part.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

/// The `sha256:` digest (hex) of a virtual key, as the configuration lists it.
pub fn digest(secret: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(secret.as_bytes()))
}

/// A loopback port free at the time of asking.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `bin args…` as a child process logging warnings only, its output discarded, killed when
/// dropped.
pub fn spawn(bin: &Path, args: &[String]) -> tokio::process::Child {
    tokio::process::Command::new(bin)
        .args(args)
        .env("FERROGATE_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", bin.display()))
}

/// The `p` quantile (0..=1) of `sorted`, in ms (NaN when empty).
pub fn pct(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len().max(1)) - 1;
    sorted.get(i).map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
}
