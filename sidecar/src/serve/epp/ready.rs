//! The picker's readiness: SERVING on `readiness` (and the processor's and the server's
//! names) once every InferencePool the configuration follows has been listed, as the reference
//! picker reports ready only once its datastore has synced; before that a pick would have no
//! endpoint to choose. `liveness` is not tied to it.

use std::sync::Arc;

use tokio::sync::watch;
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

use super::HEALTH_SERVICES;
use crate::services::snapshot::Snapshots;

/// Whether the picker is ready, updated on every publication (a pool's first list is one)
/// until the snapshots are gone.
pub fn watch(snapshots: Arc<Snapshots>) -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(snapshots.pools_synced());
    let mut published = snapshots.subscribe();
    tokio::spawn(async move {
        while published.changed().await.is_ok() {
            let ready = snapshots.pools_synced();
            tx.send_if_modified(|was| std::mem::replace(was, ready) != ready);
            if tx.is_closed() {
                return;
            }
        }
    });
    rx
}

/// Reports `ready` on the readiness services of `reporter`.
pub async fn set(reporter: &HealthReporter, ready: bool) {
    let status = if ready { ServingStatus::Serving } else { ServingStatus::NotServing };
    for name in HEALTH_SERVICES.iter().filter(|n| **n != "liveness") {
        reporter.set_service_status(name, status).await;
    }
    tracing::debug!(?status, "endpoint picker readiness");
}

/// Reports each change of `ready` ([`set`]) until its sender is gone.
pub async fn report(reporter: HealthReporter, mut ready: watch::Receiver<bool>) {
    while ready.changed().await.is_ok() {
        let now = *ready.borrow_and_update();
        set(&reporter, now).await;
    }
}
