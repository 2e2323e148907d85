//! A usage object's token counts read straight from its bytes, without serde.
//!
//! Every response carries one usage object and the filter reads it on every request, so the
//! plain case — unescaped keys, non-negative integer values, one nested details object — is
//! read here in one pass. Anything a plain reader could get wrong (an escaped key, a float, a
//! duplicate member, a value of the wrong type) answers `None`, and the caller parses the
//! object with serde, which decides as before. Members that are not counts are skipped
//! without validation, like the rest of the body around the usage object (a test compares
//! both readers on generated objects).

use super::json::{string_end, value_end};
use super::UsageDialect;

/// Where a member's count goes, as a `Counts` index, or why it is read no further.
pub(crate) enum Slot {
    /// A count: its index in the result.
    Count(usize),
    /// A details object whose members `inner` maps.
    Nested,
    /// Not a usage field: skipped whatever its value.
    Ignored,
}

/// A usage object's counts in one dialect's field order (see [`quick`]).
pub(crate) enum Quick {
    /// prompt (or input) tokens, completion (or output) tokens, cached tokens (from the details).
    OpenAi(Counts<3>),
    /// input, output, cache read, cache creation tokens.
    Anthropic(Counts<4>),
    /// prompt, candidates, cached content, thoughts, tool-use prompt token counts.
    Gemini(Counts<5>),
    /// input, output, cache read, cache write tokens (Converse's camelCase names).
    Converse(Counts<4>),
}

/// The usage object of `dialect` at the start of `bytes`, and its length.
pub(crate) fn quick(dialect: UsageDialect, bytes: &[u8]) -> Option<(Quick, usize)> {
    match dialect {
        UsageDialect::OpenAi => {
            let (counts, len) = read(
                bytes,
                |key| match key {
                    b"prompt_tokens" | b"input_tokens" => Slot::Count(0),
                    b"completion_tokens" | b"output_tokens" => Slot::Count(1),
                    b"prompt_tokens_details" | b"input_tokens_details" => Slot::Nested,
                    _ => Slot::Ignored,
                },
                |_, member| if member == b"cached_tokens" { Slot::Count(2) } else { Slot::Ignored },
            )?;
            Some((Quick::OpenAi(counts), len))
        }
        UsageDialect::Anthropic => {
            let names: [&[u8]; 4] =
                [b"input_tokens", b"output_tokens", b"cache_read_input_tokens", b"cache_creation_input_tokens"];
            read(bytes, |key| flat(&names, key), |_, _| Slot::Ignored).map(|(c, len)| (Quick::Anthropic(c), len))
        }
        UsageDialect::Gemini => {
            let names: [&[u8]; 5] = [
                b"promptTokenCount",
                b"candidatesTokenCount",
                b"cachedContentTokenCount",
                b"thoughtsTokenCount",
                b"toolUsePromptTokenCount",
            ];
            read(bytes, |key| flat(&names, key), |_, _| Slot::Ignored).map(|(c, len)| (Quick::Gemini(c), len))
        }
        UsageDialect::Converse => {
            let names: [&[u8]; 4] =
                [b"inputTokens", b"outputTokens", b"cacheReadInputTokens", b"cacheWriteInputTokens"];
            read(bytes, |key| flat(&names, key), |_, _| Slot::Ignored).map(|(c, len)| (Quick::Converse(c), len))
        }
    }
}

/// The slot of `key` among flat count `names`.
fn flat(names: &[&[u8]], key: &[u8]) -> Slot {
    names.iter().position(|n| *n == key).map_or(Slot::Ignored, Slot::Count)
}

/// Token counts by slot; `None` where the member was absent or `null`.
pub(crate) type Counts<const N: usize> = [Option<u64>; N];

/// Reads the object at the start of `bytes`; its counts and where it ends (one past its
/// closing brace). `outer` maps a top-level key to its slot; `inner` maps (details key,
/// member key) to a count slot or [`Slot::Ignored`].
pub(crate) fn read<const N: usize>(
    bytes: &[u8],
    outer: impl Fn(&[u8]) -> Slot,
    inner: impl Fn(&[u8], &[u8]) -> Slot,
) -> Option<(Counts<N>, usize)> {
    let mut counts = [None; N];
    let mut r = Reader { b: bytes, pos: 0, seen: 0 };
    r.members(|r, key| match outer(key) {
        Slot::Count(i) => r.count(&mut counts, i),
        Slot::Nested => {
            r.once(NESTED_BIT)?;
            if r.null() {
                return Some(());
            }
            r.members(|r, member| match inner(key, member) {
                Slot::Count(i) => r.count(&mut counts, i),
                Slot::Nested | Slot::Ignored => r.skip(),
            })
        }
        Slot::Ignored => r.skip(),
    })?;
    Some((counts, r.pos))
}

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
    /// Count slots (bit i) and the details object ([`NESTED_BIT`]) already read.
    seen: u32,
}

/// The `seen` bit of the details object.
const NESTED_BIT: u32 = 31;

