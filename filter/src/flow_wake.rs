//! Waking requests that wait in a flow-control queue (`http::flow_wait`), from the root
//! context of their VM.
//!
//! Proxy-wasm resumes a paused request only from a callback, and a shared queue notifies a
//! VM's root context, not a stream. So a waiting stream is registered here; when the VM's
//! wake-up queue (`flow_gate::register_waker`) delivers its context id, or on the root's tick
//! (which also keeps the entries of waiting requests alive and refuses those past their time to
//! live), the root makes the stream the effective context and lets it check its place again.
//!
//! A call the stream starts from there (a lease top-up after it was let go) is registered by
//! the SDK to the root, whose callback was running: its answer comes to the root, which hands
//! it on to the stream ([`Waiters::forwarded`]).

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::{Rc, Weak};

use proxy_wasm::hostcalls;

use crate::http::{FlowEvent, Stream};

/// A VM's waiting streams and the calls they started from a root callback.
#[derive(Default)]
pub(crate) struct Waiters {
    streams: HashMap<u32, Weak<RefCell<Stream>>>,
    forwards: HashMap<u32, Weak<RefCell<Stream>>>,
}

/// The shared registry of a VM.
pub(crate) type WaitersCell = Rc<RefCell<Waiters>>;

impl Waiters {
    /// Stream `ctx` waits in a queue.
    pub(crate) fn insert(&mut self, ctx: u32, stream: Weak<RefCell<Stream>>) {
        self.streams.insert(ctx, stream);
    }

    /// Stream `ctx` no longer waits.
    pub(crate) fn remove(&mut self, ctx: u32) {
        self.streams.remove(&ctx);
    }

    /// The stream a root call's answer (`token`) belongs to, if it was started by one.
    pub(crate) fn forwarded(&mut self, token: u32) -> Option<(u32, Rc<RefCell<Stream>>)> {
        let stream = self.forwards.remove(&token)?.upgrade()?;
        let ctx = stream.try_borrow().ok()?.id();
        Some((ctx, stream))
    }
}

/// Drains the VM's wake-up queue `queue` and wakes each stream named there.
pub(crate) fn deliver(waiters: &WaitersCell, queue: u32, root: u32) {
    let mut woke = false;
    while let Ok(Some(bytes)) = hostcalls::dequeue_shared_queue(queue) {
        let Some(ctx) = bytes.get(..4).and_then(|b| b.try_into().ok()).map(u32::from_le_bytes) else { continue };
        let stream = waiters.borrow().streams.get(&ctx).and_then(Weak::upgrade);
        if let Some(stream) = stream {
            run_on(waiters, ctx, &stream, |s| {
                s.count_flow(FlowEvent::Woken);
                s.on_flow_wake();
            });
            woke = true;
        }
    }
    if woke {
        back_to(root);
    }
}

/// Lets every waiting stream of the VM check its place (the root's tick).
pub(crate) fn recheck(waiters: &WaitersCell, root: u32) {
    let live: Vec<(u32, Rc<RefCell<Stream>>)> = {
        let mut w = waiters.borrow_mut();
        w.streams.retain(|_, s| s.strong_count() > 0);
        w.forwards.retain(|_, s| s.strong_count() > 0);
        w.streams.iter().filter_map(|(&ctx, s)| Some((ctx, s.upgrade()?))).collect()
    };
    for (ctx, stream) in &live {
        run_on(waiters, *ctx, stream, Stream::on_flow_wake);
    }
    if !live.is_empty() {
        back_to(root);
    }
}

/// Runs `f` on `stream` as the effective context `ctx`; a call it starts is forwarded to it.
pub(crate) fn run_on(waiters: &WaitersCell, ctx: u32, stream: &Rc<RefCell<Stream>>, f: impl FnOnce(&mut Stream)) {
    if hostcalls::set_effective_context(ctx).is_err() {
        // The host no longer knows the stream: it ended.
        waiters.borrow_mut().remove(ctx);
        return;
    }
    let Ok(mut s) = stream.try_borrow_mut() else { return };
    f(&mut s);
    if let Some(token) = s.pending_callout() {
        waiters.borrow_mut().forwards.insert(token, Rc::downgrade(stream));
    }
}

/// Makes the root the effective context again for the rest of its callback.
pub(crate) fn back_to(root: u32) {
    let _ = hostcalls::set_effective_context(root);
}
