//! Byte searches eight bytes per step.
//!
//! The filter scans every request and response body for a byte or two (a quote, a
//! backslash). wasm32 has no SIMD here and `iter().position` tests one byte per loop turn; a
//! `u64` word at a time (the classic has-zero-byte test) does eight.

const ONES: u64 = u64::MAX / 255;
const HIGH: u64 = ONES * 0x80;

/// Non-zero iff some byte of `word` equals `byte`; the lowest set high bit marks the first
/// one (higher bits may be false positives after it, never before it).
fn matches(word: u64, byte: u8) -> u64 {
    let x = word ^ (ONES * u64::from(byte));
    x.wrapping_sub(ONES) & !x & HIGH
}

/// Position of the first byte of `hay` that `flags` marks in a word (exactly: the lowest flag
/// of a word is always a true one) and `plain` says of a single byte, for the tail.
fn first_flagged(hay: &[u8], flags: impl Fn(u64) -> u64, plain: impl Fn(u8) -> bool) -> Option<usize> {
    let mut chunks = hay.chunks_exact(8);
    let mut at = 0;
    for chunk in &mut chunks {
        let Ok(word) = <[u8; 8]>::try_from(chunk) else { break };
        let m = flags(u64::from_le_bytes(word));
        if m != 0 {
            return Some(at + (m.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    chunks.remainder().iter().position(|&c| plain(c)).map(|i| at + i)
}

/// Position of the first `byte` in `hay`.
pub fn find_byte(hay: &[u8], byte: u8) -> Option<usize> {
    first_flagged(hay, |w| matches(w, byte), |c| c == byte)
}

/// `a == b`, a word per step: in wasm, slice equality calls a `memcmp` that compares one
/// byte per loop turn.
pub fn eq(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    let word =
        |s: &[u8], at: usize| s.get(at..at + 8).and_then(|w| <[u8; 8]>::try_from(w).ok()).map(u64::from_le_bytes);
    let half =
        |s: &[u8], at: usize| s.get(at..at + 4).and_then(|w| <[u8; 4]>::try_from(w).ok()).map(u32::from_le_bytes);
    match n {
        0..4 => a.iter().zip(b).all(|(x, y)| x == y),
        // Two overlapping halves, two overlapping words.
        4..8 => half(a, 0) == half(b, 0) && half(a, n - 4) == half(b, n - 4),
        _ => (0..n - 8).step_by(8).all(|at| word(a, at) == word(b, at)) && word(a, n - 8) == word(b, n - 8),
    }
}

/// Position of the first `needle` in `hay`: eight candidate positions per step, each
/// needing its first and last byte in place before the whole needle is compared.
pub fn find_sub(hay: &[u8], needle: &[u8]) -> Option<usize> {
    let (Some(&first), Some(&last)) = (needle.first(), needle.last()) else { return Some(0) };
    let span = needle.len() - 1;
    let mut at = 0;
    // Both words in range: `at + span + 8 <= hay.len()`.
    while at + span + 8 <= hay.len() {
        let word = |from: usize| hay.get(from..from + 8).and_then(|w| <[u8; 8]>::try_from(w).ok());
        let (Some(head), Some(tail)) = (word(at), word(at + span)) else { break };
        // Every true match keeps its flag in both masks (only spurious flags can appear).
        let mut m = matches(u64::from_le_bytes(head), first) & matches(u64::from_le_bytes(tail), last);
        while m != 0 {
            let i = at + (m.trailing_zeros() / 8) as usize;
            if hay.get(i..i + needle.len()).is_some_and(|w| eq(w, needle)) {
                return Some(i);
            }
            m &= m - 1;
        }
        at += 8;
    }
    let rest = hay.get(at..)?;
    rest.windows(needle.len()).position(|w| eq(w, needle)).map(|i| at + i)
}

/// Position of the first `a` or `b` in `hay` (a string's closing quote or next escape).
pub fn find_either(hay: &[u8], a: u8, b: u8) -> Option<usize> {
    // Each mask's lowest flag is a true match, so the lowest of both is the first.
    first_flagged(hay, |w| matches(w, a) | matches(w, b), |c| c == a || c == b)
}

/// Position of the first byte inside a JSON string that is not plain content: a quote, a
/// backslash or a control character (below 0x20).
pub fn find_string_special(hay: &[u8]) -> Option<usize> {
    let flags = |w: u64| matches(w, b'"') | matches(w, b'\\') | (w.wrapping_sub(ONES * 0x20) & !w & HIGH);
    first_flagged(hay, flags, |c| c == b'"' || c == b'\\' || c < 0x20)
}

/// [`find_string_special`], or a byte above 0x7f (where a validator checks UTF-8).
pub fn find_string_special_or_non_ascii(hay: &[u8]) -> Option<usize> {
    let flags = |w: u64| matches(w, b'"') | matches(w, b'\\') | (w.wrapping_sub(ONES * 0x20) & !w & HIGH) | (w & HIGH);
    first_flagged(hay, flags, |c| c == b'"' || c == b'\\' || !(0x20..=0x7f).contains(&c))
}

/// Position of the last `byte` in `hay`.
pub fn rfind_byte(hay: &[u8], byte: u8) -> Option<usize> {
    let mut chunks = hay.rchunks_exact(8);
    let mut end = hay.len();
    for chunk in &mut chunks {
        end -= 8;
        let Ok(word) = <[u8; 8]>::try_from(chunk) else { break };
        // Big-endian: the last byte is the lowest, and the lowest flag is always a true match.
        let m = matches(u64::from_be_bytes(word), byte);
        if m != 0 {
            return Some(end + 7 - (m.trailing_zeros() / 8) as usize);
        }
    }
    chunks.remainder().iter().rposition(|&b| b == byte)
}

#[cfg(test)]
mod tests {
    use super::{find_byte, find_either, find_string_special, find_string_special_or_non_ascii, find_sub, rfind_byte};

    #[test]
    fn agree_with_iterators_at_every_position_and_length() {
        for len in 0..40 {
            for a in 0..=len {
                for b in a..=len {
                    // Marks at a and b (when inside), with byte values around the target.
                    let hay: Vec<u8> = (0..len)
                        .map(|i| if i == a || i == b { b'"' } else { [b'!', b'#', 0x22 ^ 0x80, 0][i % 4] })
                        .collect();
                    assert_eq!(find_byte(&hay, b'"'), hay.iter().position(|&c| c == b'"'), "{hay:?}");
                    assert_eq!(rfind_byte(&hay, b'"'), hay.iter().rposition(|&c| c == b'"'), "{hay:?}");
                    let either = hay.iter().position(|&c| c == b'"' || c == b'#');
                    assert_eq!(find_either(&hay, b'"', b'#'), either, "{hay:?}");
                    let special = hay.iter().position(|&c| c == b'"' || c == b'\\' || c < 0x20);
                    assert_eq!(find_string_special(&hay), special, "{hay:?}");
                    let stop = hay.iter().position(|&c| c == b'"' || c == b'\\' || !(0x20..=0x7f).contains(&c));
                    assert_eq!(find_string_special_or_non_ascii(&hay), stop, "{hay:?}");
                }
            }
        }
        assert_eq!(find_byte(&[0x01; 16], 0), None);
    }

    #[test]
    fn eq_agrees_with_slice_equality() {
        for len in 0..40 {
            let a: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            assert!(super::eq(&a, &a));
            for at in 0..len {
                let mut b = a.clone();
                b[at] ^= 0x20;
                assert!(!super::eq(&a, &b), "{len} {at}");
            }
            assert!(!super::eq(&a, &a[..len.saturating_sub(1)]) || len == 0);
        }
    }

    #[test]
    fn string_stops_at_each_kind_of_byte_anywhere() {
        for len in 1..20 {
            for at in 0..len {
                for mark in [0x80, 0xff, 0xc3, 0x7f, 0x1f, 0x20, b'"', b'\\', b'a'] {
                    let mut hay = vec![b'a'; len];
                    hay[at] = mark;
                    let stop = hay.iter().position(|&c| c == b'"' || c == b'\\' || !(0x20..=0x7f).contains(&c));
                    assert_eq!(find_string_special_or_non_ascii(&hay), stop, "{hay:?}");
                    let special = hay.iter().position(|&c| c == b'"' || c == b'\\' || c < 0x20);
                    assert_eq!(find_string_special(&hay), special, "{hay:?}");
                }
            }
        }
    }

    #[test]
    fn find_sub_agrees_with_windows() {
        let needle = b"\"stream\"";
        for len in 0..48 {
            for at in 0..len {
                // The needle (cut short at the end) at `at`, decoys of its first or last byte around.
                let mut hay: Vec<u8> = (0..len).map(|i| [b'"', b'a', b'"', b'm'][i % 4]).collect();
                for (i, &b) in needle.iter().enumerate() {
                    if let Some(h) = hay.get_mut(at + i) {
                        *h = b;
                    }
                }
                let want = hay.windows(needle.len()).position(|w| w == needle);
                assert_eq!(find_sub(&hay, needle), want, "{}", String::from_utf8_lossy(&hay));
            }
        }
        assert_eq!(find_sub(b"abc", b""), Some(0));
        assert_eq!(find_sub(b"ab", b"abc"), None);
        assert_eq!(rfind_byte(&[0x01, 0x00, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01], 0), Some(1));
    }
}
