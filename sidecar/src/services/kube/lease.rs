//! Leader election on a `coordination.k8s.io/v1` Lease, as Kubernetes controllers (client-go's
//! `leaderelection`) and the Inference Extension's picker (`--ha-enable-leader-election`) do it,
//! so that of several picker replicas one answers: the one whose `holderIdentity` is on the
//! Lease. Replicas keep the same state either way (each follows the pool and its KV events);
//! what one leader adds is one flow-control queue and one `max_concurrency` count per engine.
//!
//! Every retry period a replica reads the Lease. The holder renews it (`renewTime`); another
//! takes it once the record has not changed for `leaseDurationSeconds` by its own clock (no
//! clock is compared across replicas), or at once when it has no holder. Writes carry the
//! `resourceVersion` read, so of two replicas taking the Lease together one gets 409 Conflict.
//! A leader that cannot renew within the renew deadline (two thirds of the duration) stops
//! leading before another may take over. On shutdown the leader gives the Lease up (no holder),
//! so another takes it within a retry period instead of a lease duration.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{Client, KubeError};

/// One election: which Lease, and who this replica is.
#[derive(Debug, Clone)]
pub struct Election {
    /// The Lease's namespace.
    pub namespace: String,
    /// The Lease's name.
    pub name: String,
    /// This replica's `holderIdentity`.
    pub identity: String,
    /// `leaseDurationSeconds`.
    pub duration: Duration,
}

impl Election {
    /// How often the Lease is read and renewed (client-go: 2 s of a 15 s lease).
    fn retry(&self) -> Duration {
        (self.duration * 2 / 15).max(Duration::from_millis(100))
    }

    /// How long a leader leads after its last renewal (client-go: 10 s of 15 s).
    fn renew_deadline(&self) -> Duration {
        self.duration * 2 / 3
    }

    fn path(&self) -> String {
        format!("/apis/coordination.k8s.io/v1/namespaces/{}/leases/{}", self.namespace, self.name)
    }
}

/// What this replica last saw of the Lease, and when by its own clock.
#[derive(Debug, Default)]
struct Observed {
    record: Option<(String, String)>,
    at: Option<Instant>,
}

/// A running election.
#[derive(Debug)]
pub struct Leadership {
    /// Whether this replica leads.
    pub leading: watch::Receiver<bool>,
    /// The election, which gives the Lease up before it ends: await it on shutdown.
    pub task: JoinHandle<()>,
}

/// Runs `election` until `shutdown`.
pub fn start(client: Client, election: Election, shutdown: watch::Receiver<bool>) -> Leadership {
    let (leading, rx) = watch::channel(false);
    Leadership { leading: rx, task: tokio::spawn(run(client, election, leading, shutdown)) }
}

async fn run(client: Client, election: Election, leading: watch::Sender<bool>, mut shutdown: watch::Receiver<bool>) {
    let mut observed = Observed::default();
    let (mut leader_until, mut failing): (Option<Instant>, bool) = (None, false);
    loop {
        let tried = try_acquire_or_renew(&client, &election, &mut observed).await;
        match tried {
            Ok(true) => leader_until = Some(Instant::now() + election.renew_deadline()),
            Ok(false) => leader_until = None,
            // Reported once per outage, not every retry period.
            Err(ref e) if !failing => {
                tracing::warn!(lease = %election.name, error = %e, "leader election: the Lease could not be read or written")
            }
            Err(_) => {}
        }
        failing = tried.is_err();
        let now = leader_until.is_some_and(|until| Instant::now() < until);
        if leading.send_if_modified(|was| std::mem::replace(was, now) != now) {
            tracing::info!(lease = %election.name, identity = %election.identity, leading = now, "leader election");
        }
        tokio::select! {
            () = tokio::time::sleep(election.retry()) => {}
            _ = shutdown.wait_for(|stop| *stop) => break,
        }
    }
    if *leading.borrow() {
        leading.send_replace(false);
        if let Err(e) = release(&client, &election).await {
            tracing::warn!(lease = %election.name, error = %e, "leader election: the Lease could not be given up");
        }
    }
}

/// Reads the Lease and takes or renews it when this replica may; whether it now holds it.
async fn try_acquire_or_renew(client: &Client, e: &Election, observed: &mut Observed) -> Result<bool, KubeError> {
    let path = e.path();
    let now = super::micro_time();
    let Some(mut lease) = client.object(&path, e.retry()).await? else {
        let create = json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": { "name": e.name, "namespace": e.namespace },
            "spec": spec(e, &now, &now, 0),
        });
        let collection = path.rsplit_once('/').map_or(path.as_str(), |(c, _)| c);
        return conflict_is_false(client.write(true, collection, &create, e.retry()).await);
    };
    let field = |name: &str| lease.pointer(&format!("/spec/{name}")).and_then(Value::as_str).unwrap_or("").to_string();
    let (holder, renewed) = (field("holderIdentity"), field("renewTime"));
    let record = Some((holder.clone(), renewed));
    if observed.record != record {
        (observed.record, observed.at) = (record, Some(Instant::now()));
    }
    let seconds = lease.pointer("/spec/leaseDurationSeconds").and_then(Value::as_u64);
    let valid_for = seconds.map_or(e.duration, Duration::from_secs);
    let valid = observed.at.is_some_and(|at| at.elapsed() < valid_for);
    if !holder.is_empty() && holder != e.identity && valid {
        return Ok(false);
    }
    let transitions = lease.pointer("/spec/leaseTransitions").and_then(Value::as_u64).unwrap_or(0);
    let (acquired, transitions) =
        if holder == e.identity { (field("acquireTime"), transitions) } else { (now.clone(), transitions + 1) };
    lease["spec"] = spec(e, &acquired, &now, transitions);
    conflict_is_false(client.write(false, &path, &lease, e.retry()).await)
}

/// The Lease's `spec` held by this replica.
fn spec(e: &Election, acquired: &str, renewed: &str, transitions: u64) -> Value {
    json!({
        "holderIdentity": e.identity,
        "leaseDurationSeconds": e.duration.as_secs().max(1),
        "acquireTime": acquired,
        "renewTime": renewed,
        "leaseTransitions": transitions,
    })
}

/// A write's outcome as "holds the Lease": a conflict is another replica's win, not an error.
fn conflict_is_false(written: Result<Value, KubeError>) -> Result<bool, KubeError> {
    match written {
        Ok(_) => Ok(true),
        Err(KubeError::Conflict) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Gives the Lease up if this replica still holds it: no holder, so another takes it at once.
async fn release(client: &Client, e: &Election) -> Result<(), KubeError> {
    let path = e.path();
    let Some(mut lease) = client.object(&path, e.retry()).await? else { return Ok(()) };
    if lease.pointer("/spec/holderIdentity").and_then(Value::as_str) != Some(e.identity.as_str()) {
        return Ok(());
    }
    let now = super::micro_time();
    lease["spec"]["holderIdentity"] = Value::Null;
    lease["spec"]["renewTime"] = json!(now);
    lease["spec"]["leaseDurationSeconds"] = json!(1);
    conflict_is_false(client.write(false, &path, &lease, e.retry()).await).map(|_| ())
}
