//! The consumers: one task per publishing endpoint, subscribed to the engine's PUB socket,
//! with a DEALER to its replay socket when it has one.
//!
//! A live message is three frames, `[topic, sequence (u64 big-endian), payload]`; anything
//! else is counted as malformed. A lost connection marks the endpoint disconnected (the filter
//! then scores it neutral) and is retried with backoff from [`RETRY_FIRST`] to [`RETRY_MAX`];
//! the sequence survives the reconnect, so batches lost meanwhile show up as a gap.
//!
//! With a replay socket, each (re)connection is followed after [`RESYNC_AFTER`] by a replay
//! from the batch after the last one applied, so what the engine published before the
//! subscription reached it is not lost.
//!
//! Replay, vLLM's protocol: send `["", start (u64 big-endian)]`; each reply is
//! `["", topic, sequence, payload]` (vLLM before 0.26: `["", sequence, payload]`), the last
//! one a sequence of `u64::MAX` or an empty payload. It runs beside the live stream (whose
//! batches are held meanwhile) and gives up after [`REPLAY_TIMEOUT`] without a message.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ferrogate_core::config::KvSource;
use futures_util::StreamExt;
use tokio::sync::watch;
use zeromq::{DealerSocket, Socket, SocketEvent, SocketRecv, SocketSend, SubSocket, ZmqMessage};

use super::{Kv, Source, Spawn};
use crate::services::now_ms;

/// First wait before reconnecting.
pub const RETRY_FIRST: Duration = Duration::from_millis(100);
/// Longest wait between reconnection attempts.
pub const RETRY_MAX: Duration = Duration::from_secs(5);
/// How long a connection attempt may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long after connecting the first replay is asked for: a PUB socket drops what it
/// publishes until the subscription has reached it, which takes a few milliseconds.
pub const RESYNC_AFTER: Duration = Duration::from_millis(100);
/// A replay that sends nothing for this long is over.
pub const REPLAY_TIMEOUT: Duration = Duration::from_secs(2);

/// Starts the consumers `spawns` name; each stops when its endpoint leaves its slot or at
/// `shutdown`.
pub fn spawn_consumers(kv: Arc<Kv>, spawns: Vec<Spawn>, shutdown: watch::Receiver<bool>) {
    for Spawn { src, source, topic, stop } in spawns {
        let consumer = Consumer { kv: kv.clone(), src, source, topic };
        tokio::spawn(consumer.run(stop, shutdown.clone()));
    }
}

/// Starts the LMCache controller channel of every pool of `kv`'s layout `epoch` that has one;
/// they stop when `stop` or `shutdown` turns true.
pub fn spawn_controllers(kv: Arc<Kv>, epoch: u64, stop: watch::Receiver<bool>, shutdown: watch::Receiver<bool>) {
    let (_, layout) = kv.layout();
    for (pool, p) in layout.pools.iter().enumerate() {
        if let Some(c) = &p.controller {
            let task = super::controller::Controller::new(kv.clone(), epoch, pool, c);
            tokio::spawn(task.run(c.clone(), stop.clone(), shutdown.clone()));
        }
    }
}

struct Consumer {
    kv: Arc<Kv>,
    src: Source,
    source: KvSource,
    topic: String,
}

impl Consumer {
    async fn run(self, mut stop: watch::Receiver<bool>, mut shutdown: watch::Receiver<bool>) {
        let mut wait = RETRY_FIRST;
        let mut failures: u64 = 0;
        loop {
            if *stop.borrow() || *shutdown.borrow() {
                return;
            }
            match self.subscribe().await {
                Ok((socket, monitor)) => {
                    tracing::info!(events = %self.source.events, "KV events subscribed");
                    (wait, failures) = (RETRY_FIRST, 0);
                    self.kv.connected(self.src, true);
                    self.resync();
                    self.follow(socket, monitor, &mut stop, &mut shutdown).await;
                    self.kv.connected(self.src, false);
                }
                Err(e) => {
                    if failures.is_power_of_two() || failures == 0 {
                        tracing::warn!(events = %self.source.events, "KV events not connected (attempt {}): {e}", failures + 1);
                    }
                    failures += 1;
                }
            }
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                _ = stop.changed() => return,
                _ = shutdown.changed() => return,
            }
            wait = (wait * 2).min(RETRY_MAX);
        }
    }

    async fn subscribe(&self) -> Result<(SubSocket, futures_channel::mpsc::Receiver<SocketEvent>), String> {
        let mut socket = SubSocket::new();
        let monitor = socket.monitor();
        socket.subscribe(&self.topic).await.map_err(|e| e.to_string())?;
        match tokio::time::timeout(CONNECT_TIMEOUT, socket.connect(&self.source.events)).await {
            Ok(Ok(())) => Ok((socket, monitor)),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no connection within {CONNECT_TIMEOUT:?}")),
        }
    }

    /// Reads live messages until the connection is lost or the consumer is stopped.
    async fn follow(
        &self,
        mut socket: SubSocket,
        mut monitor: futures_channel::mpsc::Receiver<SocketEvent>,
        stop: &mut watch::Receiver<bool>,
        shutdown: &mut watch::Receiver<bool>,
    ) {
        // The first Connected is the connection just made; later ones are the socket's own
        // reconnections, possibly to a restarted engine.
        let mut connections = 0u32;
        loop {
            tokio::select! {
                message = socket.recv() => match message {
                    Ok(message) => self.live(message),
                    Err(e) => {
                        tracing::warn!(events = %self.source.events, "KV events connection lost: {e}");
                        return;
                    }
                },
                event = monitor.next() => match event {
                    Some(SocketEvent::Disconnected(_)) | None => {
                        tracing::warn!(events = %self.source.events, "KV events publisher disconnected");
                        return;
                    }
                    Some(SocketEvent::Connected(..)) => {
                        connections += 1;
                        if connections > 1 {
                            tracing::info!(events = %self.source.events, "KV events publisher reconnected");
                            self.kv.reconnected(self.src);
                            self.resync();
                        }
                    }
                    Some(_) => {}
                },
                _ = stop.changed() => return,
                _ = shutdown.changed() => return,
            }
        }
    }

    /// After a (re)connect, once the subscription has reached the engine ([`RESYNC_AFTER`]),
    /// replays what it published meanwhile.
    fn resync(&self) {
        let (Some(address), kv, src) = (self.source.replay.clone(), self.kv.clone(), self.src) else { return };
        tokio::spawn(async move {
            tokio::time::sleep(RESYNC_AFTER).await;
            if let Some(from) = kv.resync(src) {
                replay(kv, src, address, from).await;
            }
        });
    }

    fn live(&self, message: ZmqMessage) {
        let frames = message.into_vec();
        let Some((seq, payload)) = live_frames(&frames) else {
            self.kv.malformed(self.src);
            return;
        };
        if let Some(from) = self.kv.live(self.src, seq, payload, now_ms()) {
            match &self.source.replay {
                Some(address) => {
                    tokio::spawn(replay(self.kv.clone(), self.src, address.clone(), from));
                }
                None => self.kv.replay_done(self.src, now_ms()),
            }
        }
    }
}

