//! The `x-ferrogate-token-ids` request header: the prompt's token ids, as the engine will see
//! them (chat template applied), comma-separated decimal. It lets `precise_cache_aware` score
//! replicas by the blocks they hold. The filter removes it before the request goes upstream.

/// The header's name.
pub const TOKEN_IDS_HEADER: &str = "x-ferrogate-token-ids";
/// Most token ids a request may carry.
pub const MAX_TOKEN_IDS: usize = 1_000_000;
/// Largest header value accepted.
pub const MAX_HEADER_BYTES: usize = 8 * 1024 * 1024;

/// Why a header value is not a list of token ids.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenIdsError {
    /// Over [`MAX_HEADER_BYTES`].
    #[error("{TOKEN_IDS_HEADER} is {0} bytes; at most {MAX_HEADER_BYTES} are accepted")]
    TooLong(usize),
    /// Over [`MAX_TOKEN_IDS`].
    #[error("{TOKEN_IDS_HEADER} has more than {MAX_TOKEN_IDS} token ids")]
    TooMany,
    /// An item is not a decimal number below 2^32.
    #[error("{TOKEN_IDS_HEADER} item {index} is not a token id (comma-separated decimal numbers expected)")]
    Malformed {
        /// Position of the item, from 0.
        index: usize,
    },
}

/// Parses a header value into `out` (cleared first), in one pass over its bytes.
///
/// # Errors
/// The value is too long, has too many items, or an item is not a token id.
pub fn parse_token_ids(value: &[u8], out: &mut Vec<u32>) -> Result<(), TokenIdsError> {
    out.clear();
    if value.len() > MAX_HEADER_BYTES {
        return Err(TokenIdsError::TooLong(value.len()));
    }
    // An id takes at least two bytes with its comma: one allocation for the whole list.
    out.reserve(value.len() / 2 + 1);
    let mut at = 0;
    loop {
        let index = out.len();
        if index >= MAX_TOKEN_IDS {
            return Err(TokenIdsError::TooMany);
        }
        at = skip_blanks(value, at);
        let (id, end) = number(value, at).ok_or(TokenIdsError::Malformed { index })?;
        out.push(id);
        at = skip_blanks(value, end);
        match value.get(at) {
            None => return Ok(()),
            Some(b',') => at += 1,
            Some(_) => return Err(TokenIdsError::Malformed { index }),
        }
    }
}

fn skip_blanks(value: &[u8], mut at: usize) -> usize {
    while matches!(value.get(at), Some(b' ' | b'\t')) {
        at += 1;
    }
    at
}

/// The decimal `u32` starting at `at` (1 to 10 digits), and where it ends.
fn number(value: &[u8], at: usize) -> Option<(u32, usize)> {
    let mut n: u64 = 0;
    let mut end = at;
    while let Some(&b) = value.get(end) {
        let digit = b.wrapping_sub(b'0');
        if digit > 9 {
            break;
        }
        n = n * 10 + u64::from(digit);
        end += 1;
        if end - at > 10 {
            return None;
        }
    }
    if end == at {
        return None;
    }
    Some((u32::try_from(n).ok()?, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Vec<u32>, TokenIdsError> {
        let mut v = vec![7];
        parse_token_ids(s.as_bytes(), &mut v).map(|()| v)
    }

    #[test]
    fn reads_numbers_with_spaces() {
        assert_eq!(parse("1000, 1001,1002 ,4294967295"), Ok(vec![1000, 1001, 1002, u32::MAX]));
        assert_eq!(parse("0"), Ok(vec![0]));
    }

    #[test]
    fn refuses_what_is_not_a_list_of_ids() {
        assert_eq!(parse(""), Err(TokenIdsError::Malformed { index: 0 }));
        assert_eq!(parse("1,,2"), Err(TokenIdsError::Malformed { index: 1 }));
        assert_eq!(parse("1,-2"), Err(TokenIdsError::Malformed { index: 1 }));
        assert_eq!(parse("4294967296"), Err(TokenIdsError::Malformed { index: 0 }));
        assert_eq!(parse("1,2,"), Err(TokenIdsError::Malformed { index: 2 }));
        assert_eq!(parse("0x10"), Err(TokenIdsError::Malformed { index: 0 }));
        assert!(parse("1, 2 3").is_err());
    }

    #[test]
    fn bounds_are_enforced() {
        let many = vec!["1"; MAX_TOKEN_IDS + 1].join(",");
        assert_eq!(parse(&many), Err(TokenIdsError::TooMany));
        let exactly = vec!["1"; MAX_TOKEN_IDS].join(",");
        assert_eq!(parse(&exactly).map(|v| v.len()), Ok(MAX_TOKEN_IDS));
        let long = format!("1{}", " ".repeat(MAX_HEADER_BYTES));
        assert_eq!(parse(&long), Err(TokenIdsError::TooLong(MAX_HEADER_BYTES + 1)));
    }
}
