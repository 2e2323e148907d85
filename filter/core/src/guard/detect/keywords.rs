//! Keyword lists: words and phrases matched case-insensitively at word boundaries.

use super::Match;

/// Appends the matches of `words` (lower-case) in `text`.
pub(super) fn find(words: &[String], text: &str, out: &mut Vec<Match>) {
    let lower = text.to_lowercase();
    if lower.len() != text.len() {
        // Lower-casing changed byte lengths (rare scripts): fall back to ASCII folding,
        // whose offsets always agree with the text's.
        return find_in(words, text, &text.to_ascii_lowercase(), out);
    }
    find_in(words, text, &lower, out);
}

fn find_in(words: &[String], text: &str, lower: &str, out: &mut Vec<Match>) {
    let first = out.len();
    for word in words {
        let mut from = 0;
        while let Some(at) = lower.get(from..).and_then(|rest| rest.find(word.as_str())) {
            let start = from + at;
            let end = start + word.len();
            if boundary(text, start, end) {
                out.push(Match { start, end });
            }
            from = end.max(start + 1);
            while !lower.is_char_boundary(from) {
                from += 1;
            }
        }
    }
    let mut found = out.split_off(first);
    found.sort_by_key(|m| (m.start, std::cmp::Reverse(m.end)));
    let mut last_end = 0;
    for m in found {
        // Overlapping words (`card`, `card number`): the longest at each place wins.
        if m.start >= last_end {
            out.push(m);
            last_end = m.end;
        }
    }
}

/// True when `text[start..end]` is not part of a longer word.
fn boundary(text: &str, start: usize, end: usize) -> bool {
    let before = text.get(..start).and_then(|s| s.chars().next_back());
    let after = text.get(end..).and_then(|s| s.chars().next());
    !before.is_some_and(char::is_alphanumeric) && !after.is_some_and(char::is_alphanumeric)
}
