//! Byte-level JSON helpers: the members of one object (for splicing a request body) and cheap
//! searches over response bytes that decide whether a full parse is worth it.

use std::ops::Range;

use crate::bytes::{find_either, find_sub, rfind_byte};

/// One `"key": value` member of an object.
#[derive(Debug, Clone)]
pub(crate) struct Member {
    /// Span of the key token, quotes included.
    pub key: Range<usize>,
    /// Whether the key contains escapes.
    pub escaped: bool,
    /// Span of the value.
    pub value: Range<usize>,
}

impl Member {
    /// Whether the key decodes to `name` (escaped keys are decoded, as every parser would).
    pub fn key_is(&self, body: &[u8], name: &str) -> bool {
        let token = body.get(self.key.clone()).unwrap_or_default();
        if !self.escaped {
            return token.get(1..token.len().saturating_sub(1)) == Some(name.as_bytes());
        }
        serde_json::from_slice::<String>(token).is_ok_and(|k| k == name)
    }
}

/// An object's span (braces included) and its members in document order.
#[derive(Debug, Clone)]
pub(crate) struct Object {
    pub span: Range<usize>,
    pub members: Vec<Member>,
}

impl Object {
    /// The last member named `name` (last wins, as in most JSON parsers).
    pub fn last(&self, body: &[u8], name: &str) -> Option<&Member> {
        self.members.iter().rev().find(|m| m.key_is(body, name))
    }
}

/// Reads the object starting at (or after whitespace from) `start`. The caller has already
/// validated `body` as JSON; malformed input still yields `None`, never a panic.
pub(crate) fn object_at(body: &[u8], start: usize) -> Option<Object> {
    let mut c = Cursor { b: body, pos: start };
    c.ws();
    let open = c.pos;
    c.expect(b'{')?;
    let mut members = Vec::new();
    loop {
        c.ws();
        match c.peek()? {
            b'}' => break,
            b',' => c.pos += 1,
            b'"' => {
                let (key, escaped) = c.string()?;
                c.ws();
                c.expect(b':')?;
                c.ws();
                let v = c.pos;
                c.skip_value()?;
                members.push(Member { key, escaped, value: v..c.pos });
            }
            _ => return None,
        }
    }
    Some(Object { span: open..c.pos + 1, members })
}

/// Position of the first `needle` in `hay` at or after `from`.
pub(crate) fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    if needle.is_empty() {
        return None;
    }
    find_sub(hay.get(from..)?, needle).map(|at| from + at)
}

/// Last occurrence of `needle` that starts before `before` (a backwards [`find`]).
pub(crate) fn rfind(hay: &[u8], needle: &[u8], before: usize) -> Option<usize> {
    let first = *needle.first()?;
    let mut end = before.min(hay.len());
    while let Some(at) = rfind_byte(hay.get(..end)?, first) {
        if hay.get(at..at + needle.len()) == Some(needle) {
            return Some(at);
        }
        end = at;
    }
    None
}

/// If `pos` starts `ws* : ws* {`, the position of that `{`.
pub(crate) fn object_value_after_key(b: &[u8], pos: usize) -> Option<usize> {
    let mut c = Cursor { b, pos };
    c.ws();
    c.expect(b':')?;
    c.ws();
    (c.peek()? == b'{').then_some(c.pos)
}

/// Where the value of the last top-level member `key` of the JSON object `body` starts, when
/// that value is an object: one pass that only follows strings and nesting (no validation, no
/// allocation). `None` when there is no such member, the body is not an object, or a
/// top-level key is written with escapes (the caller then parses the whole body).
pub(crate) fn top_level_object(body: &[u8], key: &[u8]) -> Option<usize> {
    let first = body.iter().position(|b| !b.is_ascii_whitespace())?;
    if body.get(first) != Some(&b'{') {
        return None;
    }
    let (mut depth, mut expect_key, mut found, mut i) = (0usize, false, None, first);
    while let Some(&b) = body.get(i) {
        match b {
            b'"' => {
                let (end, escaped) = string_end(body, i + 1)?;
                if depth == 1 && expect_key {
                    if escaped {
                        return None;
                    }
                    if body.get(i + 1..end) == Some(key) {
                        found = object_value_after_key(body, end + 1);
                    }
                    expect_key = false;
                }
                i = end + 1;
                continue;
            }
            b'{' | b'[' => {
                depth += 1;
                expect_key = depth == 1;
            }
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    break; // the end of the top-level object; whatever follows is not it
                }
            }
            b',' => expect_key = depth == 1,
            _ => {}
        }
        i += 1;
    }
    found
}

/// Where the value starting at `pos` ends (one past its last byte). Lenient like the rest
/// of this module: it follows strings and nesting only.
pub(crate) fn value_end(b: &[u8], pos: usize) -> Option<usize> {
    let mut c = Cursor { b, pos };
    c.skip_value()?;
    Some(c.pos)
}

/// The closing quote of the string whose content starts at `from`, and whether it holds escapes.
pub(crate) fn string_end(b: &[u8], from: usize) -> Option<(usize, bool)> {
    let (mut i, mut escaped) = (from, false);
    loop {
        i += find_either(b.get(i..)?, b'"', b'\\')?;
        if b.get(i)? == &b'"' {
            return Some((i, escaped));
        }
        escaped = true;
        i += 2;
    }
}

/// Whether the quote at `at` is escaped (preceded by an odd number of backslashes).
pub(crate) fn escaped_quote(b: &[u8], at: usize) -> bool {
    let before = b.get(..at).unwrap_or_default();
    before.iter().rev().take_while(|&&c| c == b'\\').count() % 2 == 1
}

/// Cursor over JSON bytes; every step is bounds-checked.
struct Cursor<'a> {
    b: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.pos).copied()
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.pos += 1)
    }

    /// Consumes a string token; its span (quotes included) and whether it has escapes.
    fn string(&mut self) -> Option<(Range<usize>, bool)> {
        let start = self.pos;
        self.expect(b'"')?;
        // `\uXXXX` hex digits contain no quote, so skipping one byte after a backslash is enough.
        let (end, escaped) = string_end(self.b, self.pos)?;
        self.pos = end + 1;
        Some((start..self.pos, escaped))
    }

    /// Skips one value of any kind, iteratively (deep nesting cannot overflow the stack).
    fn skip_value(&mut self) -> Option<()> {
        let mut depth = 0usize;
        loop {
            match self.peek()? {
                b'"' => {
                    self.string()?;
                }
                b'{' | b'[' => {
                    depth += 1;
                    self.pos += 1;
                }
                b'}' | b']' if depth > 0 => {
                    depth -= 1;
                    self.pos += 1;
                }
                _ if depth > 0 => self.pos += 1,
                _ => {
                    // A scalar at depth 0 ends at the first delimiter.
                    while !matches!(self.peek(), None | Some(b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')) {
                        self.pos += 1;
                    }
                }
            }
            if depth == 0 {
                return Some(());
            }
        }
    }
}
