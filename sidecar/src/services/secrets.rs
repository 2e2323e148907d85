//! Envelope encryption of provider API keys at rest.
//!
//! Provider credentials are stored encrypted in the store and opened only when the gateway
//! needs them. The operator supplies one *master key* (`FERROGATE_MASTER_KEY`, standard base64
//! of 32 random bytes, e.g. `openssl rand -base64 32`); it never encrypts a secret directly.
//!
//! Design (envelope encryption, AES-256-GCM throughout):
//! - every secret gets its own fresh random 32-byte *data key* (DEK) that encrypts the
//!   plaintext; the DEK is then *wrapped* (encrypted) under the master key and stored next to
//!   the ciphertext. A DEK never encrypts more than one message, so nonce reuse across secrets
//!   is not a concern, and rotating the master key later only has to re-wrap the small DEKs,
//!   not re-encrypt every secret;
//! - both layers authenticate an *associated data* string (AAD) naming the row and field, e.g.
//!   `"providers/openai/api_key"`, so a ciphertext copied to another row does not open;
//! - any modification, truncation, wrong AAD or wrong master key is reported as an error,
//!   never a panic, and error messages never contain plaintext or key material.

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Key, Nonce};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;

/// Name of the environment variable holding the master key.
pub const MASTER_KEY_ENV: &str = "FERROGATE_MASTER_KEY";

/// Prefix (and format version) of a sealed secret.
pub const SEALED_PREFIX: &str = "fgs1:";

const KEY_LEN: usize = 32;
const NONCE_LEN: usize = 12;
const TAG_LEN: usize = 16;
const WRAPPED_LEN: usize = KEY_LEN + TAG_LEN;
// Decoded blob layout (after the "fgs1:" prefix and standard base64):
//   [0..12)    nonce_wrap   nonce of the DEK wrapping, under the master key
//   [12..60)   wrapped_dek  32-byte DEK encrypted under the master key + 16-byte GCM tag
//   [60..72)   nonce_data   nonce of the data encryption, under the DEK
//   [72..)     ciphertext   plaintext encrypted under the DEK + 16-byte GCM tag
// Both layers use the caller's `aad` string as associated data.
const DATA_NONCE_AT: usize = NONCE_LEN + WRAPPED_LEN;
const CIPHERTEXT_AT: usize = DATA_NONCE_AT + NONCE_LEN;
const MIN_BLOB_LEN: usize = CIPHERTEXT_AT + TAG_LEN;

/// Errors of master key parsing and of sealing/opening secrets. Messages never include
/// plaintext or key material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// The master key is not standard base64 of exactly 32 bytes.
    #[error(
        "bad master key: {MASTER_KEY_ENV} must be standard base64 of exactly 32 bytes \
         (generate one with `openssl rand -base64 32`)"
    )]
    BadMasterKey,
    /// The sealed value is not a well-formed `fgs1:` blob (prefix, base64 or length).
    #[error("malformed sealed secret: expected \"{SEALED_PREFIX}\" followed by base64 data")]
    Malformed,
    /// Authentication failed: wrong master key, sealed for another row, or modified.
    #[error("sealed secret failed authentication (wrong master key, wrong row, or modified)")]
    Tampered,
    /// The plaintext is beyond what AES-GCM can encrypt in one message (about 64 GiB).
    #[error("secret too large to encrypt")]
    TooLarge,
}

/// The operator's 256-bit master key, which wraps the per-secret data keys.
pub struct MasterKey {
    bytes: [u8; KEY_LEN],
}

impl MasterKey {
    /// Parses a master key from standard base64 of exactly 32 bytes (surrounding whitespace
    /// is ignored).
    pub fn from_base64(encoded: &str) -> Result<MasterKey, SecretError> {
        let mut decoded = B64.decode(encoded.trim()).map_err(|_| SecretError::BadMasterKey)?;
        let key = <[u8; KEY_LEN]>::try_from(decoded.as_slice())
            .map(|bytes| MasterKey { bytes })
            .map_err(|_| SecretError::BadMasterKey);
        wipe(&mut decoded);
        key
    }

