//! IBANs: a country code, two check digits and the account (BBAN), upper-case, written as one
//! word or in groups of four split by single spaces; the length must be the country's in the
//! SWIFT IBAN registry and the mod-97 remainder 1 (ISO 13616).
//!
//! A compact IBAN is a whole word (never a window of a longer one); a grouped one ends with a
//! group that is not followed by more letters or digits. Each start reads at most [`MAX_LEN`]
//! bytes, and only word starts are tried, so the scan is linear.

use super::{before, is_word, run_len, Match};

/// Longest IBAN (Russia's 33 characters) in groups of four: eight spaces more.
pub(super) const MAX_LEN: usize = MAX_CHARS + (MAX_CHARS - 1) / 4;

/// The longest registered IBAN.
const MAX_CHARS: usize = 33;

/// IBAN length per country, SWIFT IBAN registry (release 101), sorted by code.
const LENGTHS: [([u8; 2], u8); 89] = [
    (*b"AD", 24),
    (*b"AE", 23),
    (*b"AL", 28),
    (*b"AT", 20),
    (*b"AZ", 28),
    (*b"BA", 20),
    (*b"BE", 16),
    (*b"BG", 22),
    (*b"BH", 22),
    (*b"BI", 27),
    (*b"BR", 29),
    (*b"BY", 28),
    (*b"CH", 21),
    (*b"CR", 22),
    (*b"CY", 28),
    (*b"CZ", 24),
    (*b"DE", 22),
    (*b"DJ", 27),
    (*b"DK", 18),
    (*b"DO", 28),
    (*b"EE", 20),
    (*b"EG", 29),
    (*b"ES", 24),
    (*b"FI", 18),
    (*b"FK", 18),
    (*b"FO", 18),
    (*b"FR", 27),
    (*b"GB", 22),
    (*b"GE", 22),
    (*b"GI", 23),
    (*b"GL", 18),
    (*b"GR", 27),
    (*b"GT", 28),
    (*b"HN", 28),
    (*b"HR", 21),
    (*b"HU", 28),
    (*b"IE", 22),
    (*b"IL", 23),
    (*b"IQ", 23),
    (*b"IS", 26),
    (*b"IT", 27),
    (*b"JO", 30),
    (*b"KW", 30),
    (*b"KZ", 20),
    (*b"LB", 28),
    (*b"LC", 32),
    (*b"LI", 21),
    (*b"LT", 20),
    (*b"LU", 20),
    (*b"LV", 21),
    (*b"LY", 25),
    (*b"MC", 27),
    (*b"MD", 24),
    (*b"ME", 22),
    (*b"MK", 19),
    (*b"MN", 20),
    (*b"MR", 27),
    (*b"MT", 31),
    (*b"MU", 30),
    (*b"NI", 28),
    (*b"NL", 18),
    (*b"NO", 15),
    (*b"OM", 23),
    (*b"PK", 24),
    (*b"PL", 28),
    (*b"PS", 29),
    (*b"PT", 25),
    (*b"QA", 29),
    (*b"RO", 24),
    (*b"RS", 22),
    (*b"RU", 33),
    (*b"SA", 24),
    (*b"SC", 31),
    (*b"SD", 18),
    (*b"SE", 24),
    (*b"SI", 19),
    (*b"SK", 24),
    (*b"SM", 27),
    (*b"SO", 23),
    (*b"ST", 25),
    (*b"SV", 28),
    (*b"TL", 23),
    (*b"TN", 24),
    (*b"TR", 26),
    (*b"UA", 29),
    (*b"VA", 22),
    (*b"VG", 24),
    (*b"XK", 20),
    (*b"YE", 30),
];

/// Appends the IBANs in `text`.
pub(super) fn find(text: &str, out: &mut Vec<Match>) {
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if before(b, i).is_some_and(is_word) || !b.get(i).is_some_and(u8::is_ascii_uppercase) {
            i += 1;
            continue;
        }
        match at(b, i) {
            Some(end) => {
                out.push(Match { start: i, end });
                i = end;
            }
            None => i += 1,
        }
    }
}

/// The registered length of the IBANs of `country`.
fn length(country: &[u8]) -> Option<usize> {
    let i = LENGTHS.binary_search_by(|(cc, _)| cc.as_slice().cmp(country)).ok()?;
    LENGTHS.get(i).map(|(_, n)| usize::from(*n))
}

fn is_char(c: u8) -> bool {
    c.is_ascii_uppercase() || c.is_ascii_digit()
}

/// The end of the IBAN starting at `start` (a word start), if there is one.
fn at(b: &[u8], start: usize) -> Option<usize> {
    let len = length(b.get(start..start + 2)?)?;
    if !b.get(start + 2..start + 4)?.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut chars = [0u8; MAX_CHARS];
    let end = if b.get(start + 4) == Some(&b' ') {
        grouped(b, start, len, &mut chars)?
    } else {
        compact(b, start, len, &mut chars)?
    };
    // Neither form may run on into a longer word.
    if b.get(end).is_some_and(|c| is_word(*c)) {
        return None;
    }
    mod97(chars.get(..len)?).then_some(end)
}

/// `DE89370400440532013000`: the whole word, of exactly the country's length.
fn compact(b: &[u8], start: usize, len: usize, chars: &mut [u8]) -> Option<usize> {
    let word = run_len(b, start, len + 1, |c| c.is_ascii_alphanumeric());
    let text = b.get(start..start + len).filter(|t| word == len && t.iter().all(|c| is_char(*c)))?;
    chars.get_mut(..len)?.copy_from_slice(text);
    Some(start + len)
}

/// `DE89 3704 0044 0532 0130 00`: groups of four, the last one shorter when the length says.
fn grouped(b: &[u8], start: usize, len: usize, chars: &mut [u8]) -> Option<usize> {
    chars.get_mut(..4)?.copy_from_slice(b.get(start..start + 4)?);
    let (mut at, mut filled) = (start + 4, 4);
    while filled < len {
        let n = (len - filled).min(4);
        let group = b.get(at + 1..at + 1 + n).filter(|g| b.get(at) == Some(&b' ') && g.iter().all(|c| is_char(*c)))?;
        chars.get_mut(filled..filled + n)?.copy_from_slice(group);
        filled += n;
        at += 1 + n;
    }
    Some(at)
}

/// ISO 7064 mod 97-10 over the IBAN with its first four characters moved to the end, letters
/// counting 10 (A) to 35 (Z): a valid IBAN leaves 1.
fn mod97(chars: &[u8]) -> bool {
    let (head, tail) = chars.split_at(4.min(chars.len()));
    let remainder = tail.iter().chain(head).fold(0u32, |r, c| {
        if c.is_ascii_digit() {
            (r * 10 + u32::from(c.wrapping_sub(b'0'))) % 97
        } else {
            (r * 100 + u32::from(c.wrapping_sub(b'A')) + 10) % 97
        }
    });
    remainder == 1
}

#[cfg(test)]
mod tests;
