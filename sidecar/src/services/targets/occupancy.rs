//! An engine's LMCache occupancy, read from the JSON source a provider's `lmcache.occupancy`
//! names: `{"occupancy": 0.42, "cache_available": true}`.
//!
//! `occupancy` is clamped to 0..=1. `cache_available: false` says the cache takes nothing now:
//! the engine counts as full (1). `cache_available` left out counts as true. Anything else (no
//! answer, not 2xx, not such an object, no number) is unknown, which `lmcache_aware` treats as
//! neutral; the value is never carried over from an earlier read.

use serde::Deserialize;

/// Largest occupancy answer read.
pub const BODY_LIMIT: usize = 16 << 10;

#[derive(Deserialize)]
struct Signal {
    occupancy: f64,
    #[serde(default = "available")]
    cache_available: bool,
}

fn available() -> bool {
    true
}

/// The occupancy (0..=1) an answer body states; `None` when it states none.
pub fn parse(body: &[u8]) -> Option<f64> {
    let signal: Signal = serde_json::from_slice(body).ok()?;
    if !signal.cache_available {
        return Some(1.0);
    }
    signal.occupancy.is_finite().then(|| signal.occupancy.clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn the_signal_is_clamped_and_an_unavailable_cache_is_full() {
        assert_eq!(parse(br#"{"occupancy": 0.42, "cache_available": true}"#), Some(0.42));
        assert_eq!(parse(br#"{"occupancy": 0.42}"#), Some(0.42));
        assert_eq!(parse(br#"{"occupancy": 1.7, "cache_available": true}"#), Some(1.0));
        assert_eq!(parse(br#"{"occupancy": -3}"#), Some(0.0));
        assert_eq!(parse(br#"{"occupancy": 0.1, "cache_available": false}"#), Some(1.0));
    }

    #[test]
    fn anything_else_is_unknown() {
        for body in [&b""[..], b"0.4", b"{}", br#"{"occupancy": "0.4"}"#, br#"{"occupancy": null}"#, b"\xff{"] {
            assert_eq!(parse(body), None, "{:?}", String::from_utf8_lossy(body));
        }
    }
}