    /// Reads the master key from `FERROGATE_MASTER_KEY`: `Ok(None)` when unset or empty, an
    /// error when set but not valid.
    pub fn from_env() -> Result<Option<MasterKey>, SecretError> {
        match std::env::var(MASTER_KEY_ENV) {
            Ok(value) if value.trim().is_empty() => Ok(None),
            Ok(value) => MasterKey::from_base64(&value).map(Some),
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => Err(SecretError::BadMasterKey),
        }
    }

    /// Encrypts `plaintext` under a fresh data key wrapped by this master key, bound to `aad`
    /// (the row/field name, e.g. `"providers/openai/api_key"`). Returns `"fgs1:" + base64`.
    /// Only fails ([`SecretError::TooLarge`]) beyond the AES-GCM message limit (~64 GiB).
    pub fn seal(&self, plaintext: &[u8], aad: &str) -> Result<String, SecretError> {
        let mut dek: [u8; KEY_LEN] = rand::random();
        let nonce_wrap: [u8; NONCE_LEN] = rand::random();
        let nonce_data: [u8; NONCE_LEN] = rand::random();
        let wrapped = encrypt(&self.bytes, &nonce_wrap, &dek, aad);
        let sealed = encrypt(&dek, &nonce_data, plaintext, aad);
        wipe(&mut dek);
        let (wrapped, sealed) = (wrapped?, sealed?);
        let mut blob = Vec::with_capacity(CIPHERTEXT_AT + sealed.len());
        blob.extend_from_slice(&nonce_wrap);
        blob.extend_from_slice(&wrapped);
        blob.extend_from_slice(&nonce_data);
        blob.extend_from_slice(&sealed);
        Ok(format!("{SEALED_PREFIX}{}", B64.encode(blob)))
    }

    /// Decrypts a value produced by [`MasterKey::seal`] with the same `aad`. Any tampering,
    /// truncation, wrong `aad` or wrong master key is an error.
    pub fn open(&self, sealed: &str, aad: &str) -> Result<Vec<u8>, SecretError> {
        let encoded = sealed.strip_prefix(SEALED_PREFIX).ok_or(SecretError::Malformed)?;
        let blob = B64.decode(encoded).map_err(|_| SecretError::Malformed)?;
        if blob.len() < MIN_BLOB_LEN {
            return Err(SecretError::Malformed);
        }
        let mut dek_vec = decrypt(&self.bytes, &blob[..NONCE_LEN], &blob[NONCE_LEN..DATA_NONCE_AT], aad)?;
        let dek = <[u8; KEY_LEN]>::try_from(dek_vec.as_slice()).map_err(|_| SecretError::Tampered);
        wipe(&mut dek_vec);
        let mut dek = dek?;
        let opened = decrypt(&dek, &blob[DATA_NONCE_AT..CIPHERTEXT_AT], &blob[CIPHERTEXT_AT..], aad);
        wipe(&mut dek);
        opened
    }
}

impl std::fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MasterKey(..)")
    }
}

impl Drop for MasterKey {
    fn drop(&mut self) {
        wipe(&mut self.bytes);
    }
}

/// Overwrites key material; `black_box` keeps the stores from being optimised away.
fn wipe(bytes: &mut [u8]) {
    bytes.fill(0);
    std::hint::black_box(bytes);
}

fn encrypt(key: &[u8; KEY_LEN], nonce: &[u8; NONCE_LEN], msg: &[u8], aad: &str) -> Result<Vec<u8>, SecretError> {
    Aes256Gcm::new(Key::<Aes256Gcm>::from_slice(key))
        .encrypt(Nonce::from_slice(nonce), Payload { msg, aad: aad.as_bytes() })
        .map_err(|_| SecretError::TooLarge)
}

