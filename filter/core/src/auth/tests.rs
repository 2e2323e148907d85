//! Authentication tests: key extraction, every 401, expiry boundary, open mode.

use super::*;
use crate::testing::{keys_config, CAROL_EXPIRES};

type Headers = (Option<&'static str>, Option<&'static str>, Option<&'static str>);

#[test]
fn extract_key_table() {
    let cases: [(Headers, Option<&str>); 15] = [
        ((None, None, None), None),
        ((Some("Bearer sk-1"), None, None), Some("sk-1")),
        ((Some("bearer sk-1"), None, None), Some("sk-1")),
        ((Some("BEARER \t sk-1  "), None, None), Some("sk-1")),
        ((Some("  Bearer sk-1"), None, None), Some("sk-1")),
        // Not a bearer credential: skipped, the next header is used.
        ((Some("Basic dXNlcg=="), Some("sk-2"), None), Some("sk-2")),
        ((Some("Bearersk-1"), None, None), None),
        ((Some("sk-1"), None, None), None),
        ((Some("Bearer "), None, Some("sk-3")), Some("sk-3")),
        ((Some("Bearer"), None, None), None),
        // First present wins, in header order.
        ((Some("Bearer sk-1"), Some("sk-2"), Some("sk-3")), Some("sk-1")),
        ((None, Some("sk-2"), Some("sk-3")), Some("sk-2")),
        ((None, Some(" "), Some("sk-3")), Some("sk-3")),
        ((None, None, Some("sk-3")), Some("sk-3")),
        ((Some(""), Some(""), Some("")), None),
    ];
    for ((a, x, g), want) in cases {
        let got = extract_key(a.map(str::as_bytes), x.map(str::as_bytes), g.map(str::as_bytes));
        assert_eq!(got, want.map(str::as_bytes), "{a:?} {x:?} {g:?}");
    }
}

#[test]
fn digest_round_trip() {
    let d = key_digest(b"sk-alice");
    assert_eq!(d, "sha256:099295a3784e1bd368dc348843a7398c1931b6b8ec2504c73e91ed2040bdc46c");
    assert!(crate::config::syntax::check_digest(&d).is_ok());
    let raw = parse_digest(&d).unwrap();
    assert_eq!(raw, <[u8; 32]>::from(Sha256::digest(b"sk-alice")));
    for bad in ["sha256:ab", "md5:00", &format!("sha256:{}", "AB".repeat(32))] {
        assert_eq!(parse_digest(bad), None, "{bad}");
    }
}

#[test]
fn index_covers_every_key() {
    let c = keys_config();
    assert_eq!(c.digest_index.len(), c.keys.len());
    for (i, k) in c.keys.iter().enumerate() {
        assert_eq!(c.digest_index.get(&parse_digest(&k.digest).unwrap()), Some(&i));
    }
}

/// Digests that differ only in their last bytes (sequential, hand-made) must still spread
/// over the buckets hashbrown picks with the hash's low bits; they once shared 16 buckets,
/// which made a 10,000-key index quadratic to build.
#[test]
fn digest_hasher_spreads_similar_digests() {
    use std::hash::BuildHasher;
    let build = std::hash::BuildHasherDefault::<DigestHasher>::default();
    let buckets: std::collections::BTreeSet<u64> = (1..=4096u64)
        .map(|k| {
            let mut d = [0u8; 32];
            d[24..].copy_from_slice(&k.to_be_bytes());
            build.hash_one(d) & 4095
        })
        .collect();
    // 4096 random balls in 4096 bins fill about 63 % of them.
    assert!(buckets.len() > 2400, "{} buckets", buckets.len());
}

#[test]
fn authenticate_table() {
    let c = keys_config();
    let now = 1_700_000_000;
    let cases: [(Option<&str>, i64, Result<Caller, AuthError>); 9] = [
        (Some("sk-alice"), now, Ok(Caller::Key(0))),
        (Some("sk-frank"), now, Ok(Caller::Key(5))),
        (None, now, Err(AuthError::Missing)),
        (Some("sk-nobody"), now, Err(AuthError::Unknown)),
        // Digests are of the exact bytes: no trimming or case folding here.
        (Some("SK-ALICE"), now, Err(AuthError::Unknown)),
        (Some(""), now, Err(AuthError::Unknown)),
        // Expired when now >= expires_at: the written instant is already invalid.
        (Some("sk-carol"), CAROL_EXPIRES - 1, Ok(Caller::Key(2))),
        (Some("sk-carol"), CAROL_EXPIRES, Err(AuthError::Expired)),
        (Some("sk-carol"), CAROL_EXPIRES + 1, Err(AuthError::Expired)),
    ];
    for (key, at, want) in cases {
        assert_eq!(c.authenticate(key.map(str::as_bytes), at), want, "{key:?} @{at}");
    }
    assert_eq!(c.key(Caller::Key(0)).map(|k| k.name.as_str()), Some("alice"));
    assert_eq!(c.key(Caller::Open), None);
}

#[test]
fn auth_errors_are_distinct_401s_without_the_key() {
    let c = keys_config();
    let secret = "sk-not-configured-0123456789";
    let unknown = c.authenticate(Some(secret.as_bytes()), 0).unwrap_err();
    let errors = [AuthError::Missing, unknown, AuthError::Expired].map(ApiError::from);
    for e in &errors {
        assert_eq!(e.status, 401);
        assert_eq!(e.kind, "invalid_request_error");
        assert_eq!(e.code, Some("invalid_api_key"));
        assert!(!e.message.contains(secret));
        assert!(!String::from_utf8(e.body()).unwrap().contains(secret));
    }
    assert_ne!(errors[0].message, errors[1].message);
    assert_ne!(errors[1].message, errors[2].message);
    assert_ne!(errors[0].message, errors[2].message);
}

#[test]
fn open_mode_without_keys() {
    let c = Config::default();
    assert_eq!(c.authenticate(None, 0), Ok(Caller::Open));
    assert_eq!(c.authenticate(Some(b"anything"), 0), Ok(Caller::Open));
    // A keyed config never yields Open.
    assert!(keys_config().authenticate(None, 0).is_err());
}

#[test]
fn gemini_keys_may_come_in_the_query() {
    use super::gemini_query_key;
    assert_eq!(gemini_query_key("/v1beta/models/m:generateContent?key=fg-1"), Some(&b"fg-1"[..]));
    assert_eq!(gemini_query_key("/v1beta/models/m:streamGenerateContent?alt=sse&key=k#x"), Some(&b"k"[..]));
    assert_eq!(gemini_query_key("/v1beta/models/m:generateContent?key="), None);
    assert_eq!(gemini_query_key("/v1beta/models/m:generateContent?apikey=k"), None);
    assert_eq!(gemini_query_key("/v1/chat/completions?key=k"), None, "only Gemini paths");
    // Found by the request_path fuzz target: whitespace around the value is trimmed, as in
    // the credential headers.
    assert_eq!(gemini_query_key("/v1beta/m:x?a=1&key=\nk1\n&b"), Some(&b"k1"[..]));
    assert_eq!(gemini_query_key("/v1beta/m:x?key=\n"), None);
}
