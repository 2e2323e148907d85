//! Shared-data imports (§5): process-wide key/value store in the VM's `vm_id` namespace
//! with Envoy's CAS rules (see `crate::shared`).

use super::memory::{give, read, with_str, write_u32};
use super::status;
use crate::shared::SetOutcome;
use crate::state::{HostState, Status};
use wasmtime::{Caller, Linker};

pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.func_wrap(
        "env",
        "proxy_get_shared_data",
        |mut c: Caller<'_, HostState>, kp: i32, kl: i32, rp: i32, rl: i32, rcas: i32| -> wasmtime::Result<i32> {
            let found =
                with_str(&mut c, kp, kl, |state, key| state.rt.shared.get_shared_data(&state.rt.spec.vm_id, key));
            let (value, cas) = match found {
                Ok(Some(found)) => found,
                Ok(None) => return Ok(Status::NotFound as i32),
                Err(s) => return Ok(s as i32),
            };
            if let Err(s) = write_u32(&mut c, rcas, cas) {
                return Ok(s as i32);
            }
            Ok(status(give(&mut c, &value, rp, rl)?))
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_set_shared_data",
        |mut c: Caller<'_, HostState>, kp: i32, kl: i32, vp: i32, vl: i32, cas: i32| -> wasmtime::Result<i32> {
            let r = read(&mut c, vp, vl).and_then(|value| {
                let outcome = with_str(&mut c, kp, kl, |state, key| {
                    state.rt.shared.set_shared_data(&state.rt.spec.vm_id, key, value, cas as u32)
                })?;
                match outcome {
                    SetOutcome::Stored => Ok(()),
                    SetOutcome::CasMismatch => Err(Status::CasMismatch),
                }
            });
            Ok(status(r))
        },
    )?;
    Ok(())
}
