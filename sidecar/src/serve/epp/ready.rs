//! The picker's readiness: SERVING on `readiness` (and the processor's and the server's
//! names) once every InferencePool the configuration follows has been listed, as the reference
//! picker reports ready only once its datastore has synced (before that a pick would have no
//! endpoint to choose), and, with leader election (`--epp-lease`), while this replica leads.
//! `liveness` is not tied to either.

use std::sync::Arc;

use tokio::sync::watch;
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

use super::HEALTH_SERVICES;
use crate::services::snapshot::Snapshots;

/// Whether the picker is ready: its pools listed and, with leader election (`leading`), this
/// replica the leader. Updated on every publication (a pool's first list is one) and every
/// change of leadership, until either source is gone.
pub fn watch(snapshots: Arc<Snapshots>, mut leading: Option<watch::Receiver<bool>>) -> watch::Receiver<bool> {
    let mut published = snapshots.subscribe();
    let (tx, rx) = watch::channel(is_ready(&snapshots, &mut leading));
    tokio::spawn(async move {
        loop {
            let gone = match leading.as_mut() {
                Some(l) => tokio::select! {
                    changed = published.changed() => changed.is_err(),
                    changed = l.changed() => changed.is_err(),
                },
                None => published.changed().await.is_err(),
            };
            if gone {
                return;
            }
            let ready = is_ready(&snapshots, &mut leading);
            tx.send_if_modified(|was| std::mem::replace(was, ready) != ready);
        }
    });
    rx
}

fn is_ready(snapshots: &Snapshots, leading: &mut Option<watch::Receiver<bool>>) -> bool {
    let leads = leading.as_mut().is_none_or(|l| *l.borrow_and_update());
    snapshots.pools_synced() && leads
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
