//! Integers written in decimal without 64-bit division.
//!
//! In wasm32 a 64-bit division by a constant stays a real `i64.div_u` (there is no 64×64→128
//! multiply for LLVM to turn it into), tens of cycles each, and `core::fmt` divides once per
//! digit pair. The filter writes a dozen numbers per request (the usage record, headers), so
//! [`Decimal`] takes digits nine at a time from `u32`s, whose division by ten LLVM does
//! turn into a multiply.

/// A `u64` in decimal, on the stack.
#[derive(Clone, Copy)]
pub struct Decimal {
    buf: [u8; 20],
    start: usize,
}

impl Decimal {
    /// Writes `n`.
    pub fn new(n: u64) -> Self {
        let mut buf = [b'0'; 20];
        let start = match n {
            // Most numbers (status, tokens, milliseconds, lengths): one chunk.
            0..=999_999_999 => write_u32(&mut buf, 20, n as u32),
            _ => {
                // The low nine digits, zero-padded, then the rest: at most two u64 divisions.
                let (high, low) = (n / 1_000_000_000, (n % 1_000_000_000) as u32);
                write_nine(&mut buf, 20, low);
                match high {
                    0..=999_999_999 => write_u32(&mut buf, 11, high as u32),
                    _ => {
                        write_nine(&mut buf, 11, (high % 1_000_000_000) as u32);
                        write_u32(&mut buf, 2, (high / 1_000_000_000) as u32)
                    }
                }
            }
        };
        Decimal { buf, start }
    }

    /// The digits.
    pub fn as_bytes(&self) -> &[u8] {
        self.buf.get(self.start..).unwrap_or_default()
    }

    /// The digits as text.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(self.as_bytes()).unwrap_or_default()
    }
}

/// "00" to "99".
const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
    2021222324252627282930313233343536373839\
    4041424344454647484950515253545556575859\
    6061626364656667686970717273747576777879\
    8081828384858687888990919293949596979899";

/// Writes the two digits of `pair` (below 100) at `at..at + 2`.
fn put_pair(buf: &mut [u8; 20], at: usize, pair: u32) {
    let from = pair as usize * 2;
    if let (Some(d), Some(p)) = (buf.get_mut(at..at + 2), PAIRS.get(from..from + 2)) {
        d.copy_from_slice(p);
    }
}

/// Writes `v`'s digits (at least one) right-aligned before `end`; returns where they start.
/// `u32` arithmetic throughout: its division by a constant is a multiply in wasm.
fn write_u32(buf: &mut [u8; 20], end: usize, mut v: u32) -> usize {
    let mut at = end;
    while v >= 100 && at >= 2 {
        at -= 2;
        put_pair(buf, at, v % 100);
        v /= 100;
    }
    if v >= 10 && at >= 2 {
        at -= 2;
        put_pair(buf, at, v);
    } else if at >= 1 {
        at -= 1;
        if let Some(d) = buf.get_mut(at) {
            *d = b'0' + v as u8;
        }
    }
    at
}

/// Writes `v` (below 10^9) as exactly nine digits ending before `end` (at least 9).
fn write_nine(buf: &mut [u8; 20], end: usize, mut v: u32) {
    let mut at = end;
    for _ in 0..4 {
        at = at.saturating_sub(2);
        put_pair(buf, at, v % 100);
        v /= 100;
    }
    if let Some(d) = buf.get_mut(at.saturating_sub(1)) {
        *d = b'0' + (v % 10) as u8;
    }
}

#[cfg(test)]
mod tests {
    use super::Decimal;

    #[test]
    fn matches_to_string_across_chunk_boundaries() {
        let mut values = vec![0, 1, 9, 10, 99, 100, 999_999_999, 1_000_000_000, 1_000_000_001, u64::MAX, u64::MAX - 1];
        values.extend((0..64).map(|s| 1u64 << s));
        values.extend([1_000_000_000_000_000_000, 10_000_000_000_000_000_000, 123_000_000_456, 1_764_547_200_123]);
        values.extend((0..20).map(|e| 10u64.pow(e)).flat_map(|p| [p - 1, p, p + 1]));
        for v in values {
            assert_eq!(Decimal::new(v).as_str(), v.to_string(), "{v}");
        }
        // Every digit count at every chunk boundary, and a spread of values.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = x >> (x % 64);
            assert_eq!(Decimal::new(v).as_str(), v.to_string(), "{v}");
        }
    }
}
