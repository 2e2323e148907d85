//! The in-proxy store: `cache_store.max_entries` slots in the proxy's shared data, so every
//! worker VM of the proxy sees the same entries. A digest has one slot (its first 32 bits
//! modulo the slot count); storing overwrites whatever was there, so memory is bounded by
//! `max_entries × (max_entry_bytes + 64)` and eviction needs no bookkeeping. Shared-data keys
//! are never deleted by the host; expired entries wait in their slot to be overwritten.

use proxy_wasm::hostcalls;

/// Shared-data key prefix of the slots.
const PREFIX: &str = "ferrogate.cache.";

/// The slot key of `digest` among `slots`.
fn slot_key(digest: &str, slots: u32) -> String {
    let head = digest.get(..8).and_then(|h| u32::from_str_radix(h, 16).ok()).unwrap_or(0);
    format!("{PREFIX}{}", head % slots.max(1))
}

/// The entry bytes stored for `digest`, if its slot holds it.
pub(super) fn get(digest: &str, slots: u32) -> Option<Vec<u8>> {
    let (value, _) = hostcalls::get_shared_data(&slot_key(digest, slots)).ok()?;
    let mut value = value?;
    if value.get(..digest.len()) != Some(digest.as_bytes()) {
        return None;
    }
    Some(value.split_off(digest.len()))
}

/// Puts `entry` in `digest`'s slot (no CAS: the last writer wins, as eviction would).
pub(super) fn put(digest: &str, slots: u32, entry: &[u8]) -> bool {
    let mut value = Vec::with_capacity(digest.len() + entry.len());
    value.extend_from_slice(digest.as_bytes());
    value.extend_from_slice(entry);
    hostcalls::set_shared_data(&slot_key(digest, slots), Some(&value), None).is_ok()
}

#[cfg(test)]
mod tests {
    use super::slot_key;

    #[test]
    fn a_digest_has_one_slot_within_the_bound() {
        let d = "ffffffff".to_string() + &"0".repeat(56);
        assert_eq!(slot_key(&d, 1000), format!("ferrogate.cache.{}", 0xffff_ffffu32 % 1000));
        assert_eq!(slot_key("zz", 10), "ferrogate.cache.0");
        assert_eq!(slot_key(&d, 0), "ferrogate.cache.0");
    }
}
