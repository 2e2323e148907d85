//! Test support: where the workspace's wasm builds are, built on first use.
//!
//! The host's scenario tests and the gateway's end-to-end tests run real filter modules
//! (`ferrogate_filter.wasm`, `ferrogate_testfilter.wasm`, the Traefik middleware
//! `ferrogate_traefik.wasm`), which cargo cannot build as a
//! dependency of a native test (another target). So that `cargo test` works from a fresh
//! clone, and never runs a module older than the code it is built from, the first test that
//! needs one runs the workspace's `cargo wasm` build when the module is missing or older than
//! a source of the filters (cargo's own lock serialises test binaries that ask at the same
//! time). Not used by `serve`.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The proxy-wasm packages `cargo wasm` (`.cargo/config.toml`) builds, release profile.
const PACKAGES: [&str; 2] = ["ferrogate-filter", "ferrogate-testfilter"];
/// The Traefik middleware's module, and the target Traefik runs it as.
const TRAEFIK: (&str, &str, &str) = ("ferrogate_traefik.wasm", "ferrogate-traefik", "wasm32-wasip1");

/// `<target dir>/<its target>/release/<file>`, built first when it does not exist or is older than a source.
/// `env` names a variable that, when set, gives the file instead (no build).
///
/// # Panics
/// When the build fails: one message saying what to run by hand.
#[allow(clippy::panic)] // test support: a missing module ends the test with a clear message
pub fn workspace_wasm(file: &str, env: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(env) {
        return PathBuf::from(p);
    }
    let target = if file == TRAEFIK.0 { TRAEFIK.2 } else { "wasm32-unknown-unknown" };
    let path = target_dir().join(target).join("release").join(file);
    static BUILD: Mutex<()> = Mutex::new(());
    let _one_at_a_time = BUILD.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if !path.is_file() || stale(&path) {
        if let Err(e) = build(file == TRAEFIK.0) {
            panic!(
                "{} is missing or stale and building it failed ({e}); run `cargo wasm` (or `make wasm`) in the workspace",
                path.display()
            );
        }
        // Cargo leaves a module its change did not touch as it was: mark it current, so the
        // next test does not ask again.
        let _ =
            std::fs::File::options().write(true).open(&path).and_then(|f| f.set_modified(std::time::SystemTime::now()));
    }
    path
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace().join("target"))
}

/// Where each module's sources are: a change to any file under them makes it stale.
fn sources(module: &Path) -> &'static [&'static str] {
    if module.file_name().is_some_and(|f| f == "ferrogate_testfilter.wasm") {
        &["sidecar/host/testfilter"]
    } else if module.file_name().is_some_and(|f| f == TRAEFIK.0) {
        &["traefik/src", "traefik/Cargo.toml", "filter/core/src", "filter/core/Cargo.toml", "Cargo.lock"]
    } else {
        &["filter/src", "filter/core/src", "filter/Cargo.toml", "filter/core/Cargo.toml", "Cargo.lock"]
    }
}

/// Whether some source of `module` changed after it was written.
fn stale(module: &Path) -> bool {
    let Ok(built) = std::fs::metadata(module).and_then(|m| m.modified()) else { return true };
    sources(module).iter().any(|s| newer_than(&workspace().join(s), built))
}

fn newer_than(path: &Path, time: std::time::SystemTime) -> bool {
    let Ok(meta) = std::fs::metadata(path) else { return false };
    if meta.is_file() {
        return meta.modified().is_ok_and(|m| m > time);
    }
    let Ok(entries) = std::fs::read_dir(path) else { return false };
    entries.flatten().any(|e| newer_than(&e.path(), time))
}

fn build(traefik: bool) -> Result<(), String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    eprintln!("building a wasm module for the tests: missing or older than its sources ...");
    let mut cmd = std::process::Command::new(cargo);
    cmd.current_dir(workspace());
    if traefik {
        cmd.args(["build", "--release", "--target", TRAEFIK.2, "-p", TRAEFIK.1]);
    } else {
        cmd.args(["build", "--release", "--target", "wasm32-unknown-unknown"]);
        for p in PACKAGES {
            cmd.args(["-p", p]);
        }
    }
    match cmd.status() {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!("cargo exited with {s}")),
        Err(e) => Err(e.to_string()),
    }
}
