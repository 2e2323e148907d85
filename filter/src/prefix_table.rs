//! The proxy-wide prefix record of `cache_aware` ([`ferrogate_core::balance::PrefixTable`]) in
//! proxy-wasm shared data, so every worker VM sees where the others sent each conversation.
//!
//! Shared data has no delete, so the record is a fixed set of [`ROOMS`] entries named
//! `ferrogate.prefix.<room>` (hexadecimal), a checkpoint key taking room `key % ROOMS`. An entry
//! holds the key (u64 LE) and the slot (u64 LE): a read whose key differs finds another
//! checkpoint in that room and reports nothing. Writes replace the room's entry without CAS
//! (last writer wins, like the engines' caches). Bound: `ROOMS` entries of 16 bytes plus the
//! host's per-key overhead, about 1.5 MiB per proxy, shared by every model.

use ferrogate_core::balance::PrefixTable;
use proxy_wasm::hostcalls;

/// Entries of the record (a power of two; a room is `key % ROOMS`).
pub(crate) const ROOMS: u64 = 16_384;

/// `ferrogate.prefix.` and up to four hex digits.
const PREFIX: &[u8] = b"ferrogate.prefix.";

/// The shared-data record; stateless (the state lives in the host).
#[derive(Debug)]
pub(crate) struct SharedPrefixTable;

impl PrefixTable for SharedPrefixTable {
    fn get(&self, key: u64) -> Option<u64> {
        let name = RoomName::of(key);
        let (bytes, _) = hostcalls::get_shared_data(name.as_str()).ok()?;
        let bytes = bytes?;
        let word = |at: usize| bytes.get(at..at + 8).and_then(|b| <[u8; 8]>::try_from(b).ok()).map(u64::from_le_bytes);
        (word(0)? == key).then_some(word(8)?)
    }

    fn put(&self, key: u64, value: u64) {
        let mut entry = [0u8; 16];
        entry[..8].copy_from_slice(&key.to_le_bytes());
        entry[8..].copy_from_slice(&value.to_le_bytes());
        // Best effort: a failed write only leaves the record less informed.
        let _ = hostcalls::set_shared_data(RoomName::of(key).as_str(), Some(&entry), None);
    }
}

/// A room's shared-data key, built on the stack (no allocation per lookup).
struct RoomName {
    buf: [u8; PREFIX.len() + 4],
    len: usize,
}

impl RoomName {
    fn of(key: u64) -> Self {
        let mut buf = [0u8; PREFIX.len() + 4];
        buf[..PREFIX.len()].copy_from_slice(PREFIX);
        let room = key % ROOMS;
        let mut len = PREFIX.len();
        for shift in [12u32, 8, 4, 0] {
            let digit = ((room >> shift) & 0xf) as usize;
            if let Some(slot) = buf.get_mut(len) {
                *slot = b"0123456789abcdef".get(digit).copied().unwrap_or(b'0');
            }
            len += 1;
        }
        Self { buf, len }
    }

    fn as_str(&self) -> &str {
        std::str::from_utf8(self.buf.get(..self.len).unwrap_or_default()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_names_are_fixed_width_hex_within_the_bound() {
        assert_eq!(RoomName::of(0).as_str(), "ferrogate.prefix.0000");
        assert_eq!(RoomName::of(ROOMS - 1).as_str(), "ferrogate.prefix.3fff");
        assert_eq!(RoomName::of(ROOMS + 0xab).as_str(), "ferrogate.prefix.00ab");
    }
}
