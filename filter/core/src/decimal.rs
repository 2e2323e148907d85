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
        let mut start = buf.len();
        let mut rest = n;
        loop {
            // The low nine digits; at most two u64 divisions for any u64.
            let (high, low) = match rest {
                0..=999_999_999 => (0, rest as u32),
                _ => (rest / 1_000_000_000, (rest % 1_000_000_000) as u32),
            };
            // A chunk below the top one is zero-padded to its nine digits.
            start = write_chunk(&mut buf, start, low, if high == 0 { 1 } else { 9 });
            if high == 0 || start == 0 {
                return Decimal { buf, start };
            }
            rest = high;
        }
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

/// Writes `low` (below 10^9) right-aligned before `end`, two digits per step, at least
/// `min_digits` of them; returns where the digits start.
fn write_chunk(buf: &mut [u8; 20], end: usize, mut low: u32, min_digits: usize) -> usize {
    const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
        2021222324252627282930313233343536373839\
        4041424344454647484950515253545556575859\
        6061626364656667686970717273747576777879\
        8081828384858687888990919293949596979899";
    let mut at = end;
    while at >= 2 && (low >= 10 || end - at + 2 <= min_digits.saturating_sub(1)) {
        let pair = (low % 100) as usize * 2;
        low /= 100;
        at -= 2;
        if let (Some(d), Some(p)) = (buf.get_mut(at..at + 2), PAIRS.get(pair..pair + 2)) {
            d.copy_from_slice(p);
        }
    }
    while at > 0 && (low > 0 || end - at < min_digits) {
        at -= 1;
        if let Some(d) = buf.get_mut(at) {
            *d = b'0' + (low % 10) as u8;
        }
        low /= 10;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::Decimal;

    #[test]
    fn matches_to_string_across_chunk_boundaries() {
        let mut values = vec![0, 1, 9, 10, 99, 100, 999_999_999, 1_000_000_000, 1_000_000_001, u64::MAX, u64::MAX - 1];
        values.extend((0..64).map(|s| 1u64 << s));
        values.extend([1_000_000_000_000_000_000, 10_000_000_000_000_000_000, 123_000_000_456, 1_764_547_200_123]);
        for v in values {
            assert_eq!(Decimal::new(v).as_str(), v.to_string(), "{v}");
        }
    }
}
