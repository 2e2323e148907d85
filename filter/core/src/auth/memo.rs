//! A per-VM memo of recently authenticated keys, so a returning key costs a short hash and a
//! constant-time comparison instead of SHA-256 (the largest single item of the request head
//! under load: about 0.8 µs in wasm).
//!
//! Direct-mapped, [`SLOTS`] entries: a key's slot comes from a cheap hash of its bytes; a new
//! key overwrites whatever held its slot. Only keys that authenticated are stored, so unknown
//! keys cannot evict anything, and a caller who picks keys to collide only costs itself the
//! SHA-256 it would have paid anyway. The stored key is compared in constant time, so timing
//! does not reveal how much of a guess matched. Entries are key positions in one [`Config`];
//! whoever holds the memo clears it when the configuration changes.
//!
//! The memo holds plaintext keys in the proxy's memory, as the request headers that carried
//! them do; it never leaves the VM.

use sha2::{Digest, Sha256};

use super::{AuthError, Caller};
use crate::config::Config;

/// Number of keys remembered.
pub const SLOTS: usize = 64;

/// Longest key remembered; longer keys are always hashed (no configured key format is close).
const MAX_KEY: usize = 256;

#[derive(Debug, Clone)]
struct Slot {
    key: Box<[u8]>,
    index: usize,
}

/// Recently authenticated keys → their index in one [`Config`].
#[derive(Debug, Clone)]
pub struct KeyMemo {
    slots: Vec<Option<Slot>>,
}

impl Default for KeyMemo {
    fn default() -> Self {
        KeyMemo { slots: vec![None; SLOTS] }
    }
}

impl KeyMemo {
    /// Forgets every key (the configuration changed).
    pub fn clear(&mut self) {
        self.slots.iter_mut().for_each(|s| *s = None);
    }

    fn slot_of(key: &[u8]) -> usize {
        // FNV-1a: spreads short keys well enough for a direct-mapped table and needs no seed.
        let mut h: u32 = 0x811c_9dc5;
        for &b in key {
            h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
        }
        usize::try_from(h).unwrap_or(0) % SLOTS
    }

    fn get(&self, key: &[u8]) -> Option<usize> {
        let slot = self.slots.get(Self::slot_of(key))?.as_ref()?;
        constant_time_eq(&slot.key, key).then_some(slot.index)
    }

    fn put(&mut self, key: &[u8], index: usize) {
        if key.len() > MAX_KEY {
            return;
        }
        if let Some(slot) = self.slots.get_mut(Self::slot_of(key)) {
            *slot = Some(Slot { key: key.into(), index });
        }
    }
}

/// Equal bytes, in time that depends only on the lengths.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Config {
    /// [`Config::authenticate`] with a memo of keys this configuration accepted before: same
    /// answers, SHA-256 only for keys the memo does not hold. `memo` must have been used only
    /// with this configuration (clear it when the configuration changes).
    pub fn authenticate_memo(
        &self,
        key: Option<&[u8]>,
        now_unix_secs: i64,
        memo: &mut KeyMemo,
    ) -> Result<Caller, AuthError> {
        if self.keys.is_empty() {
            return Ok(Caller::Open);
        }
        let key = key.ok_or(AuthError::Missing)?;
        let index = match memo.get(key) {
            Some(index) => index,
            None => {
                let digest: [u8; 32] = Sha256::digest(key).into();
                let &index = self.digest_index.get(&digest).ok_or(AuthError::Unknown)?;
                memo.put(key, index);
                index
            }
        };
        let entry = self.keys.get(index).ok_or(AuthError::Unknown)?;
        if entry.expires_at.is_some_and(|at| now_unix_secs >= at) {
            return Err(AuthError::Expired);
        }
        Ok(Caller::Key(index))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{keys_config, CAROL_EXPIRES};

    #[test]
    fn answers_like_authenticate_and_remembers_only_accepted_keys() {
        let config = keys_config();
        let mut memo = KeyMemo::default();
        let keys: [&[u8]; 5] = [b"sk-alice", b"sk-bob", b"sk-carol", b"sk-nobody", b"sk-alicf"];
        for now in [0, CAROL_EXPIRES - 1, CAROL_EXPIRES] {
            for _ in 0..2 {
                for key in keys {
                    let plain = config.authenticate(Some(key), now);
                    assert_eq!(config.authenticate_memo(Some(key), now, &mut memo), plain, "{key:?} at {now}");
                }
                assert_eq!(config.authenticate_memo(None, now, &mut memo), Err(AuthError::Missing));
            }
        }
        assert!(memo.get(b"sk-alice").is_some());
        assert!(memo.get(b"sk-nobody").is_none());
        // A prefix or extension of a remembered key is not that key.
        assert!(memo.get(b"sk-alic").is_none());
        assert!(memo.get(b"sk-alicee").is_none());
    }

    #[test]
    fn a_remembered_key_is_checked_for_expiry_every_time() {
        let config = keys_config();
        let mut memo = KeyMemo::default();
        assert!(config.authenticate_memo(Some(b"sk-carol"), CAROL_EXPIRES - 1, &mut memo).is_ok());
        assert!(memo.get(b"sk-carol").is_some());
        assert_eq!(config.authenticate_memo(Some(b"sk-carol"), CAROL_EXPIRES, &mut memo), Err(AuthError::Expired));
    }

    #[test]
    fn a_colliding_key_replaces_the_slot_and_both_stay_correct() {
        let config = keys_config();
        let mut memo = KeyMemo::default();
        memo.put(b"sk-alice", 0);
        // Find another accepted-looking key in alice's slot: stored under a wrong index only if
        // the memo trusted the slot instead of comparing bytes.
        let slot = KeyMemo::slot_of(b"sk-alice");
        let other = (0..10_000).map(|i| format!("sk-x{i}")).find(|k| KeyMemo::slot_of(k.as_bytes()) == slot).unwrap();
        assert!(memo.get(other.as_bytes()).is_none());
        assert_eq!(config.authenticate_memo(Some(other.as_bytes()), 0, &mut memo), Err(AuthError::Unknown));
        assert_eq!(config.authenticate_memo(Some(b"sk-alice"), 0, &mut memo), Ok(Caller::Key(0)));
    }

    #[test]
    fn clear_forgets_and_long_keys_are_not_kept() {
        let mut memo = KeyMemo::default();
        memo.put(b"sk-alice", 0);
        memo.clear();
        assert!(memo.get(b"sk-alice").is_none());
        let long = vec![b'k'; MAX_KEY + 1];
        memo.put(&long, 1);
        assert!(memo.get(&long).is_none());
    }

    #[test]
    fn constant_time_eq_is_equality() {
        assert!(constant_time_eq(b"", b""));
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }
}
