//! Clock and timer imports: wall-clock time and the root context's tick period (one timer
//! per root; a period set from a stream context targets its root; 0 disables).

use super::memory::write_u64;
use super::status;
use crate::state::HostState;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use wasmtime::{Caller, Linker};

pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.func_wrap(
        "env",
        "proxy_get_current_time_nanoseconds",
        |mut c: Caller<'_, HostState>, ret: i32| -> wasmtime::Result<i32> {
            let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
            let nanos = u64::try_from(now.as_nanos()).unwrap_or(u64::MAX);
            Ok(status(write_u64(&mut c, ret, nanos)))
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_set_tick_period_milliseconds",
        |mut c: Caller<'_, HostState>, ms: i32| -> wasmtime::Result<i32> {
            let ms = u64::from(ms as u32);
            c.data_mut().tick_period = (ms > 0).then(|| Duration::from_millis(ms));
            Ok(0)
        },
    )?;
    Ok(())
}
