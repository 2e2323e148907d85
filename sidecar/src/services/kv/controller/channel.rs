//! The controller sockets of one `pull` address, bound once and kept across layouts.
//!
//! An LMCache worker connects its PUSH socket when it starts and never reconnects on its own;
//! zeromq's PULL socket, unbound, keeps the connections it accepted, open and unread. A channel
//! bound again for each layout would therefore lose every worker already running. Instead one
//! task per address holds the sockets and hands what they receive to whichever layout attached
//! last ([`attach`]); a layout that stops leaves the sockets to the next one. They are released
//! when the gateway shuts down, when a layout asks for another `reply` address, or
//! [`RELEASE_AFTER`] after the last layout stopped; releasing drops the accepted connections
//! too, so workers reconnect to whoever binds the address next.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use ferrogate_core::config::Controller as Config;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use zeromq::{PullSocket, RouterSocket, Socket, SocketRecv, SocketSend, ZmqMessage};

use super::{Controller, Handler};

/// How long the sockets stay bound with no layout attached (a layout without this channel).
pub const RELEASE_AFTER: Duration = Duration::from_secs(5);

/// The longest wait between two attempts to bind.
const BIND_RETRY_MAX: Duration = Duration::from_secs(2);

/// The running channels, by `pull` address.
static CHANNELS: LazyLock<Mutex<HashMap<String, Entry>>> = LazyLock::new(Mutex::default);

/// Numbers channels, so one removes only its own entry.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

struct Entry {
    id: u64,
    reply: Option<String>,
    layouts: mpsc::UnboundedSender<Attach>,
}

/// A layout taking a channel's messages, until `stop`.
struct Attach {
    target: Controller,
    stop: watch::Receiver<bool>,
    shutdown: watch::Receiver<bool>,
}

fn channels() -> MutexGuard<'static, HashMap<String, Entry>> {
    CHANNELS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Hands `config.pull`'s channel to `target`, starting the channel when none runs (or the
/// running one has another `reply` address, which is then released).
pub(super) fn attach(
    config: &Config,
    target: Controller,
    stop: watch::Receiver<bool>,
    shutdown: watch::Receiver<bool>,
) {
    let mut channels = channels();
    let mut attach = Attach { target, stop, shutdown };
    if let Some(entry) = channels.get(&config.pull).filter(|e| e.reply == config.reply) {
        match entry.layouts.send(attach) {
            Ok(()) => return,
            Err(mpsc::error::SendError(back)) => attach = back,
        }
    }
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let (layouts, rx) = mpsc::unbounded_channel();
    // A replaced entry's channel sees its sender dropped and releases the sockets.
    channels.insert(config.pull.clone(), Entry { id, reply: config.reply.clone(), layouts });
    let channel = Channel { id, config: config.clone(), layouts: rx, current: None, idle_since: None };
    tokio::spawn(channel.run(attach));
}

/// Whether a channel holds (or is binding) `pull`.
#[cfg(test)]
pub(super) fn running(pull: &str) -> bool {
    channels().contains_key(pull)
}

/// What changed for a channel, besides its sockets.
enum Change {
    /// A layout attached.
    Attached(Attach),
    /// The current layout stopped.
    Stopped,
    /// The gateway shuts down, no layout came for [`RELEASE_AFTER`], or the channel was
    /// replaced: time to release.
    Over,
}

struct Channel {
    id: u64,
    config: Config,
    layouts: mpsc::UnboundedReceiver<Attach>,
    current: Option<(watch::Receiver<bool>, watch::Receiver<bool>)>,
    idle_since: Option<Instant>,
}

impl Channel {
    async fn run(mut self, first: Attach) {
        let mut handler = Handler::new(self.config.reply.clone());
        self.take(first, &mut handler);
        if let Some((pull, router)) = self.bind_all(&mut handler).await {
            tracing::info!(pull = %self.config.pull, reply = ?self.config.reply, "LMCache controller channel listening");
            self.serve(pull, router, &mut handler).await;
        }
    }

    fn take(&mut self, attach: Attach, handler: &mut Handler) {
        self.current = Some((attach.stop, attach.shutdown));
        self.idle_since = None;
        handler.attach(attach.target);
    }

    /// Applies `change`; false when the channel is over.
    fn apply(&mut self, change: Change, handler: &mut Handler) -> bool {
        match change {
            Change::Attached(attach) => self.take(attach, handler),
            Change::Stopped => {
                self.current = None;
                self.idle_since = Some(Instant::now());
                handler.detach();
            }
            Change::Over => match self.retire() {
                Some(attach) => self.take(attach, handler),
                None => return false,
            },
        }
        true
    }

