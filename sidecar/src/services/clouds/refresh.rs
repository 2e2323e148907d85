//! The refresher: mints each source's credential when a configuration names it and again
//! before it ends (at expiry minus the source's margin), retries failures with backoff
//! (1 s doubling to 60 s) while the last good credential serves, drops a credential once it
//! has ended, and republishes the snapshot whenever what is served changes.
//!
//! Token endpoints are called directly, not through the proxy's egress policy: they are the
//! clouds' identity services, named by the operator (`token_url`) or by the platform's
//! environment, and the metadata server is link-local, exactly what the policy's default
//! blocks to keep client-chosen URLs off it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use tokio::sync::watch;
use tokio::time::Instant;

use super::{unix_now, CloudError, Credential, Fetcher, Minted, Source};
use crate::services::snapshot::Snapshots;

/// Longest wait for a token endpoint.
pub const TIMEOUT: Duration = Duration::from_secs(10);
/// First wait after a failure; doubled at each further failure.
const BACKOFF_FIRST: Duration = Duration::from_secs(1);
/// Longest wait between attempts.
const BACKOFF_MAX: Duration = Duration::from_secs(60);
/// Sleep when nothing is due (a publication wakes the refresher earlier).
const IDLE: Duration = Duration::from_secs(3600);

/// The HTTP client for token endpoints: 10 s timeouts, no redirect followed (a redirected
/// form would carry the secret elsewhere).
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(TIMEOUT)
        .connect_timeout(TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("ferrogate/", env!("CARGO_PKG_VERSION")))
        .build()
        .unwrap_or_default()
}

/// Keeps every credential source of the published configuration supplied, reading the
/// process's environment, until `shutdown`.
pub fn start(snapshots: Arc<Snapshots>, http: reqwest::Client, shutdown: watch::Receiver<bool>) {
    let env: super::Env = Arc::new(|name: &str| std::env::var(name).ok());
    start_with(snapshots, Fetcher::new(http, env), shutdown);
}

/// [`start`] with the fetcher given.
pub(crate) fn start_with(snapshots: Arc<Snapshots>, fetcher: Fetcher, mut shutdown: watch::Receiver<bool>) {
    tokio::spawn(async move {
        let mut held: BTreeMap<String, Schedule> = BTreeMap::new();
        loop {
            if round(&snapshots, &fetcher, &mut held).await {
                snapshots.republish();
            }
            let next = next_wake(&held, snapshots.clouds().next_expiry());
            tokio::select! {
                () = tokio::time::sleep_until(next) => {}
                () = snapshots.clouds().wanted() => {}
                _ = shutdown.changed() => return,
            }
        }
    });
}

/// One source's schedule.
struct Schedule {
    source: Source,
    /// When to mint again.
    due: Instant,
    /// Failures in a row (0: the last attempt succeeded).
    failures: u32,
}

/// Mints every credential that is due (all at once: a slow endpoint does not hold the
/// others), and drops those that ended; whether what is served changed.
async fn round(snapshots: &Snapshots, fetcher: &Fetcher, held: &mut BTreeMap<String, Schedule>) -> bool {
    let state = snapshots.clouds();
    let wanted = state.sources();
    held.retain(|name, s| wanted.iter().any(|(n, source)| n == name && *source == s.source));
    let now = Instant::now();
    let due: Vec<(String, Source)> =
        wanted.into_iter().filter(|(name, _)| held.get(name).is_none_or(|s| s.due <= now)).collect();
    let results = join_all(due.iter().map(|(_, source)| fetcher.mint(source))).await;
    let mut changed = false;
    for ((name, source), result) in due.into_iter().zip(results) {
        let failures = held.get(&name).map_or(0, |s| s.failures);
        let schedule = match result {
            Ok((credential, expires_at)) => {
                changed |= record(snapshots, &name, &source, credential, expires_at, failures);
                Schedule { due: refresh_due(&source, expires_at), failures: 0, source }
            }
            Err(e) => {
                failed(&name, &source, &e, failures);
                Schedule { due: Instant::now() + backoff(failures), failures: failures + 1, source }
            }
        };
        held.insert(name, schedule);
    }
    changed | state.drop_expired(unix_now())
}

/// Records a minted credential and says so; whether it changed what is served.
fn record(
    snapshots: &Snapshots,
    name: &str,
    source: &Source,
    credential: Credential,
    expires_at: Option<u64>,
    failures: u32,
) -> bool {
    let kind = source.kind.as_str();
    let expires_in = expires_at.map_or_else(|| "none".to_string(), |end| end.saturating_sub(unix_now()).to_string());
    if failures > 0 {
        tracing::info!(provider = %name, source = kind, failures, "cloud credentials: minted again after failures");
    }
    // The fields are in the message itself so that any log format shows them as written.
    tracing::info!("cloud credentials refreshed provider={name} source={kind} expires_in_s={expires_in}");
    let minted = Minted { source: source.clone(), credential, expires_at };
    snapshots.clouds().set(name, minted)
}

/// Logs a failure, once per streak.
fn failed(name: &str, source: &Source, e: &CloudError, failures: u32) {
    if failures == 0 {
        tracing::warn!(
            provider = %name,
            source = source.kind.as_str(),
            error = %e,
            "cloud credentials: cannot mint; the last good credential serves while it is valid, retrying"
        );
    }
}

/// When to mint again a credential of `source` ending at `expires_at`: the source's margin
/// before the end; for a credential that lives less than the margin, halfway through its
/// life (at least a second later, never a busy loop). One that does not end is not minted
/// again (environment keys without an expiration).
fn refresh_due(source: &Source, expires_at: Option<u64>) -> Instant {
    match expires_at {
        Some(end) => Instant::now() + refresh_in(end.saturating_sub(unix_now()), source.kind.margin_secs()),
        None => Instant::now() + Duration::from_secs(365 * 86_400),
    }
}

/// The wait before minting again a credential that lives `lifetime` more seconds.
pub(super) fn refresh_in(lifetime: u64, margin: u64) -> Duration {
    if lifetime > margin {
        Duration::from_secs(lifetime - margin)
    } else {
        Duration::from_millis((lifetime * 500).max(1000))
    }
}

/// The wait after `failures` failures in a row.
pub(super) fn backoff(failures: u32) -> Duration {
    BACKOFF_FIRST.saturating_mul(2u32.saturating_pow(failures.min(16))).min(BACKOFF_MAX)
}

/// The earliest of the schedules and the first credential's end.
fn next_wake(held: &BTreeMap<String, Schedule>, next_expiry: Option<u64>) -> Instant {
    let idle = Instant::now() + IDLE;
    let due = held.values().map(|s| s.due).min().unwrap_or(idle);
    let ends = next_expiry.map_or(idle, |end| Instant::now() + Duration::from_secs(end.saturating_sub(unix_now())));
    due.min(ends)
}
