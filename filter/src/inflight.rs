//! Proxy-wide in-flight counts per balancing slot, in proxy-wasm shared data so every worker VM
//! sees the requests the others started (`least_loaded`, `power_of_two`, the load guards).
//!
//! One entry per model, `ferrogate.inflight.<model>`: the layout's fingerprint (u64 LE, see
//! `ModelRouting::fingerprint`) then one u32 LE count per slot. Updated with CAS (read, change,
//! write with the CAS token, retried on a conflict) when a request is picked and when its stream
//! ends (`on_log`, which also runs when the client went away). An entry written under another
//! layout (a snapshot changed the model's targets) is restarted from zero; a request started
//! under the old layout then has nothing to decrement and leaves it alone.

use proxy_wasm::hostcalls;

/// A CAS token for "this key must not exist yet" (Envoy's tokens count up from 1).
const ABSENT: u32 = u32::MAX;

/// How many CAS conflicts an update tolerates before giving up (the count is then off by one
/// until that request ends; it never goes below zero).
const RETRIES: usize = 16;

/// The shared-data key of `model`'s counts.
pub(crate) fn key(model: &str) -> String {
    format!("ferrogate.inflight.{model}")
}

/// The counts of `key` under `fingerprint` into `out` (emptied first; left empty when the entry
/// is missing or has another layout).
pub(crate) fn read(key: &str, fingerprint: u64, out: &mut Vec<u32>) {
    out.clear();
    if let Ok((Some(bytes), _)) = hostcalls::get_shared_data(key) {
        if let Some(counts) = counts_of(&bytes, fingerprint) {
            out.extend(counts);
        }
    }
}

/// Adds `delta` to slot `slot` of `slots` under `fingerprint`. A decrement of an entry with
/// another layout does nothing; an increment restarts it.
pub(crate) fn add(key: &str, fingerprint: u64, slots: usize, slot: usize, delta: i64) {
    update(key, fingerprint, slots, slot, delta, None);
}

/// Counts one more request on slot `slot` unless it already has `cap` (flow control's bound,
/// checked and raised in one CAS, so two VMs cannot both take the last place). False when the
/// slot is full.
pub(crate) fn try_add(key: &str, fingerprint: u64, slots: usize, slot: usize, cap: Option<u32>) -> bool {
    update(key, fingerprint, slots, slot, 1, cap)
}

fn update(key: &str, fingerprint: u64, slots: usize, slot: usize, delta: i64, cap: Option<u32>) -> bool {
    for _ in 0..RETRIES {
        let Ok((current, cas)) = hostcalls::get_shared_data(key) else { return true };
        let mut counts: Vec<u32> = match current.as_deref().and_then(|b| counts_of(b, fingerprint)) {
            Some(counts) => counts.collect(),
            None if delta < 0 => return true,
            None => Vec::new(),
        };
        counts.resize(slots.max(counts.len()), 0);
        if cap.is_some_and(|cap| counts.get(slot).is_some_and(|&c| c >= cap)) {
            return false;
        }
        if let Some(c) = counts.get_mut(slot) {
            let next = (i64::from(*c) + delta).clamp(0, i64::from(u32::MAX));
            *c = u32::try_from(next).unwrap_or(0);
        }
        let mut bytes = Vec::with_capacity(8 + 4 * counts.len());
        bytes.extend_from_slice(&fingerprint.to_le_bytes());
        counts.iter().for_each(|c| bytes.extend_from_slice(&c.to_le_bytes()));
        // A key that does not exist yet is created with a CAS token no entry can have, so two
        // VMs creating it at once cannot both succeed (Envoy inserts an absent key whatever the
        // token, and refuses a present one whose token differs). A CAS conflict (another VM
        // wrote in between) is retried; any other error gives up.
        let token = if current.is_some() { cas } else { Some(ABSENT) };
        match hostcalls::set_shared_data(key, Some(&bytes), token) {
            Ok(()) => return true,
            Err(proxy_wasm::types::Status::CasMismatch) => continue,
            Err(_) => return true,
        }
    }
    // Too many conflicts: a bounded slot is not taken (the request waits and tries again); an
    // unbounded count is off by one until this request ends.
    cap.is_none()
}

/// The counts in `bytes` when written under `fingerprint`.
fn counts_of(bytes: &[u8], fingerprint: u64) -> Option<impl Iterator<Item = u32> + '_> {
    let head: [u8; 8] = bytes.get(..8)?.try_into().ok()?;
    (u64::from_le_bytes(head) == fingerprint).then(|| {
        bytes.get(8..).unwrap_or_default().chunks_exact(4).map(|c| <[u8; 4]>::try_from(c).map_or(0, u32::from_le_bytes))
    })
}
