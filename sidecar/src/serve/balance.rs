//! Connection balancing across workers, like Envoy's `exact_balance` connection balancer: one
//! acceptor hands every new connection to the worker with the fewest open connections.
//!
//! Why not let every worker race on one shared listener: the first worker to wake takes
//! whatever is waiting, so a handful of long-lived keep-alive connections (an SDK's pool, a
//! load generator) can all land on one worker while the others idle, and throughput halves on
//! a two-core box. Handing off costs one channel send per connection, not per request.
//!
//! The acceptor also bounds the connections open at once (`--max-connections`): past the cap
//! a new connection is closed as soon as it is accepted, so a flood of idle or half-sent
//! connections cannot take every file descriptor from the requests already being served. The
//! cap being reached and left is logged once each.

use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, watch};

/// A worker's side: the connections handed to it and its open-connection count.
pub struct Inbox {
    rx: mpsc::UnboundedReceiver<TcpStream>,
    open: Arc<AtomicUsize>,
}

impl Inbox {
    /// The next connection for this worker (`None` once the acceptor has stopped). The
    /// guard keeps the connection counted until it is dropped.
    pub async fn next(&mut self) -> Option<(TcpStream, OpenGuard)> {
        let tcp = self.rx.recv().await?;
        Some((tcp, OpenGuard(self.open.clone())))
    }
}

/// Counts one open connection of a worker; dropping it (connection closed) uncounts it.
pub struct OpenGuard(Arc<AtomicUsize>);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The acceptor's side.
pub struct Balancer {
    workers: Vec<(mpsc::UnboundedSender<TcpStream>, Arc<AtomicUsize>)>,
    /// Where the search for the least-loaded worker starts, so ties rotate.
    next: usize,
    /// Most connections open at once.
    cap: usize,
    /// Connections closed since the cap was reached (`Some` while it is).
    refused: Option<u64>,
}

/// Headroom under the open-file limit for everything that is not a client connection
/// (upstream connections, the sidecar's listeners and database pools, files).
const FD_HEADROOM: usize = 256;

/// The default connection cap: the soft open-file limit (Linux `/proc/self/limits`) less
/// [`FD_HEADROOM`], at least 64; 10,000 where the limit cannot be read.
pub fn default_max_connections() -> usize {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let soft = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|n| n.parse::<usize>().ok());
    soft.map_or(10_000, |n| n.saturating_sub(FD_HEADROOM).max(64))
}

/// A balancer over `count` workers and their inboxes, in worker order, keeping at most `cap`
/// connections open.
pub fn balancer(count: usize, cap: usize) -> (Balancer, Vec<Inbox>) {
    let mut workers = Vec::with_capacity(count);
    let mut inboxes = Vec::with_capacity(count);
    for _ in 0..count {
        let (tx, rx) = mpsc::unbounded_channel();
        let open = Arc::new(AtomicUsize::new(0));
        workers.push((tx, open.clone()));
        inboxes.push(Inbox { rx, open });
    }
    (Balancer { workers, next: 0, cap, refused: None }, inboxes)
}

impl Balancer {
    /// Index of the worker with the fewest open connections; ties go round-robin.
    fn pick(&mut self) -> usize {
        let n = self.workers.len();
        let load = |i: usize| self.workers.get(i).map_or(usize::MAX, |(_, open)| open.load(Ordering::Relaxed));
        let best = (0..n).map(|k| (self.next + k) % n).min_by_key(|&i| load(i)).unwrap_or(0);
        self.next = (best + 1) % n.max(1);
        best
    }

    /// Connections open on every worker.
    fn open(&self) -> usize {
        self.workers.iter().map(|(_, open)| open.load(Ordering::Relaxed)).sum()
    }

    /// Whether a new connection fits under the cap (logging the cap being reached or left).
    fn admit(&mut self) -> bool {
        let full = self.open() >= self.cap;
        match (full, self.refused.as_mut()) {
            (true, Some(n)) => *n += 1,
            (true, None) => {
                tracing::warn!(
                    cap = self.cap,
                    "connection cap reached: new connections are closed until some end (--max-connections)"
                );
                self.refused = Some(1);
            }
            (false, Some(_)) => {
                let closed = self.refused.take().unwrap_or_default();
                tracing::info!(cap = self.cap, closed, "below the connection cap again: accepting");
            }
            (false, None) => {}
        }
        !full
    }

