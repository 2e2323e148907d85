//! Imports that exist only so modules link: gRPC (answers Unimplemented, 12) and foreign
//! functions (`clear_route_cache` is known and accepted; our router resolves routes from the
//! released headers anyway, so clearing is implicit; anything else is NotFound).

use super::memory::read_str;
use crate::state::{HostState, Status};
use wasmtime::{Caller, Linker};

const UNIMPLEMENTED: i32 = Status::Unimplemented as i32;

pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.func_wrap(
        "env",
        "proxy_grpc_call",
        |_: i32,
         _: i32,
         _: i32,
         _: i32,
         _: i32,
         _: i32,
         _: i32,
         _: i32,
         _: i32,
         _: i32,
         _: i32,
         _: i32|
         -> wasmtime::Result<i32> { Ok(UNIMPLEMENTED) },
    )?;
    linker.func_wrap(
        "env",
        "proxy_grpc_stream",
        |_: i32, _: i32, _: i32, _: i32, _: i32, _: i32, _: i32, _: i32, _: i32| -> wasmtime::Result<i32> {
            Ok(UNIMPLEMENTED)
        },
    )?;
    linker.func_wrap("env", "proxy_grpc_send", |_: i32, _: i32, _: i32, _: i32| -> wasmtime::Result<i32> {
        Ok(UNIMPLEMENTED)
    })?;
    linker.func_wrap("env", "proxy_grpc_cancel", |_: i32| -> wasmtime::Result<i32> { Ok(UNIMPLEMENTED) })?;
    linker.func_wrap("env", "proxy_grpc_close", |_: i32| -> wasmtime::Result<i32> { Ok(UNIMPLEMENTED) })?;
    linker.func_wrap(
        "env",
        "proxy_call_foreign_function",
        |mut c: Caller<'_, HostState>,
         np: i32,
         nl: i32,
         _ap: i32,
         _al: i32,
         _rp: i32,
         _rl: i32|
         -> wasmtime::Result<i32> {
            match read_str(&mut c, np, nl) {
                Ok(name) if name == "clear_route_cache" => Ok(Status::Ok as i32),
                Ok(_) => Ok(Status::NotFound as i32),
                Err(s) => Ok(s as i32),
            }
        },
    )?;
    Ok(())
}
