//! Client authentication with virtual keys.
//!
//! The config stores only `sha256:<hex>` digests of keys. At validation time they are decoded
//! into a `HashMap<[u8; 32], usize>`, so each request costs one SHA-256 of
//! the presented key and one hash lookup, and allocates nothing on success. Looking up by
//! digest (rather than comparing plaintexts) also means lookup timing can only leak bits of a
//! digest, which does not help recover a key.
//!
//! Mode: with no `keys` at all the gateway is open and every request is [`Caller::Open`]; with
//! at least one key every request must present a valid, unexpired key.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use sha2::{Digest, Sha256};

use crate::config::{Config, Key};
use crate::error::ApiError;

/// Who is calling, as established by [`Config::authenticate`].
///
/// Only meaningful together with the [`Config`] that produced it (a key index is a position in
/// that snapshot's `keys`); keep both for the lifetime of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// The configuration has no keys: everything is allowed. Ignored (grants nothing) by a
    /// configuration that does have keys, so it cannot be used to bypass authentication.
    Open,
    /// A valid key: index into [`Config::keys`].
    Key(usize),
}

impl Caller {
    /// The key index, if the caller authenticated with a key.
    pub fn key_index(self) -> Option<usize> {
        match self {
            Caller::Open => None,
            Caller::Key(i) => Some(i),
        }
    }
}

/// Why authentication failed; every variant is a 401. Messages never contain the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No usable key in any credential header.
    #[error(
        "You didn't provide an API key. Send it as `Authorization: Bearer <key>`, \
         `x-api-key: <key>` or `x-goog-api-key: <key>`."
    )]
    Missing,
    /// The key's digest is not configured.
    #[error("Incorrect API key provided.")]
    Unknown,
    /// The key is configured but `now >= expires_at`.
    #[error("The API key has expired.")]
    Expired,
}

impl From<AuthError> for ApiError {
    fn from(e: AuthError) -> Self {
        ApiError::unauthorized(e.to_string())
    }
}

/// Picks the client key from the credential headers (raw values, as the host returns them).
///
/// Order: `Authorization` (only with the `Bearer` scheme, matched case-insensitively), then
/// `x-api-key` (Anthropic SDKs), then `x-goog-api-key` (Gemini SDKs). A header counts only if
/// it yields a non-empty key after trimming ASCII whitespace, so e.g. `Authorization: Basic …`
/// added by a corporate proxy does not hide an `x-api-key` behind it.
pub fn extract_key<'a>(
    authorization: Option<&'a [u8]>,
    x_api_key: Option<&'a [u8]>,
    x_goog_api_key: Option<&'a [u8]>,
) -> Option<&'a [u8]> {
    authorization
        .and_then(bearer)
        .or_else(|| x_api_key.and_then(non_empty))
        .or_else(|| x_goog_api_key.and_then(non_empty))
}

/// The `key` query parameter of a Gemini path (`/v1beta/...?key=...`), which Google's API and
/// its SDKs accept in place of `x-goog-api-key`. Read only when no credential header gave a
/// key, and only on Gemini paths; never percent-decoded (virtual keys need no escaping). The
/// parameter is dropped from the upstream path ([`crate::route`]).
pub fn gemini_query_key(path: &str) -> Option<&[u8]> {
    if !path.starts_with("/v1beta/") {
        return None;
    }
    let (_, query) = path.split_once('?')?;
    let query = query.split_once('#').map_or(query, |(q, _)| q);
    query.split('&').find_map(|p| p.strip_prefix("key=")).map(str::as_bytes).and_then(non_empty)
}

fn non_empty(v: &[u8]) -> Option<&[u8]> {
    let v = v.trim_ascii();
    (!v.is_empty()).then_some(v)
}

/// The token of `Bearer <token>`; the scheme needs at least one space or tab after it.
fn bearer(v: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = v.trim_ascii_start().split_at_checked(6)?;
    let separated = matches!(rest.first(), Some(b' ' | b'\t'));
    (scheme.eq_ignore_ascii_case(b"bearer") && separated).then(|| non_empty(rest)).flatten()
}

/// The `sha256:<hex>` digest of a plaintext key, as written in the config's `keys[].digest`.
pub fn key_digest(key: &[u8]) -> String {
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256:");
    crate::hex::encode_into(&mut out, &Sha256::digest(key));
    out
}

/// Decodes a validated `sha256:<64 lower-case hex>` digest.
pub(crate) fn parse_digest(digest: &str) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    crate::hex::decode_into(digest.strip_prefix("sha256:")?.as_bytes(), &mut out)?;
    Some(out)
}

/// Hasher for SHA-256 digests, which are already uniformly distributed: folding their bytes
/// and a final mix is a good hash, costs less than SipHash, and needs no random seed (which
/// `wasm32-unknown-unknown` cannot provide). Flooding is not a concern: the table holds only
/// configured digests, and steering a lookup needs SHA-256 preimages.
#[derive(Debug, Clone, Copy, Default)]
pub struct DigestHasher(u64);

impl Hasher for DigestHasher {
    fn finish(&self) -> u64 {
        // A final mix spreads every input bit over the high bits hashbrown groups by and
        // the low bits it indexes with: digests that differ in a few bytes only (hand-made or
        // sequential test digests) would otherwise share buckets and make lookups linear.
        // MurmurHash3's 64-bit finalizer.
        let mut x = self.0;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        x ^ (x >> 33)
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.0 = self.0.rotate_left(29) ^ u64::from_le_bytes(word);
        }
    }
}

/// Raw SHA-256 of a key → index into [`Config::keys`].
pub type DigestIndex = HashMap<[u8; 32], usize, BuildHasherDefault<DigestHasher>>;

impl Config {
    /// Authenticates a request from the key [`extract_key`] found (if any).
    ///
    /// Open mode (no keys configured) accepts everything, with or without a key. Otherwise:
    /// no key → [`AuthError::Missing`]; unknown → [`AuthError::Unknown`]; a key is expired
    /// when `now_unix_secs >= expires_at` (the instant written is the first one it is invalid)
    /// → [`AuthError::Expired`].
    pub fn authenticate(&self, key: Option<&[u8]>, now_unix_secs: i64) -> Result<Caller, AuthError> {
        if self.keys.is_empty() {
            return Ok(Caller::Open);
        }
        let key = key.ok_or(AuthError::Missing)?;
        let digest: [u8; 32] = Sha256::digest(key).into();
        let &index = self.digest_index.get(&digest).ok_or(AuthError::Unknown)?;
        let entry = self.keys.get(index).ok_or(AuthError::Unknown)?;
        if entry.expires_at.is_some_and(|at| now_unix_secs >= at) {
            return Err(AuthError::Expired);
        }
        Ok(Caller::Key(index))
    }

    /// The key behind a caller, if any.
    pub fn key(&self, caller: Caller) -> Option<&Key> {
        self.keys.get(caller.key_index()?)
    }
}

mod memo;
pub use memo::KeyMemo;

#[cfg(test)]
mod tests;
