//! Payment card numbers: 13–19 digits, written as one run or in groups split by single spaces
//! or dashes (one kind per number), Luhn-valid and starting with a known IIN prefix.
//!
//! A group is a maximal run of digits, so a card is never found inside a longer run (a
//! 16-digit window of a 25-digit run is not tried). Grouped numbers start with a 4-digit group
//! (as printed on every card) and continue with groups of 3 to 6; from each such start the
//! longest valid grouping wins. Each start looks at no more than [`MAX_LEN`] bytes, so the scan
//! is linear.

use super::{before, digit_at, is_word, run_len, Match};

/// Longest card match: 19 digits in six groups (4 + 5 × 3), five separators.
pub(super) const MAX_LEN: usize = MAX_DIGITS + MAX_GROUPS - 1;

const MIN_DIGITS: usize = 13;
const MAX_DIGITS: usize = 19;
const MAX_GROUPS: usize = 6;
/// Sizes of the groups after the first in a grouped number.
const GROUP: std::ops::RangeInclusive<usize> = 3..=6;

/// Appends the card numbers in `text`.
pub(super) fn find(text: &str, out: &mut Vec<Match>) {
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if !digit_at(b, i) {
            i += 1;
            continue;
        }
        // `i` starts a maximal digit run; scanning it whole here is what keeps the work linear.
        let run_end = i + run_len(b, i, usize::MAX, |c| c.is_ascii_digit());
        match candidate(b, i, run_end) {
            Some(end) => {
                out.push(Match { start: i, end });
                i = end;
            }
            None => i = run_end,
        }
    }
}

/// The end of the card starting with the digit run `start..first_end`, if there is one.
fn candidate(b: &[u8], start: usize, first_end: usize) -> Option<usize> {
    // A decimal point or a word before the digits: part of something else.
    if before(b, start).is_some_and(|c| is_word(c) || c == b'.') {
        return None;
    }
    let first = b.get(start..first_end)?;
    if (MIN_DIGITS..=MAX_DIGITS).contains(&first.len()) {
        return (right_ok(b, first_end) && valid(first)).then_some(first_end);
    }
    if first.len() != 4 {
        return None;
    }
    let sep = *b.get(first_end).filter(|c| matches!(c, b' ' | b'-'))?;
    let mut digits = Digits::default();
    digits.extend(first);
    let (mut end, mut best) = (first_end, None);
    for _ in 1..MAX_GROUPS {
        if b.get(end) != Some(&sep) {
            break;
        }
        let len = run_len(b, end + 1, GROUP.end() + 1, |c| c.is_ascii_digit());
        let Some(group) = b.get(end + 1..end + 1 + len).filter(|_| GROUP.contains(&len)) else {
            break;
        };
        if !digits.extend(group) {
            break;
        }
        end += 1 + len;
        if digits.len >= MIN_DIGITS && right_ok(b, end) && valid(digits.as_slice()) {
            best = Some(end);
        }
    }
    best
}

/// The byte after a card may not continue a word.
fn right_ok(b: &[u8], end: usize) -> bool {
    !b.get(end).is_some_and(|c| is_word(*c))
}

/// The digits of a grouped candidate, without separators.
#[derive(Default)]
struct Digits {
    buf: [u8; MAX_DIGITS],
    len: usize,
}

impl Digits {
    /// Appends `group`; false when that would pass [`MAX_DIGITS`].
    fn extend(&mut self, group: &[u8]) -> bool {
        let Some(dst) = self.buf.get_mut(self.len..self.len + group.len()) else {
            return false;
        };
        dst.copy_from_slice(group);
        self.len += group.len();
        true
    }

    fn as_slice(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or_default()
    }
}

/// True for an ASCII digit string that passes Luhn and has a known IIN prefix.
pub(super) fn valid(digits: &[u8]) -> bool {
    known_iin(digits) && luhn(digits)
}

/// The Luhn check: doubling every second digit from the right (a two-digit product counts
/// the sum of its digits), the total is a multiple of 10.
fn luhn(digits: &[u8]) -> bool {
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(i, c)| {
            let d = u32::from(c.wrapping_sub(b'0'));
            if i % 2 == 1 {
                (d * 2) / 10 + (d * 2) % 10
            } else {
                d
            }
        })
        .sum();
    sum.is_multiple_of(10)
}

/// The issuer ranges: Visa 4; Mastercard 51–55 and 2221–2720; Maestro 50 and 56–69 (which
/// take in Discover 6011, 644–649 and 65, and UnionPay 62); Amex 34 and 37; Diners 36, 38 and
/// 300–305; JCB 3528–3589.
fn known_iin(digits: &[u8]) -> bool {
    let prefix =
        |n: usize| digits.get(..n).map(|p| p.iter().fold(0u32, |acc, c| acc * 10 + u32::from(c.wrapping_sub(b'0'))));
    let (Some(p2), Some(p3), Some(p4)) = (prefix(2), prefix(3), prefix(4)) else {
        return false;
    };
    match p2 {
        40..=69 => true,
        34 | 36 | 37 | 38 => true,
        30 => (300..=305).contains(&p3),
        35 => (3528..=3589).contains(&p4),
        22..=27 => (2221..=2720).contains(&p4),
        _ => false,
    }
}

#[cfg(test)]
mod tests;
