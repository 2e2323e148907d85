//! Email addresses: `local@domain`, the domain dotted with an alphabetic top-level label of
//! two letters or more, at most 254 bytes in all.
//!
//! The local part is the whole run of local-part characters before the `@` (letters, digits
//! and `._%+-`, the ones addresses use in practice; rarer atext such as `'`, `=`, `/` or a
//! backtick also quotes or joins text, `'a@b.co'`, `q=a@b.co`, and is left out so such text
//! is not taken into the address). It has no leading, trailing or doubled dot. The domain is
//! the whole run of letters, digits, `-` and `.` after the `@`, less one final dot (the end of
//! a sentence). Each `@` costs at most [`MAX_LEN`] bytes of scanning, so the scan is linear.

use super::{before, Match};

/// Longest address (254) plus the two bytes that tell a final dot ends a sentence.
pub(super) const MAX_LEN: usize = MAX_TOTAL + 2;

const MAX_TOTAL: usize = 254;
const MAX_LOCAL: usize = 64;
const MAX_DOMAIN: usize = 253;
const MAX_LABEL: usize = 63;

/// Appends the email addresses in `text`.
pub(super) fn find(text: &str, out: &mut Vec<Match>) {
    let b = text.as_bytes();
    let (mut i, mut last_end) = (0, 0);
    while let Some(&c) = b.get(i) {
        // An address never reaches back into the previous one (its local part would have to
        // pass that one's `@`), but the check keeps the output disjoint by construction.
        let found = if c == b'@' { address(b, i).filter(|m| m.start >= last_end) } else { None };
        match found {
            Some(m) => {
                out.push(m);
                last_end = m.end;
                i = m.end;
            }
            None => i += 1,
        }
    }
}

fn is_local(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'%' | b'+' | b'-')
}

fn is_domain(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'.' | b'-')
}

/// The address around the `@` at `at`, if it is one.
fn address(b: &[u8], at: usize) -> Option<Match> {
    // The local part: back over its characters, one more than allowed at most.
    let mut start = at;
    while at - start <= MAX_LOCAL && before(b, start).is_some_and(is_local) {
        start -= 1;
    }
    let local = b.get(start..at)?;
    // Too long, or another `@` right before: `a@b@c.com` is no address.
    if local.len() > MAX_LOCAL || before(b, start) == Some(b'@') || !dotted(local) {
        return None;
    }
    let run = at + 1 + super::run_len(b, at + 1, MAX_DOMAIN + 2, is_domain);
    // One final dot ends the sentence, not the domain.
    let end = if b.get(run - 1) == Some(&b'.') { run - 1 } else { run };
    let domain = b.get(at + 1..end)?;
    if domain.len() > MAX_DOMAIN || end - start > MAX_TOTAL || !domain_ok(domain) {
        return None;
    }
    // `_` would continue a word; an `@` right after makes it something else.
    if end == run && b.get(end).is_some_and(|c| matches!(c, b'@' | b'_')) {
        return None;
    }
    Some(Match { start, end })
}

/// A non-empty dot-atom: no leading, trailing or doubled dot.
fn dotted(local: &[u8]) -> bool {
    !local.is_empty()
        && local.first() != Some(&b'.')
        && local.last() != Some(&b'.')
        && !local.windows(2).any(|w| w == b"..")
}

/// Two labels or more, each 1–63 letters, digits or inner dashes; the last alphabetic, ≥ 2.
fn domain_ok(domain: &[u8]) -> bool {
    let mut labels = 0;
    let mut last: &[u8] = &[];
    for label in domain.split(|c| *c == b'.') {
        let edges_ok = label.first() != Some(&b'-') && label.last() != Some(&b'-');
        if label.is_empty() || label.len() > MAX_LABEL || !edges_ok {
            return false;
        }
        labels += 1;
        last = label;
    }
    labels >= 2 && last.len() >= 2 && last.iter().all(u8::is_ascii_alphabetic)
}

#[cfg(test)]
mod tests;
