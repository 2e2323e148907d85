//! Phone numbers: international E.164 (`+` and 8–15 digits, in groups split by a space, `-`
//! or `.`, one group possibly in parentheses: `+44 (0)20 7946 0958`) and the North American
//! national forms (`(555) 123-4567`, `555-123-4567`, `555.123.4567`, `555 123 4567`, after an
//! optional `1 `/`1-` prefix).
//!
//! Digit groups are maximal runs, so a phone is never cut out of a longer number, and the
//! national shape (3-3-4 digits) keeps dates (4-2-2), SSNs (3-2-4), card groups (4-4-4-4) and
//! IPv4 addresses (octets of at most 3 digits) out. Ten bare digits are not a phone: too many
//! other numbers look like that. Each start looks at no more than [`MAX_LEN`] bytes.

use super::{before, is_word, run_len, Match};

/// Longest phone: `+`, 15 digits, 14 separators and a pair of parentheses.
pub(super) const MAX_LEN: usize = 1 + E164_MAX + (E164_MAX - 1) + 2;

const E164_MIN: usize = 8;
const E164_MAX: usize = 15;

/// Appends the phone numbers in `text`.
pub(super) fn find(text: &str, out: &mut Vec<Match>) {
    let b = text.as_bytes();
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        let end = match c {
            b'+' => e164(b, i),
            b'(' | b'0'..=b'9' => national(b, i),
            _ => None,
        };
        match end {
            Some(end) => {
                out.push(Match { start: i, end });
                i = end;
            }
            None => i += 1,
        }
    }
}

/// The byte after a phone may not continue a word or a dashed number.
fn right_ok(b: &[u8], end: usize) -> bool {
    !b.get(end).is_some_and(|c| is_word(*c) || *c == b'-')
}

fn is_sep(c: u8) -> bool {
    matches!(c, b' ' | b'-' | b'.')
}

/// Length of the digit group at `i` (counting to one past `E164_MAX`: longer is too long).
fn group(b: &[u8], i: usize) -> usize {
    run_len(b, i, E164_MAX + 1, |c| c.is_ascii_digit())
}

/// The end of the longest E.164 number starting with the `+` at `start`.
fn e164(b: &[u8], start: usize) -> Option<usize> {
    if before(b, start).is_some_and(|c| is_word(c) || c == b'+') {
        return None;
    }
    let mut at = start + 1;
    let mut len = group(b, at);
    let (mut digits, mut paren, mut best) = (0, false, None);
    while len > 0 {
        digits += len;
        at += len;
        if digits > E164_MAX {
            break;
        }
        if digits >= E164_MIN && right_ok(b, at) {
            best = Some(at);
        }
        // The gap to the next group: an optional separator, then digits, or (once) a
        // parenthesised group (`(0)`, `(555)`) with its own optional separator after.
        let mut p = at + usize::from(b.get(at).is_some_and(|c| is_sep(*c)));
        if !paren && b.get(p) == Some(&b'(') {
            paren = true;
            let inner = group(b, p + 1);
            if inner == 0 || b.get(p + 1 + inner) != Some(&b')') {
                break;
            }
            digits += inner;
            p += inner + 2;
            p += usize::from(b.get(p).is_some_and(|c| is_sep(*c)));
        }
        at = p;
        len = group(b, at);
    }
    best
}

/// The end of a North American number starting at `start` (a digit or `(`).
fn national(b: &[u8], start: usize) -> Option<usize> {
    // A word, a decimal point, a dashed number or a `+` number before: part of something else.
    if before(b, start).is_some_and(|c| is_word(c) || matches!(c, b'.' | b'-' | b'+')) {
        return None;
    }
    let mut at = start;
    // The country prefix `1 `/`1-`/`1.`: a lone digit 1 and a separator.
    if b.get(at) == Some(&b'1') && b.get(at + 1).is_some_and(|c| is_sep(*c)) {
        at += 2;
    }
    let paren = b.get(at) == Some(&b'(');
    let exchange_at = if paren {
        if !exactly(b, at + 1, 3) || b.get(at + 4) != Some(&b')') {
            return None;
        }
        // `(555) 123`, `(555)123`, `(555)-123`.
        at + 5 + usize::from(b.get(at + 5).is_some_and(|c| is_sep(*c)))
    } else {
        at + 4
    };
    let sep = *b.get(exchange_at + 3).filter(|c| is_sep(**c))?;
    // Without parentheses both separators are the same (`555-123-4567`, not `555-123.4567`).
    if !paren && (!exactly(b, at, 3) || b.get(at + 3) != Some(&sep)) {
        return None;
    }
    let end = exchange_at + 4 + 4;
    (exactly(b, exchange_at, 3) && exactly(b, exchange_at + 4, 4) && right_ok(b, end)).then_some(end)
}

/// True when exactly `n` digits (a whole group) start at `i`.
fn exactly(b: &[u8], i: usize, n: usize) -> bool {
    run_len(b, i, n + 1, |c| c.is_ascii_digit()) == n
}

#[cfg(test)]
mod tests;
