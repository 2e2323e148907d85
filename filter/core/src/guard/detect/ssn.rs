//! US social security numbers, `AAA-GG-SSSS` with both dashes (nine bare digits are far too
//! common to call an SSN), under the SSA's rules: the area is not 000, 666 or 900–999, the
//! group not 00 and the serial not 0000.

use super::{before, is_word, Match};

/// An SSN is always 11 bytes.
pub(super) const MAX_LEN: usize = 11;

/// Appends the SSNs in `text`.
pub(super) fn find(text: &str, out: &mut Vec<Match>) {
    let b = text.as_bytes();
    let mut i = 0;
    // Each position costs at most one fixed-size comparison: linear whatever the input.
    while i + MAX_LEN <= b.len() {
        if at(b, i) {
            out.push(Match { start: i, end: i + MAX_LEN });
            i += MAX_LEN;
        } else {
            i += 1;
        }
    }
}

/// True when an SSN starts at `i`.
fn at(b: &[u8], i: usize) -> bool {
    // A word or another dashed part on either side: a longer identifier, not an SSN.
    let outside = |c: Option<u8>| c.is_some_and(|c| is_word(c) || c == b'-');
    if outside(before(b, i)) || outside(b.get(i + MAX_LEN).copied()) {
        return false;
    }
    let Some(s) = b.get(i..i + MAX_LEN) else {
        return false;
    };
    let shape = s.iter().enumerate().all(|(k, c)| if k == 3 || k == 6 { *c == b'-' } else { c.is_ascii_digit() });
    if !shape {
        return false;
    }
    let (area, group, serial) = (s.get(0..3), s.get(4..6), s.get(7..11));
    let (Some(area), Some(group), Some(serial)) = (area, group, serial) else {
        return false;
    };
    area != b"000" && area != b"666" && area.first() != Some(&b'9') && group != b"00" && serial != b"0000"
}

#[cfg(test)]
mod tests;
