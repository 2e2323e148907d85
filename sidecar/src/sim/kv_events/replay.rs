//! vLLM's KV-event replay service on the ROUTER socket (`--kv-replay`): a request
//! `[identity, "", start_seq]` is answered with every buffered batch with `seq >= start_seq`
//! as `[identity, "", topic, seq, payload]`, then the end marker
//! `[identity, "", "", 0xFFFFFFFFFFFFFFFF, ""]`.

use std::io;

use bytes::Bytes;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use zeromq::{RouterSocket, Socket, SocketRecv, SocketSend, ZmqMessage, ZmqResult};

use super::{bind, close, message, seq_frame, Buffer, END_SEQ};

/// A running replay service: the task owning the ROUTER socket and the signal that stops it.
pub(super) struct Replay {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl Replay {
    /// Binds a ROUTER socket to `addr` and answers replay requests from `buffer`; returns the
    /// service and the bound address.
    pub(super) async fn start(addr: &str, buffer: Buffer, topic: Bytes) -> io::Result<(Self, String)> {
        let mut socket = RouterSocket::new();
        let endpoint = bind(&mut socket, "--kv-replay", addr).await?;
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(serve(socket, buffer, topic, stopped));
        Ok((Self { stop, task }, endpoint))
    }

    /// Stops the service; returns once its socket is closed.
    pub(super) async fn stop(self) {
        // Fails only when the task has ended already (its socket failed).
        let _ = self.stop.send(());
        if let Err(error) = self.task.await {
            tracing::warn!(%error, "sim: the KV replay task failed");
        }
    }
}

/// Answers replay requests until `stopped` resolves (or its sender is dropped) or the socket
/// fails, then closes the socket. An answer being sent when the stop comes is cut short.
async fn serve(mut socket: RouterSocket, buffer: Buffer, topic: Bytes, stopped: oneshot::Receiver<()>) {
    tokio::select! {
        _ = stopped => {}
        () = answer_requests(&mut socket, &buffer, &topic) => {}
    }
    close("--kv-replay", socket).await;
}

/// Answers replay requests until the socket fails.
async fn answer_requests(socket: &mut RouterSocket, buffer: &Buffer, topic: &Bytes) {
    loop {
        let request = match socket.recv().await {
            Ok(request) => request,
            Err(error) => {
                tracing::warn!(%error, "sim: the KV replay socket failed; replay stopped");
                return;
            }
        };
        let Some((identity, start)) = replay_request(request) else { continue };
        let batches = since(buffer, start);
        if let Err(error) = answer_replay(socket, identity, topic, batches).await {
            tracing::debug!(%error, "sim: KV replay answer not delivered");
        }
    }
}

/// `(identity, start_seq)` of a ROUTER-received `[identity, "", start_seq (8 bytes)]`.
fn replay_request(request: ZmqMessage) -> Option<(Bytes, u64)> {
    let frames = request.into_vec();
    let start = match frames.as_slice() {
        [_, _, start] => <[u8; 8]>::try_from(start.as_ref()).ok(),
        _ => None,
    };
    match (frames.into_iter().next(), start) {
        (Some(identity), Some(start)) => Some((identity, u64::from_be_bytes(start))),
        _ => {
            tracing::debug!("sim: malformed KV replay request ignored");
            None
        }
    }
}

/// The buffered batches with `seq >= start`.
fn since(buffer: &Buffer, start: u64) -> Vec<(u64, Bytes)> {
    let buffer = buffer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    buffer.iter().filter(|(seq, _)| *seq >= start).cloned().collect()
}

/// Sends `batches` to `identity`, then the end marker.
async fn answer_replay(
    socket: &mut RouterSocket,
    identity: Bytes,
    topic: &Bytes,
    batches: Vec<(u64, Bytes)>,
) -> ZmqResult<()> {
    for (seq, payload) in batches {
        socket.send(message(identity.clone(), [Bytes::new(), topic.clone(), seq_frame(seq), payload])).await?;
    }
    socket.send(message(identity, [Bytes::new(), Bytes::new(), seq_frame(END_SEQ), Bytes::new()])).await
}
