//! IP addresses. Candidates are the maximal runs of hex digits, `:` and `.`:
//!
//! - a run with two `:` or more (and a hex digit: a bare `::` is punctuation far more often
//!   than the unspecified address) is an IPv6 address when `core::net::Ipv6Addr` parses it,
//!   so every form it accepts is found (`::`-compressed, embedded IPv4); the run is taken
//!   whole, never a part of it;
//! - otherwise (or when it does not parse) the run is searched for IPv4 dotted quads: octets
//!   0–255 without leading zeros, not inside a longer dotted number (`1.2.3.4.5`, a version).
//!
//! One final `.` of a run ends a sentence and is left out of the address. Each run is scanned
//! a bounded number of times and only runs of at most 45 bytes are parsed: linear.

use core::net::Ipv6Addr;

use super::{before, digit_at, is_word, run_len, Match};

/// The longest IPv6 text (`ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255`, 45 bytes) and the
/// two bytes after it that tell a final dot ends a sentence.
pub(super) const MAX_LEN: usize = V6_MAX + 2;

const V6_MAX: usize = 45;

/// Appends the IP addresses in `text`.
pub(super) fn find(text: &str, out: &mut Vec<Match>) {
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if !b.get(i).is_some_and(|c| in_run(*c)) {
            i += 1;
            continue;
        }
        let end = i + run_len(b, i, usize::MAX, in_run);
        match v6(b, i, end) {
            Some(m) => out.push(m),
            None => v4_in(b, i, end, out),
        }
        i = end;
    }
}

fn in_run(c: u8) -> bool {
    c.is_ascii_hexdigit() || c == b':' || c == b'.'
}

/// True when the address may end at `end`: no word goes on, and a dot there is the end of a
/// sentence rather than the next part of a dotted name or number.
fn right_ok(b: &[u8], end: usize) -> bool {
    match b.get(end) {
        Some(b'.') => !b.get(end + 1).is_some_and(|c| is_word(*c)),
        Some(c) => !is_word(*c),
        None => true,
    }
}

/// The IPv6 address that is the whole run `start..end` (less a final dot), if it is one.
fn v6(b: &[u8], start: usize, end: usize) -> Option<Match> {
    let end = if b.get(end.checked_sub(1)?) == Some(&b'.') { end - 1 } else { end };
    let s = b.get(start..end).filter(|s| s.len() <= V6_MAX)?;
    let colons = s.iter().filter(|c| **c == b':').count();
    if colons < 2 || !s.iter().any(u8::is_ascii_hexdigit) || before(b, start).is_some_and(is_word) {
        return None;
    }
    if !right_ok(b, end) {
        return None;
    }
    let s = core::str::from_utf8(s).ok()?;
    s.parse::<Ipv6Addr>().is_ok().then_some(Match { start, end })
}

/// Appends the IPv4 addresses inside the run `start..end`.
fn v4_in(b: &[u8], start: usize, end: usize, out: &mut Vec<Match>) {
    let mut k = start;
    while k < end {
        match if digit_at(b, k) { v4(b, k) } else { None } {
            Some(e) => {
                out.push(Match { start: k, end: e });
                k = e;
            }
            None => k += 1,
        }
    }
}

/// The end of the dotted quad starting at `start`, if there is one.
fn v4(b: &[u8], start: usize) -> Option<usize> {
    // A digit, a dot or a word before: inside a longer number or a name (`v1.2.3.4`).
    if before(b, start).is_some_and(|c| is_word(c) || c == b'.') {
        return None;
    }
    let mut at = start;
    for part in 0..4 {
        if part > 0 {
            if b.get(at) != Some(&b'.') {
                return None;
            }
            at += 1;
        }
        at = octet(b, at)?;
    }
    right_ok(b, at).then_some(at)
}

/// The end of the octet at `at`: 0–255, no leading zero (`01` is not one).
fn octet(b: &[u8], at: usize) -> Option<usize> {
    let len = run_len(b, at, 4, |c| c.is_ascii_digit());
    let digits = b.get(at..at + len).filter(|d| (1..=3).contains(&d.len()))?;
    if len > 1 && digits.first() == Some(&b'0') {
        return None;
    }
    let value = digits.iter().fold(0u32, |v, c| v * 10 + u32::from(c.wrapping_sub(b'0')));
    (value <= 255).then_some(at + len)
}

#[cfg(test)]
mod tests;