impl<'a> Reader<'a> {
    fn ws(&mut self) {
        while matches!(self.b.get(self.pos), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn eat(&mut self, byte: u8) -> bool {
        self.ws();
        let hit = self.b.get(self.pos) == Some(&byte);
        self.pos += usize::from(hit);
        hit
    }

    /// `{ "key": value, ... }`, calling `member` with the reader on each value.
    fn members(&mut self, mut member: impl FnMut(&mut Self, &'a [u8]) -> Option<()>) -> Option<()> {
        if !self.eat(b'{') {
            return None;
        }
        if self.eat(b'}') {
            return Some(());
        }
        loop {
            self.ws();
            if self.b.get(self.pos) != Some(&b'"') {
                return None;
            }
            let (end, escaped) = string_end(self.b, self.pos + 1)?;
            if escaped {
                return None;
            }
            let b = self.b;
            let key = b.get(self.pos + 1..end)?;
            self.pos = end + 1;
            if !self.eat(b':') {
                return None;
            }
            self.ws();
            member(self, key)?;
            if self.eat(b'}') {
                return Some(());
            }
            if !self.eat(b',') {
                return None;
            }
        }
    }

    /// `null`: consumed, true.
    fn null(&mut self) -> bool {
        let hit = self.b.get(self.pos..self.pos + 4) == Some(b"null".as_slice());
        self.pos += if hit { 4 } else { 0 };
        hit
    }

    /// An integer (or `null`) into `counts[i]`; a second value for the same slot is refused.
    fn count<const N: usize>(&mut self, counts: &mut Counts<N>, i: usize) -> Option<()> {
        let slot = counts.get_mut(i)?;
        // A member twice (or under both of its names) is an error for serde: its call.
        self.once(u32::try_from(i).ok()?)?;
        if self.null() {
            return Some(());
        }
        let digits = self.b.get(self.pos..)?.iter().take_while(|b| b.is_ascii_digit()).count();
        let text = self.b.get(self.pos..self.pos + digits)?;
        // A leading zero, a fraction or exponent after the digits, or more digits than always
        // fit a u64 (19) is for serde to judge. Within 19 digits no check is needed (an
        // overflow-checked multiply is a 128-bit library call in wasm).
        if digits == 0 || digits > 19 || (digits > 1 && text.first() == Some(&b'0')) {
            return None;
        }
        if matches!(self.b.get(self.pos + digits), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        let n = text.iter().fold(0u64, |n, d| n.wrapping_mul(10).wrapping_add(u64::from(d - b'0')));
        *slot = Some(n);
        self.pos += digits;
        Some(())
    }

    /// Marks member `bit` seen; `None` when it was already.
    fn once(&mut self, bit: u32) -> Option<()> {
        let mask = 1u32.checked_shl(bit)?;
        if self.seen & mask != 0 {
            return None;
        }
        self.seen |= mask;
        Some(())
    }

    fn skip(&mut self) -> Option<()> {
        self.pos = value_end(self.b, self.pos)?;
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::{read, Slot};

    fn openai(bytes: &[u8]) -> Option<[Option<u64>; 3]> {
        let parse = |b| {
            read(
                b,
                |k| match k {
                    b"prompt_tokens" => Slot::Count(0),
                    b"completion_tokens" => Slot::Count(1),
                    b"prompt_tokens_details" => Slot::Nested,
                    _ => Slot::Ignored,
                },
                |_, m| if m == b"cached_tokens" { Slot::Count(2) } else { Slot::Ignored },
            )
        };
        parse(bytes).map(|(counts, end)| {
            assert_eq!(bytes.get(end - 1), Some(&b'}'));
            counts
        })
    }

    #[test]
    fn reads_counts_nested_details_and_skips_the_rest() {
        let body = br#"{ "prompt_tokens" : 12, "total_tokens": 20, "x": {"a":[1,"}"]},
            "prompt_tokens_details": {"audio_tokens": null, "cached_tokens": 4}, "completion_tokens": 8 }"#;
        assert_eq!(openai(body), Some([Some(12), Some(8), Some(4)]));
        assert_eq!(openai(br#"{"prompt_tokens":null,"prompt_tokens_details":null}"#), Some([None, None, None]));
        assert_eq!(openai(b"{}"), Some([None, None, None]));
        assert_eq!(
            openai(br#"{"prompt_tokens":9999999999999999999}"#),
            Some([Some(9_999_999_999_999_999_999), None, None])
        );
    }

    #[test]
    fn anything_unusual_is_left_to_serde() {
        for body in [
            &br#"{"prompt_tokens":1.0}"#[..],
            br#"{"prompt_tokens":-1}"#,
            br#"{"prompt_tokens":01}"#,
            br#"{"prompt_tokens":1e3}"#,
            br#"{"prompt_tokens":"1"}"#,
            br#"{"prompt_tokens":1,"prompt_tokens":2}"#,
            br#"{"prompt_tok\u0065ns":1}"#,
            br#"{"prompt_tokens":99999999999999999999}"#,
            br#"{"prompt_tokens":18446744073709551616}"#,
            br#"{"prompt_tokens_details":5}"#,
            br#"{"prompt_tokens":1"#,
            br#"{"prompt_tokens" 1}"#,
            b"[]",
            b"",
        ] {
            assert_eq!(openai(body), None, "{}", String::from_utf8_lossy(body));
        }
    }
}
