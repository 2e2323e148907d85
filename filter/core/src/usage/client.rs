//! The client's `User-Agent` as a usage record carries it: copied once per recorded request,
//! bounded so one header cannot grow a record (or a table row) without limit, and printable so
//! the request log and the dashboards show it as text.

/// Most bytes of a `User-Agent` a record keeps (cut on a UTF-8 character boundary).
pub const USER_AGENT_MAX: usize = 256;

/// The character put in place of a control character or of bytes that are not UTF-8.
const REPLACEMENT: char = char::REPLACEMENT_CHARACTER;

/// The header value as a record keeps it: its text with each control character (C0, DEL, C1)
/// and each byte sequence that is not UTF-8 (as `String::from_utf8_lossy` finds them) replaced
/// by U+FFFD, cut before the first character that would take it past [`USER_AGENT_MAX`] bytes.
/// Nothing else changes: no trimming, no case folding.
pub fn bounded_user_agent(value: &[u8]) -> String {
    // What SDKs and tools send: short printable ASCII, kept in one copy.
    let head = value.get(..USER_AGENT_MAX).unwrap_or(value);
    if head.iter().all(|b| (0x20..0x7f).contains(b)) {
        return head.iter().copied().map(char::from).collect();
    }
    let mut out = String::with_capacity(USER_AGENT_MAX);
    let chars = value.utf8_chunks().flat_map(|chunk| {
        let invalid = (!chunk.invalid().is_empty()).then_some(REPLACEMENT);
        chunk.valid().chars().chain(invalid)
    });
    for c in chars.map(|c| if c.is_control() { REPLACEMENT } else { c }) {
        if out.len() + c.len_utf8() > USER_AGENT_MAX {
            break;
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{bounded_user_agent, USER_AGENT_MAX};
    use crate::usage::Record;

    #[test]
    fn a_usual_user_agent_is_kept_as_sent() {
        for ua in ["OpenAI/Python 1.52.0", "curl/8.5.0", "google-genai-sdk/1.2.0 gl-python/3.11.9", ""] {
            assert_eq!(bounded_user_agent(ua.as_bytes()), ua);
        }
    }

    #[test]
    fn a_long_one_is_cut_to_the_bound_on_a_character_boundary() {
        let ascii = "a".repeat(1000);
        assert_eq!(bounded_user_agent(ascii.as_bytes()), "a".repeat(USER_AGENT_MAX));
        // 255 ASCII bytes, then a 2-byte character that does not fit whole.
        let split = format!("{}é tail", "b".repeat(USER_AGENT_MAX - 1));
        assert_eq!(bounded_user_agent(split.as_bytes()), "b".repeat(USER_AGENT_MAX - 1));
        let wide = "日".repeat(100);
        let kept = bounded_user_agent(wide.as_bytes());
        assert_eq!(kept, "日".repeat(USER_AGENT_MAX / 3));
    }

    #[test]
    fn control_characters_and_bytes_that_are_not_utf8_are_replaced() {
        assert_eq!(bounded_user_agent(b"a\tb\x7fc\x00"), "a\u{fffd}b\u{fffd}c\u{fffd}");
        assert_eq!(bounded_user_agent(b"tool/1 \xff\xfe x"), "tool/1 \u{fffd}\u{fffd} x");
        assert_eq!(bounded_user_agent("c1\u{85}".as_bytes()), "c1\u{fffd}");
        let long_bad = vec![0xffu8; 1000];
        let kept = bounded_user_agent(&long_bad);
        assert!(kept.len() <= USER_AGENT_MAX && kept.chars().all(|c| c == '\u{fffd}'), "{kept}");
    }

    /// The field comes last and only when sent: a record without it is the line every older
    /// filter wrote, and such a line reads back without one.
    #[test]
    fn the_record_writes_it_last_and_only_when_sent() {
        let plain = Record::default().to_json_line();
        assert!(!plain.contains("user_agent"), "{plain}");
        assert_eq!(Record::parse_lines(plain.as_bytes()).unwrap()[0].user_agent, None);
        let r = Record { cached: true, user_agent: Some("OpenAI/Python 1.52.0".into()), ..Record::default() };
        let line = r.to_json_line();
        assert!(line.ends_with(",\"cached\":true,\"user_agent\":\"OpenAI/Python 1.52.0\"}\n"), "{line}");
        assert_eq!(line, format!("{}\n", serde_json::to_string(&r).unwrap()));
        assert_eq!(Record::parse_lines(line.as_bytes()).unwrap(), [r]);
    }
}