    /// Hands one accepted connection to a worker; false when no worker is left.
    fn dispatch(&mut self, tcp: TcpStream) -> bool {
        let mut tcp = tcp;
        while !self.workers.is_empty() {
            let i = self.pick();
            let Some((tx, open)) = self.workers.get(i) else { break };
            open.fetch_add(1, Ordering::Relaxed);
            match tx.send(tcp) {
                Ok(()) => return true,
                Err(back) => {
                    // That worker has exited (it failed to start a VM): stop offering it work.
                    open.fetch_sub(1, Ordering::Relaxed);
                    tcp = back.0;
                    self.workers.remove(i);
                    self.next = 0;
                }
            }
        }
        false
    }

    /// Accepts until `shutdown` flips, then drops the listener and the workers' senders, which
    /// tells every worker to drain.
    pub async fn run(mut self, listener: tokio::net::TcpListener, mut shutdown: watch::Receiver<bool>) {
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    let Ok((tcp, _)) = accepted else { continue };
                    if !self.admit() {
                        drop(tcp);
                        continue;
                    }
                    let Ok(tcp) = tcp.into_std() else { continue };
                    if !self.dispatch(tcp) {
                        tracing::error!("no worker left to take connections");
                        break;
                    }
                }
                _ = shutdown.changed() => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A running acceptor over `count` workers with a cap of `cap`: its address, the workers'
    /// inboxes, the stop switch and the acceptor's task.
    async fn acceptor(
        count: usize,
        cap: usize,
    ) -> (std::net::SocketAddr, Vec<Inbox>, watch::Sender<bool>, tokio::task::JoinHandle<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (balancer, inboxes) = balancer(count, cap);
        let (stop, rx) = watch::channel(false);
        (addr, inboxes, stop, tokio::spawn(balancer.run(listener, rx)))
    }

    #[tokio::test]
    async fn connections_go_to_the_least_loaded_worker() {
        let (addr, mut inboxes, stop, acceptor) = acceptor(2, 100).await;
        let mut clients = Vec::new();
        let mut taken: Vec<Vec<OpenGuard>> = vec![Vec::new(), Vec::new()];
        // Four connections at once: two each, whatever order the kernel queued them in.
        for _ in 0..4 {
            clients.push(tokio::net::TcpStream::connect(addr).await.unwrap());
        }
        for (i, inbox) in inboxes.iter_mut().enumerate() {
            for _ in 0..2 {
                let (_, guard) = inbox.next().await.unwrap();
                taken[i].push(guard);
            }
        }
        // Worker 0's connections close: the next two both go to worker 0.
        taken[0].clear();
        for _ in 0..2 {
            clients.push(tokio::net::TcpStream::connect(addr).await.unwrap());
        }
        for _ in 0..2 {
            let (_, guard) = inboxes[0].next().await.unwrap();
            taken[0].push(guard);
        }
        assert!(inboxes[1].rx.try_recv().is_err(), "the busier worker got nothing");
        let _ = stop.send(true);
        acceptor.await.unwrap();
        assert!(inboxes[1].next().await.is_none(), "workers see the end once the acceptor stops");
    }

    #[tokio::test]
    async fn past_the_cap_new_connections_are_closed_until_one_ends() {
        use tokio::io::AsyncReadExt;
        let (addr, mut inboxes, stop, acceptor) = acceptor(1, 2).await;
        let _a = tokio::net::TcpStream::connect(addr).await.unwrap();
        let _b = tokio::net::TcpStream::connect(addr).await.unwrap();
        let first = inboxes[0].next().await.unwrap().1;
        let _second = inboxes[0].next().await.unwrap().1;
        // The third is accepted and closed at once: its reader sees the end.
        let mut third = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut buf = [0u8; 1];
        let read = tokio::time::timeout(std::time::Duration::from_secs(5), third.read(&mut buf)).await;
        assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "closed: {read:?}");
        assert!(inboxes[0].rx.try_recv().is_err(), "nothing handed to the worker");
        // One ends: the next is taken again.
        drop(first);
        let _d = tokio::net::TcpStream::connect(addr).await.unwrap();
        assert!(inboxes[0].next().await.is_some());
        let _ = stop.send(true);
        acceptor.await.unwrap();
    }

    #[test]
    fn the_default_cap_follows_the_open_file_limit() {
        let cap = default_max_connections();
        assert!(cap >= 64, "{cap}");
    }
}