/// `[topic, sequence, payload]`.
fn live_frames(frames: &[Bytes]) -> Option<(u64, Bytes)> {
    let [_topic, seq, payload] = frames else { return None };
    Some((sequence(seq)?, payload.clone()))
}

fn sequence(frame: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(frame.try_into().ok()?))
}

/// A replay reply: `["", topic, seq, payload]` or `["", seq, payload]`; `None` for the end
/// marker or anything else.
pub fn replay_frames(frames: &[Bytes]) -> Option<(u64, Bytes)> {
    let rest = match frames.split_first() {
        Some((first, rest)) if first.is_empty() => rest,
        _ => frames,
    };
    let (seq, payload) = match rest {
        [_topic, seq, payload] => (seq, payload),
        [seq, payload] => (seq, payload),
        _ => return None,
    };
    let seq = sequence(seq)?;
    (seq != u64::MAX && !payload.is_empty()).then(|| (seq, payload.clone()))
}

/// Asks `address` for the batches from `from` on and feeds them to `kv`; always ends the
/// replay, whatever happens.
async fn replay(kv: Arc<Kv>, src: Source, address: String, from: u64) {
    match fetch_replay(&kv, src, &address, from).await {
        Ok(n) => tracing::info!(replay = %address, "KV events replayed from {from}: {n} batches"),
        Err(e) => tracing::warn!(replay = %address, "KV events replay from {from} failed: {e}"),
    }
    kv.replay_done(src, now_ms());
}

async fn fetch_replay(kv: &Kv, src: Source, address: &str, from: u64) -> Result<u64, String> {
    let mut socket = DealerSocket::new();
    tokio::time::timeout(CONNECT_TIMEOUT, socket.connect(address))
        .await
        .map_err(|_| format!("no connection within {CONNECT_TIMEOUT:?}"))?
        .map_err(|e| e.to_string())?;
    let request = ZmqMessage::try_from(vec![Bytes::new(), Bytes::copy_from_slice(&from.to_be_bytes())])
        .map_err(|e| format!("{e:?}"))?;
    socket.send(request).await.map_err(|e| e.to_string())?;
    let mut count = 0;
    loop {
        let message = match tokio::time::timeout(REPLAY_TIMEOUT, socket.recv()).await {
            Ok(Ok(m)) => m,
            Ok(Err(e)) => return Err(e.to_string()),
            Err(_) => return Err(format!("nothing for {REPLAY_TIMEOUT:?} after {count} batches")),
        };
        match replay_frames(&message.into_vec()) {
            Some((seq, payload)) => {
                kv.replayed(src, seq, payload, now_ms());
                count += 1;
            }
            None => return Ok(count),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &[u8]) -> Bytes {
        Bytes::copy_from_slice(s)
    }

    #[test]
    fn frames_of_every_vllm_generation() {
        let seq = 7u64.to_be_bytes();
        assert_eq!(live_frames(&[b(b"kv@a"), b(&seq), b(b"x")]), Some((7, b(b"x"))));
        assert_eq!(live_frames(&[b(&seq), b(b"x")]), None);
        assert_eq!(live_frames(&[b(b""), b(b"short"), b(b"x")]), None);
        assert_eq!(replay_frames(&[b(b""), b(b"t"), b(&seq), b(b"x")]), Some((7, b(b"x"))), "vLLM >= 0.26");
        assert_eq!(replay_frames(&[b(b""), b(&seq), b(b"x")]), Some((7, b(b"x"))), "older vLLM");
        let end = u64::MAX.to_be_bytes();
        assert_eq!(replay_frames(&[b(b""), b(b""), b(&end), b(b"")]), None);
        assert_eq!(replay_frames(&[b(b""), b(&end), b(b"")]), None);
        assert_eq!(replay_frames(&[b(b""), b(&seq), b(b"")]), None, "an empty payload ends it too");
    }
}
