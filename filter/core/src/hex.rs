//! Lower-case hexadecimal: key digests, session tags, the ids of refusal stand-ins.

const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// Appends `bytes` to `out` as lower-case hex.
pub fn encode_into(out: &mut String, bytes: &[u8]) {
    out.reserve(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
}

/// `bytes` as lower-case hex.
pub fn encode(bytes: &[u8]) -> String {
    let mut out = String::new();
    encode_into(&mut out, bytes);
    out
}

fn nibble(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

/// Decodes lower-case `text` into `out`, which it must fill exactly.
pub fn decode_into(text: &[u8], out: &mut [u8]) -> Option<()> {
    if text.len() != out.len() * 2 {
        return None;
    }
    for (byte, pair) in out.iter_mut().zip(text.chunks_exact(2)) {
        *byte = nibble(*pair.first()?)? << 4 | nibble(*pair.get(1)?)?;
    }
    Some(())
}

/// Decodes lower-case `text`; `None` for an odd length or another character.
pub fn decode(text: &[u8]) -> Option<Vec<u8>> {
    let mut out = vec![0; text.len() / 2];
    decode_into(text, &mut out)?;
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_what_is_not_hex() {
        assert_eq!(encode(&[0x00, 0x9f, 0xff]), "009fff");
        assert_eq!(decode(b"009fff"), Some(vec![0x00, 0x9f, 0xff]));
        assert_eq!(decode(b""), Some(vec![]));
        for bad in [&b"0"[..], b"0g", b"zz", b"123", b"FF"] {
            assert_eq!(decode(bad), None, "{bad:?}");
        }
        let mut two = [0u8; 2];
        assert_eq!(decode_into(b"abc", &mut two), None);
        assert_eq!((decode_into(b"a1b2", &mut two), two), (Some(()), [0xa1, 0xb2]));
    }
}
