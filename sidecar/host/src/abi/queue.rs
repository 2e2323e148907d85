//! Shared-queue imports (§5): register (the caller's VM becomes the notification target),
//! resolve (empty vm_id = own), enqueue (posts `on_queue_ready` to the registrant VM,
//! delivered by `Vm::deliver_queue_ready`), dequeue (Empty when nothing is queued).

use super::memory::{give, read, read_str, write_u32};
use super::status;
use crate::state::{HostState, Status};
use wasmtime::{Caller, Linker};

pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.func_wrap(
        "env",
        "proxy_register_shared_queue",
        |mut c: Caller<'_, HostState>, np: i32, nl: i32, ret: i32| -> wasmtime::Result<i32> {
            let r = read_str(&mut c, np, nl).and_then(|name| {
                let state = c.data();
                let target = (state.vm_uid, state.root_id);
                let token = state.rt.shared.register_queue(&state.rt.spec.vm_id, &name, target);
                write_u32(&mut c, ret, token)
            });
            Ok(status(r))
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_resolve_shared_queue",
        |mut c: Caller<'_, HostState>, vp: i32, vl: i32, np: i32, nl: i32, ret: i32| -> wasmtime::Result<i32> {
            let r = read_str(&mut c, vp, vl).and_then(|vm_id| {
                let name = read_str(&mut c, np, nl)?;
                let rt = &c.data().rt;
                let vm_id = if vm_id.is_empty() { rt.spec.vm_id.clone() } else { vm_id };
                let token = rt.shared.resolve_queue(&vm_id, &name).ok_or(Status::NotFound)?;
                write_u32(&mut c, ret, token)
            });
            Ok(status(r))
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_enqueue_shared_queue",
        |mut c: Caller<'_, HostState>, token: i32, vp: i32, vl: i32| -> wasmtime::Result<i32> {
            let r = read(&mut c, vp, vl).and_then(|item| {
                let ok = c.data().rt.shared.enqueue(token as u32, item);
                ok.then_some(()).ok_or(Status::NotFound)
            });
            Ok(status(r))
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_dequeue_shared_queue",
        |mut c: Caller<'_, HostState>, token: i32, rp: i32, rl: i32| -> wasmtime::Result<i32> {
            let item = match c.data().rt.shared.dequeue(token as u32) {
                Ok(Some(item)) => item,
                Ok(None) => return Ok(Status::Empty as i32),
                Err(()) => return Ok(Status::NotFound as i32),
            };
            Ok(status(give(&mut c, &item, rp, rl)?))
        },
    )?;
    Ok(())
}