fn decrypt(key: &[u8; KEY_LEN], nonce: &[u8], msg: &[u8], aad: &str) -> Result<Vec<u8>, SecretError> {
    Aes256Gcm::new(Key::<Aes256Gcm>::from_slice(key))
        .decrypt(Nonce::from_slice(nonce), Payload { msg, aad: aad.as_bytes() })
        .map_err(|_| SecretError::Tampered)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    const AAD: &str = "providers/openai/api_key";

    fn key_b64(byte: u8) -> String {
        B64.encode([byte; KEY_LEN])
    }

    fn key(byte: u8) -> MasterKey {
        MasterKey::from_base64(&key_b64(byte)).unwrap()
    }

    #[test]
    fn round_trip() {
        let k = key(7);
        for plaintext in [&b""[..], b"sk-test-123", &[0xffu8; 1000][..]] {
            let sealed = k.seal(plaintext, AAD).unwrap();
            assert!(sealed.starts_with(SEALED_PREFIX));
            assert_eq!(k.open(&sealed, AAD).unwrap(), plaintext);
        }
    }

    #[test]
    fn seals_of_same_plaintext_differ() {
        let k = key(7);
        assert_ne!(k.seal(b"sk-same", AAD).unwrap(), k.seal(b"sk-same", AAD).unwrap());
    }

    #[test]
    fn every_bit_flip_is_rejected() {
        let k = key(7);
        let sealed = k.seal(b"sk-abc", AAD).unwrap();
        let blob = B64.decode(&sealed[SEALED_PREFIX.len()..]).unwrap();
        for bit in 0..blob.len() * 8 {
            let mut bad = blob.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            let reencoded = format!("{SEALED_PREFIX}{}", B64.encode(&bad));
            assert_eq!(k.open(&reencoded, AAD), Err(SecretError::Tampered), "bit {bit}");
        }
    }

    #[test]
    fn truncation_is_rejected() {
        let k = key(7);
        let sealed = k.seal(b"sk-abc", AAD).unwrap();
        let blob = B64.decode(&sealed[SEALED_PREFIX.len()..]).unwrap();
        for len in 0..blob.len() {
            let cut = format!("{SEALED_PREFIX}{}", B64.encode(&blob[..len]));
            assert!(k.open(&cut, AAD).is_err(), "length {len}");
        }
        assert!(k.open(&sealed[..sealed.len() - 4], AAD).is_err());
    }

    #[test]
    fn wrong_aad_and_wrong_key_are_rejected() {
        let sealed = key(7).seal(b"sk-abc", AAD).unwrap();
        assert_eq!(key(7).open(&sealed, "providers/anthropic/api_key"), Err(SecretError::Tampered));
        assert_eq!(key(8).open(&sealed, AAD), Err(SecretError::Tampered));
    }

    #[test]
    fn bad_prefix_and_bad_base64_are_malformed() {
        let k = key(7);
        let sealed = k.seal(b"sk-abc", AAD).unwrap();
        let body = &sealed[SEALED_PREFIX.len()..];
        assert_eq!(k.open(&format!("fgs2:{body}"), AAD), Err(SecretError::Malformed));
        assert_eq!(k.open(body, AAD), Err(SecretError::Malformed));
        assert_eq!(k.open("fgs1:not base64!!", AAD), Err(SecretError::Malformed));
        assert_eq!(k.open("", AAD), Err(SecretError::Malformed));
    }

    #[test]
    fn master_key_must_be_32_bytes_of_base64() {
        assert!(MasterKey::from_base64(&B64.encode([1u8; 32])).is_ok());
        assert!(MasterKey::from_base64(&format!(" {}\n", B64.encode([1u8; 32]))).is_ok());
        for bad in [B64.encode([1u8; 31]), B64.encode([1u8; 33]), "not base64!!".into(), String::new()] {
            assert_eq!(MasterKey::from_base64(&bad).unwrap_err(), SecretError::BadMasterKey);
        }
        assert!(SecretError::BadMasterKey.to_string().contains("base64 of exactly 32 bytes"));
    }

    #[test]
    fn debug_does_not_reveal_the_key() {
        let encoded = key_b64(42);
        let shown = format!("{:?}", MasterKey::from_base64(&encoded).unwrap());
        assert_eq!(shown, "MasterKey(..)");
        assert!(!shown.contains(&encoded));
    }
}
