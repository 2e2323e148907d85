//! `Mcp-Session-Id` bound to the key that opened the session.
//!
//! A server's session id reaches the client as `<id>.<tag>`, the tag a digest of the id, the
//! server's name and the caller's key digest. A request presenting a session id is forwarded
//! only when the tag is right for its own key and server, with the server's id restored: a
//! session opened by one key cannot be used with another (even one granted the same server),
//! and nothing is kept in the gateway, so every replica checks it alike.

use sha2::{Digest, Sha256};

/// The longest session id accepted from a client (the spec sets no bound; ids are short).
pub const MAX_LEN: usize = 1024;
/// Hex digits of the tag.
const TAG_HEX: usize = 32;

/// Why a client's session id was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    /// Not one the gateway handed out for this key and server.
    #[error("session not found: it was not opened through this gateway with this key and server")]
    Foreign,
    /// Longer than [`MAX_LEN`] or outside visible ASCII.
    #[error("malformed Mcp-Session-Id")]
    Malformed,
}

fn tag(key_digest: &str, server: &str, upstream: &[u8]) -> String {
    let mut h = Sha256::new();
    for part in [b"ferrogate-mcp-session".as_slice(), key_digest.as_bytes(), server.as_bytes(), upstream] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part);
    }
    crate::hex::encode(h.finalize().get(..TAG_HEX / 2).unwrap_or_default())
}

fn visible(b: &[u8]) -> bool {
    b.iter().all(|c| (0x21..=0x7e).contains(c))
}

/// The id the client gets for the server's `upstream` id; `None` when the server's id is
/// itself malformed (it is then withheld, and the session cannot be used through the gateway).
pub fn seal(key_digest: &str, server: &str, upstream: &[u8]) -> Option<Vec<u8>> {
    if upstream.is_empty() || upstream.len() > MAX_LEN || !visible(upstream) {
        return None;
    }
    let mut out = Vec::with_capacity(upstream.len() + 1 + TAG_HEX);
    out.extend_from_slice(upstream);
    out.push(b'.');
    out.extend_from_slice(tag(key_digest, server, upstream).as_bytes());
    Some(out)
}

/// The server's id inside a client's `presented` id, when it was sealed for this key and server.
///
/// # Errors
/// [`SessionError::Malformed`] for an id no gateway hands out, [`SessionError::Foreign`] when
/// the tag belongs to another key or server.
pub fn open<'a>(key_digest: &str, server: &str, presented: &'a [u8]) -> Result<&'a [u8], SessionError> {
    if presented.len() > MAX_LEN + 1 + TAG_HEX || !visible(presented) {
        return Err(SessionError::Malformed);
    }
    let dot = presented.iter().rposition(|&b| b == b'.').ok_or(SessionError::Foreign)?;
    let (upstream, given) = (presented.get(..dot).unwrap_or_default(), presented.get(dot + 1..).unwrap_or_default());
    let want = tag(key_digest, server, upstream);
    // Compared in full whatever differs first: the time taken tells nothing about the tag.
    let same = given.len() == TAG_HEX && given.iter().zip(want.as_bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0;
    if same && !upstream.is_empty() {
        Ok(upstream)
    } else {
        Err(SessionError::Foreign)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_id_opens_only_for_its_key_and_server() {
        let sealed = seal("sha256:aa", "tools", b"abc123").unwrap();
        assert!(sealed.starts_with(b"abc123.") && sealed.len() == 7 + TAG_HEX);
        assert_eq!(open("sha256:aa", "tools", &sealed), Ok(&b"abc123"[..]));
        assert_eq!(open("sha256:bb", "tools", &sealed), Err(SessionError::Foreign));
        assert_eq!(open("sha256:aa", "files", &sealed), Err(SessionError::Foreign));
        assert_eq!(open("sha256:aa", "tools", b"abc123"), Err(SessionError::Foreign), "an unsealed id");
        let mut forged = sealed.clone();
        let last = forged.len() - 1;
        forged[last] = if forged[last] == b'0' { b'1' } else { b'0' };
        assert_eq!(open("sha256:aa", "tools", &forged), Err(SessionError::Foreign));
    }

    #[test]
    fn ids_with_dots_and_bad_ids() {
        let sealed = seal("k", "s", b"a.b.c").unwrap();
        assert_eq!(open("k", "s", &sealed), Ok(&b"a.b.c"[..]));
        assert_eq!(seal("k", "s", b""), None);
        assert_eq!(seal("k", "s", b"has space"), None);
        assert_eq!(open("k", "s", b"bad\x01id"), Err(SessionError::Malformed));
        assert_eq!(open("k", "s", &[b'a'; 2000]), Err(SessionError::Malformed));
        let empty_upstream = [b".".as_slice(), tag("k", "s", b"").as_bytes()].concat();
        assert_eq!(open("k", "s", &empty_upstream), Err(SessionError::Foreign));
    }
}
