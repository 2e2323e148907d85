//! The hand-written JSON of a usage record ([`super::RecordView::write_json_line`]): numbers
//! and strings appended to a line, byte for byte as serde_json writes them.

/// `name` then the number, or `null`.
pub(super) fn push_field(out: &mut Vec<u8>, name: &[u8], value: Option<u64>) {
    out.extend_from_slice(name);
    match value {
        Some(n) => out.extend_from_slice(crate::decimal::Decimal::new(n).as_bytes()),
        None => out.extend_from_slice(b"null"),
    }
}

/// A JSON string, escaped exactly as serde_json escapes it.
pub(super) fn push_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    let bytes = s.as_bytes();
    // Names and ids almost never need escapes: checked eight bytes per step, copied whole.
    if crate::bytes::find_string_special(bytes).is_some() {
        push_escaped(out, bytes);
    } else {
        out.extend_from_slice(bytes);
    }
    out.push(b'"');
}

/// The body of a JSON string that needs escapes.
fn push_escaped(out: &mut Vec<u8>, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let short: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(bytes.get(start..i).unwrap_or_default());
        if short.is_empty() {
            let hex = |n: u8| HEX.get(usize::from(n & 0xf)).copied().unwrap_or(b'0');
            out.extend_from_slice(&[b'\\', b'u', b'0', b'0', hex(b >> 4), hex(b)]);
        } else {
            out.extend_from_slice(short);
        }
        start = i + 1;
    }
    out.extend_from_slice(bytes.get(start..).unwrap_or_default());
}

#[cfg(test)]
mod tests {
    use super::push_str;

    #[test]
    fn escapes_exactly_like_serde_wherever_the_byte_sits_in_a_word() {
        for special in ['"', '\\', '\n', '\u{1}', '\u{1f}', 'é', '\u{7f}', ' ', '!', '#', '[', ']'] {
            for at in 0..20 {
                let s: String = (0..20).map(|i| if i == at { special } else { 'a' }).collect();
                let mut out = Vec::new();
                push_str(&mut out, &s);
                assert_eq!(String::from_utf8(out).ok(), serde_json::to_string(&s).ok(), "{s:?}");
            }
        }
    }
}