    /// The next change: a layout attaching, the current one stopping, or the end.
    async fn next_change(&mut self) -> Change {
        let Some((stop, shutdown)) = self.current.as_mut() else {
            let until = self.idle_since.unwrap_or_else(Instant::now) + RELEASE_AFTER;
            return tokio::select! {
                attach = self.layouts.recv() => attach.map_or(Change::Over, Change::Attached),
                () = tokio::time::sleep_until(until) => Change::Over,
            };
        };
        if *shutdown.borrow() {
            return Change::Over;
        }
        if *stop.borrow() {
            return Change::Stopped;
        }
        loop {
            tokio::select! {
                attach = self.layouts.recv() => return attach.map_or(Change::Over, Change::Attached),
                changed = stop.changed() => if changed.is_err() || *stop.borrow() { return Change::Stopped },
                changed = shutdown.changed() => if changed.is_err() || *shutdown.borrow() { return Change::Over },
            }
        }
    }

    /// Leaves the registry, unless a layout attached meanwhile (then returned: the channel
    /// goes on with it). Under the registry's lock, so no layout attaches to a channel that
    /// is going.
    fn retire(&mut self) -> Option<Attach> {
        let mut channels = channels();
        if let Ok(attach) = self.layouts.try_recv() {
            return Some(attach);
        }
        if channels.get(&self.config.pull).is_some_and(|e| e.id == self.id) {
            channels.remove(&self.config.pull);
        }
        None
    }

    /// Both sockets, bound; `None` when the channel ended first.
    async fn bind_all(&mut self, handler: &mut Handler) -> Option<(PullSocket, Option<RouterSocket>)> {
        let address = self.config.pull.clone();
        let pull = self.bind(PullSocket::new, &address, handler).await?;
        let router = match self.config.reply.clone() {
            Some(reply) => match self.bind(RouterSocket::new, &reply, handler).await {
                Some(router) => Some(router),
                None => {
                    release(pull, None).await;
                    return None;
                }
            },
            None => None,
        };
        Some((pull, router))
    }

    /// A socket made by `make` bound to `address`, tried again with a backoff while the
    /// address is held (by an earlier channel being released, or another process).
    async fn bind<S: Socket>(&mut self, make: fn() -> S, address: &str, handler: &mut Handler) -> Option<S> {
        let mut wait = Duration::from_millis(50);
        let mut failures = 0u32;
        loop {
            let mut socket = make();
            match socket.bind(address).await {
                Ok(_) => return Some(socket),
                Err(error) => {
                    if failures.is_power_of_two() || failures == 0 {
                        tracing::warn!(%address, %error, "LMCache controller: cannot bind yet (attempt {})", failures + 1);
                    }
                    failures += 1;
                }
            }
            let deadline = Instant::now() + wait;
            loop {
                tokio::select! {
                    () = tokio::time::sleep_until(deadline) => break,
                    change = self.next_change() => if !self.apply(change, handler) { return None },
                }
            }
            wait = (wait * 2).min(BIND_RETRY_MAX);
        }
    }

    /// Reads both sockets until the channel is over, then releases them.
    async fn serve(&mut self, mut pull: PullSocket, mut router: Option<RouterSocket>, handler: &mut Handler) {
        loop {
            tokio::select! {
                // A layout change first: a frame read after a stop is held for the next layout
                // instead of going to the one that stopped.
                biased;
                change = self.next_change() => if !self.apply(change, handler) { break },
                m = pull.recv() => match m {
                    Ok(message) => message.into_vec().iter().for_each(|frame| handler.pushed(frame)),
                    // One worker's connection broke; the socket serves the others.
                    Err(error) => tracing::debug!(%error, "LMCache controller: a worker connection failed"),
                },
                m = recv_request(&mut router) => match m {
                    Ok(request) => answer(&mut router, handler, request).await,
                    Err(error) => tracing::debug!(%error, "LMCache controller: a worker request failed"),
                },
            }
        }
        release(pull, router).await;
        tracing::info!(pull = %self.config.pull, "LMCache controller channel released");
    }
}

async fn answer(router: &mut Option<RouterSocket>, handler: &mut Handler, request: ZmqMessage) {
    if let (Some(router), Some(answer)) = (router.as_mut(), handler.answer(request)) {
        if let Err(error) = router.send(answer).await {
            tracing::debug!(%error, "LMCache controller: an answer was not delivered");
        }
    }
}

/// Unbinds both sockets and drops the connections they accepted (zeromq's PULL keeps them
/// when only unbound), so workers reconnect to whoever binds the addresses next.
async fn release(pull: PullSocket, router: Option<RouterSocket>) {
    let backend = pull.backend();
    let _ = pull.close().await;
    backend.shutdown();
    if let Some(router) = router {
        // Its drop shuts its connections down.
        let _ = router.close().await;
    }
}

/// The next request on the ROUTER socket, or never without one.
async fn recv_request(router: &mut Option<RouterSocket>) -> zeromq::ZmqResult<ZmqMessage> {
    match router {
        Some(router) => router.recv().await,
        None => std::future::pending().await,
    }
}
