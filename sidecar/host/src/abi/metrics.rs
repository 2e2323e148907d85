//! Metric imports (§7): define (ids per VM with the type in the low two bits, the stat
//! shared by all VMs of the Runtime), increment (counter needs > 0), record (gauge = set),
//! get (histograms have no value → BadArgument). Unknown ids are NotFound.

use super::memory::{read_str, write_u32, write_u64};
use super::status;
use crate::metrics::{Kind, MetricError, Stat};
use crate::state::{HostState, Status};
use wasmtime::{Caller, Linker};

fn to_status(e: MetricError) -> Status {
    match e {
        MetricError::BadArgument => Status::BadArgument,
    }
}

/// Runs `f` on the stat behind metric id `id` of this VM.
fn with_stat<T>(state: &HostState, id: i32, f: impl FnOnce(&Stat) -> Result<T, MetricError>) -> Result<T, Status> {
    let stat = state.metric_ids.stat(id as u32).ok_or(Status::NotFound)?;
    f(stat).map_err(to_status)
}

pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.func_wrap(
        "env",
        "proxy_define_metric",
        |mut c: Caller<'_, HostState>, ty: i32, np: i32, nl: i32, ret: i32| -> wasmtime::Result<i32> {
            let r = read_str(&mut c, np, nl).and_then(|name| {
                let kind = Kind::from_abi(ty).ok_or(Status::BadArgument)?;
                let state = c.data_mut();
                let stat = state.rt.metrics.define(kind, &name);
                let id = state.metric_ids.allocate(kind, stat);
                write_u32(&mut c, ret, id)
            });
            Ok(status(r))
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_increment_metric",
        |c: Caller<'_, HostState>, id: i32, offset: i64| -> wasmtime::Result<i32> {
            Ok(status(with_stat(c.data(), id, |s| s.increment(offset))))
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_record_metric",
        |c: Caller<'_, HostState>, id: i32, value: i64| -> wasmtime::Result<i32> {
            Ok(status(with_stat(c.data(), id, |s| s.record(value as u64))))
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_get_metric",
        |mut c: Caller<'_, HostState>, id: i32, ret: i32| -> wasmtime::Result<i32> {
            let r = with_stat(c.data(), id, Stat::get);
            Ok(status(r.and_then(|v| write_u64(&mut c, ret, v))))
        },
    )?;
    Ok(())
}
