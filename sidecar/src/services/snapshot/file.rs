//! `--snapshot-file`: the served snapshot kept in a file, for a filter that cannot call the
//! sidecar.
//!
//! A guest that makes no network calls (an http-wasm build of the filter, run as a proxy
//! plugin) reads its configuration from a file on its plugin mount instead of asking
//! `GET /v1/snapshot`. This task writes the exact body that endpoint answers to the file each
//! time a new version is served. Unlike the snapshot cache ([`super::cache`]), provider keys
//! are in clear (the guest needs them to call the providers), so the file is private: it is
//! written to a sibling temporary file created with mode 0600, flushed, and renamed over the
//! file, so a reader sees the whole old document or the whole new one, never a torn one, and
//! no other local user can read it.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::watch;

use super::{Served, Snapshots};

/// Follows `snapshots` until `shutdown`, writing every new version to `path`. A write that
/// fails is logged and tried again on the next publication.
pub fn start(snapshots: &Snapshots, path: PathBuf, shutdown: watch::Receiver<bool>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(follow(snapshots.subscribe(), path, shutdown))
}

async fn follow(mut rx: watch::Receiver<Option<Arc<Served>>>, path: PathBuf, mut shutdown: watch::Receiver<bool>) {
    let mut written: Option<String> = None;
    loop {
        let served = rx.borrow_and_update().clone();
        if let Some(served) = served {
            written = write_version(&path, &served, written);
        }
        tokio::select! {
            changed = rx.changed() => if changed.is_err() { return },
            _ = shutdown.changed() => return,
        }
    }
}

/// Writes `served` unless `written` (the version the file holds) is already it; the version
/// the file holds afterwards.
fn write_version(path: &Path, served: &Served, written: Option<String>) -> Option<String> {
    if written.as_deref() == Some(served.version.as_str()) {
        return written;
    }
    match write_atomically(path, &served.body) {
        Ok(()) => {
            tracing::debug!(version = %served.version, path = %path.display(), "snapshot file written");
            Some(served.version.clone())
        }
        Err(e) => {
            tracing::warn!(error = %e, version = %served.version, path = %path.display(),
                "cannot write the snapshot file; trying again on the next publication");
            written
        }
    }
}

/// `path` with `suffix` added to its file name (`inbox.jsonl` → `inbox.jsonl.offset`): the
/// siblings keep the whole name, so two files of the same stem never share one.
pub(crate) fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = OsString::from(path.as_os_str());
    name.push(suffix);
    PathBuf::from(name)
}

/// Replaces `path` with `bytes` at once: a sibling `.tmp` file created with mode 0600, written,
/// flushed to disk and renamed over `path`.
///
/// # Errors
/// The temporary file cannot be created, written or renamed.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = sibling(path, ".tmp");
    // A leftover of a crash would make `create_new` fail forever.
    let _ = std::fs::remove_file(&tmp);
    let mut file = private_file(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}

#[cfg(unix)]
fn private_file(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)
}

#[cfg(not(unix))]
fn private_file(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new().write(true).create_new(true).open(path)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use ferrogate_core::config::RawConfig;

    use super::*;

    fn raw(model: &str) -> RawConfig {
        let yaml = format!(
            "providers: [{{ name: local, kind: openai_compatible, base_url: 'http://127.0.0.1:8000', api_key: sk-clear }}]\n\
             models: [{{ name: {model}, targets: [{{ provider: local, model: m }}] }}]\n"
        );
        serde_saphyr::from_str(&yaml).unwrap()
    }

    fn scratch() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("fg-snapfile-{}-{}", std::process::id(), rand::random::<u64>()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Waits (at most 5 s) until the file holds `version`; its body then.
    async fn until_version(path: &Path, version: &str) -> Vec<u8> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Ok(body) = std::fs::read(path) {
                let doc: serde_json::Value = serde_json::from_slice(&body).unwrap();
                if doc["version"] == version {
                    return body;
                }
            }
            assert!(Instant::now() < deadline, "the snapshot file never held {version}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test]
    async fn the_file_follows_each_new_version_privately() {
        let dir = scratch();
        let path = dir.join("snapshot.json");
        let snapshots = Snapshots::with_master(None, None);
        let first = snapshots.publish(raw("chat")).unwrap();
        let (stop, rx) = watch::channel(false);
        let task = start(&snapshots, path.clone(), rx);
        assert_eq!(until_version(&path, &first.version).await, first.body.to_vec(), "the body /v1/snapshot sends");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        }
        let second = snapshots.publish(raw("chat2")).unwrap();
        assert_ne!(second.version, first.version);
        assert_eq!(until_version(&path, &second.version).await, second.body.to_vec());
        assert!(String::from_utf8_lossy(&second.body).contains("sk-clear"), "keys in clear for the guest");
        assert!(!sibling(&path, ".tmp").exists());
        stop.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(5), task).await.unwrap().unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test]
    async fn a_failed_write_is_retried_on_the_next_publication() {
        let dir = scratch();
        let path = dir.join("mount").join("snapshot.json");
        let snapshots = Snapshots::with_master(None, None);
        let first = snapshots.publish(raw("chat")).unwrap();
        let (_stop, rx) = watch::channel(false);
        let _task = start(&snapshots, path.clone(), rx);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!path.exists(), "no directory yet: the write failed and was logged");
        std::fs::create_dir_all(dir.join("mount")).unwrap();
        // The same content published again is a publication of the same version.
        snapshots.publish(raw("chat")).unwrap();
        until_version(&path, &first.version).await;
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test]
    async fn a_reader_never_sees_a_torn_file() {
        let dir = scratch();
        let path = dir.join("snapshot.json");
        let snapshots = Snapshots::with_master(None, None);
        snapshots.publish(raw("m0")).unwrap();
        let (_stop, rx) = watch::channel(false);
        let _task = start(&snapshots, path.clone(), rx);
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reader = {
            let (path, done) = (path.clone(), done.clone());
            std::thread::spawn(move || {
                let mut reads = 0;
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    if let Ok(body) = std::fs::read(&path) {
                        serde_json::from_slice::<serde_json::Value>(&body).expect("a whole document");
                        reads += 1;
                    }
                }
                reads
            })
        };
        let mut last = String::new();
        for i in 1..40 {
            last = snapshots.publish(raw(&format!("m{i}"))).unwrap().version.clone();
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        until_version(&path, &last).await;
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(reader.join().unwrap() > 0);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
