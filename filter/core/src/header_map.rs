//! The proxy-wasm serialized header map, read in place.
//!
//! `proxy_get_header_map_pairs` hands the guest one buffer: a little-endian `u32` pair count,
//! then a `(key length, value length)` pair of `u32`s per entry, then each key and value
//! followed by a NUL. The SDK turns it into one `String` and one `Vec` per header; reading it in
//! place lets the filter copy only the few values it keeps. Every offset is checked: a
//! malformed buffer ends the iteration, never panics.

/// Iterates over the `(name, value)` pairs of a serialized header map.
pub fn pairs(buf: &[u8]) -> Pairs<'_> {
    let count = read_u32(buf, 0).unwrap_or(0);
    // The sizes table must fit; a count that does not is malformed.
    let data = 4usize.saturating_add(count.saturating_mul(8));
    let count = if data <= buf.len() { count } else { 0 };
    Pairs { buf, count, index: 0, data }
}

/// Iterator returned by [`pairs`].
pub struct Pairs<'a> {
    buf: &'a [u8],
    count: usize,
    index: usize,
    /// Where the next key starts.
    data: usize,
}

impl<'a> Iterator for Pairs<'a> {
    type Item = (&'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        if self.index >= self.count {
            return None;
        }
        let sizes = 4 + self.index * 8;
        let (key_len, value_len) = (read_u32(self.buf, sizes)?, read_u32(self.buf, sizes + 4)?);
        let key_end = self.data.checked_add(key_len)?;
        let key = self.buf.get(self.data..key_end)?;
        let value_start = key_end.checked_add(1)?;
        let value_end = value_start.checked_add(value_len)?;
        let value = self.buf.get(value_start..value_end)?;
        self.data = value_end.checked_add(1)?;
        self.index += 1;
        Some((key, value))
    }
}

fn read_u32(buf: &[u8], at: usize) -> Option<usize> {
    let bytes: [u8; 4] = buf.get(at..at.checked_add(4)?)?.try_into().ok()?;
    usize::try_from(u32::from_le_bytes(bytes)).ok()
}

#[cfg(test)]
mod tests {
    use super::pairs;

    /// The proxy-wasm encoding of `map`.
    fn encode(map: &[(&str, &str)]) -> Vec<u8> {
        let mut out = (map.len() as u32).to_le_bytes().to_vec();
        for (k, v) in map {
            out.extend_from_slice(&(k.len() as u32).to_le_bytes());
            out.extend_from_slice(&(v.len() as u32).to_le_bytes());
        }
        for (k, v) in map {
            out.extend_from_slice(k.as_bytes());
            out.push(0);
            out.extend_from_slice(v.as_bytes());
            out.push(0);
        }
        out
    }

    #[test]
    fn reads_every_pair_in_order() {
        let map = [(":method", "POST"), (":path", "/v1/chat/completions"), ("x-empty", ""), ("a", "b")];
        let buf = encode(&map);
        let got: Vec<(&[u8], &[u8])> = pairs(&buf).collect();
        let want: Vec<(&[u8], &[u8])> = map.iter().map(|(k, v)| (k.as_bytes(), v.as_bytes())).collect();
        assert_eq!(got, want);
        assert_eq!(pairs(&[]).count(), 0);
    }

    #[test]
    fn malformed_buffers_end_the_iteration() {
        let buf = encode(&[("k", "v"), ("key", "value")]);
        // Every truncation yields a prefix of the pairs, never a panic or a wrong pair.
        for cut in 0..buf.len() {
            let got: Vec<_> = pairs(&buf[..cut]).collect();
            assert!(got.len() <= 2);
            if let Some(first) = got.first() {
                assert_eq!(*first, (b"k".as_slice(), b"v".as_slice()));
            }
        }
        // A huge count or huge lengths are refused.
        assert_eq!(pairs(&u32::MAX.to_le_bytes()).count(), 0);
        let mut lying = buf.clone();
        lying[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(pairs(&lying).count(), 0);
    }
}
