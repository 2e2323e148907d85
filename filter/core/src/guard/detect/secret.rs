//! Credentials: cloud and API keys with a known prefix, JWTs, `Bearer` tokens and PEM private
//! key blocks.
//!
//! A secret is recognised by a prefix and a minimum number of body characters; the match then
//! extends as far as the token's characters go, however long. So [`MAX_LEN`] is the longest
//! *prefix* that recognises one, not the length of a token: a stream holds that much back and
//! keeps redacting the rest. Every token starts the text or follows a non-word character.

use super::{before, is_word, run_len, Match};

/// One kind of prefixed token.
struct Token {
    /// The literal start.
    prefix: &'static [u8],
    /// Body characters after the prefix that make it one.
    min: usize,
    /// The body's characters.
    body: fn(u8) -> bool,
    /// `.`-joined parts continue the token (JWTs: header.payload.signature).
    dotted: bool,
}

const fn token(prefix: &'static [u8], min: usize, body: fn(u8) -> bool) -> Token {
    Token { prefix, min, body, dotted: false }
}

const TOKENS: &[Token] = &[
    // AWS access key ids.
    token(b"AKIA", 16, upper_alnum),
    token(b"ASIA", 16, upper_alnum),
    token(b"ABIA", 16, upper_alnum),
    token(b"ACCA", 16, upper_alnum),
    // Google API keys.
    token(b"AIza", 35, b64url),
    // GitHub tokens: classic ones, and fine-grained personal access tokens.
    token(b"ghp_", 36, alnum),
    token(b"gho_", 36, alnum),
    token(b"ghu_", 36, alnum),
    token(b"ghs_", 36, alnum),
    token(b"ghr_", 36, alnum),
    token(b"github_pat_", 82, is_word),
    // Slack bot, app, user, refresh and legacy tokens.
    token(b"xoxb-", 10, slack),
    token(b"xoxa-", 10, slack),
    token(b"xoxp-", 10, slack),
    token(b"xoxr-", 10, slack),
    token(b"xoxs-", 10, slack),
    // OpenAI and Anthropic style keys (`sk-proj-…`, `sk-ant-…`).
    token(b"sk-", 20, b64url),
    // Stripe live secret and restricted keys.
    token(b"sk_live_", 16, alnum),
    token(b"rk_live_", 16, alnum),
    // JWTs: a base64url JSON header, `{"` encodes as `eyJ`.
    Token { prefix: b"eyJ", min: 10, body: b64url, dotted: true },
];

/// `Bearer`, one space and this many token characters recognise a bearer token.
const BEARER_MIN: usize = 20;
const BEARER_LEN: usize = b"Bearer ".len() + BEARER_MIN;

const PEM_BEGIN: &[u8] = b"-----BEGIN ";
const PEM_KEY: &[u8] = b"PRIVATE KEY";
const PEM_DASHES: &[u8] = b"-----";
/// Longest label before `PRIVATE KEY` (`ENCRYPTED `, `OPENSSH `, `RSA `…).
const PEM_LABEL_MAX: usize = 24;
const PEM_HEADER_MAX: usize = PEM_BEGIN.len() + PEM_LABEL_MAX + PEM_KEY.len() + PEM_DASHES.len();

/// The longest prefix that recognises a secret (a fine-grained GitHub token's 93 bytes).
pub(super) const MAX_LEN: usize = longest(TOKENS, max(BEARER_LEN, PEM_HEADER_MAX));

const fn max(a: usize, b: usize) -> usize {
    if a > b {
        a
    } else {
        b
    }
}

const fn longest(mut tokens: &[Token], mut most: usize) -> usize {
    while let [t, rest @ ..] = tokens {
        most = max(most, t.prefix.len() + t.min);
        tokens = rest;
    }
    most
}

fn upper_alnum(c: u8) -> bool {
    c.is_ascii_uppercase() || c.is_ascii_digit()
}

fn alnum(c: u8) -> bool {
    c.is_ascii_alphanumeric()
}

fn b64url(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'-'
}

fn slack(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'-'
}

/// RFC 6750's token68 characters, less the `=` padding that may only end it.
fn bearer_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'~' | b'+' | b'/' | b'-')
}

/// Appends the secrets in `text`.
pub(super) fn find(text: &str, out: &mut Vec<Match>) {
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        // Only word starts are tried, each for at most MAX_LEN bytes; a match is skipped whole.
        let found = if before(b, i).is_some_and(is_word) { None } else { at(b, i) };
        match found {
            Some(m) => {
                out.push(m);
                i = m.end.max(i + 1);
            }
            None => i += 1,
        }
    }
}

/// The secret recognised at `i`, if any.
fn at(b: &[u8], i: usize) -> Option<Match> {
    let rest = b.get(i..)?;
    if rest.starts_with(PEM_BEGIN) {
        return pem(b, i);
    }
    if rest.get(..7).is_some_and(|w| w.eq_ignore_ascii_case(b"bearer ")) {
        return bearer(b, i + 7);
    }
    let t = TOKENS.iter().find(|t| rest.starts_with(t.prefix))?;
    let body = i + t.prefix.len();
    if run_len(b, body, t.min, t.body) < t.min {
        return None;
    }
    let mut end = body + run_len(b, body, usize::MAX, t.body);
    while t.dotted && b.get(end) == Some(&b'.') && b.get(end + 1).is_some_and(|c| (t.body)(*c)) {
        end += 1 + run_len(b, end + 1, usize::MAX, t.body);
    }
    Some(Match { start: i, end })
}

/// The bearer token starting at `start` (after `Bearer `): the match is the token alone.
fn bearer(b: &[u8], start: usize) -> Option<Match> {
    if run_len(b, start, BEARER_MIN, bearer_char) < BEARER_MIN {
        return None;
    }
    let end = start + run_len(b, start, usize::MAX, bearer_char);
    Some(Match { start, end: end + run_len(b, end, usize::MAX, |c| c == b'=') })
}

/// A PEM private key block starting at `start`: through its `-----END …-----` line, or when
/// that is missing, through the key text after the header. Key text is base64 and white
/// space, and the `Proc-Type: 4,ENCRYPTED` / `DEK-Info: AES-128-CBC,…` lines of legacy
/// encrypted keys (so `:`, `,` and dashes inside words too).
fn pem(b: &[u8], start: usize) -> Option<Match> {
    let label_at = start + PEM_BEGIN.len();
    let cap = PEM_LABEL_MAX + PEM_KEY.len();
    let run = run_len(b, label_at, cap + 1, |c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == b' ');
    let words = b.get(label_at..label_at + run).filter(|w| run <= cap && w.ends_with(PEM_KEY))?;
    let header_end = label_at + run + PEM_DASHES.len();
    if !b.get(label_at + run..)?.starts_with(PEM_DASHES) {
        return None;
    }
    let mut end = header_end;
    while let Some(&c) = b.get(end) {
        // A dash inside a word (`Proc-Type`, `AES-128-CBC`), never the `-----` of a line.
        let dash = c == b'-' && before(b, end).is_some_and(alnum) && b.get(end + 1).is_some_and(|c| alnum(*c));
        if !(dash
            || c.is_ascii_alphanumeric()
            || c.is_ascii_whitespace()
            || matches!(c, b'+' | b'/' | b'=' | b':' | b','))
        {
            break;
        }
        end += 1;
    }
    if let Some(footer) = pem_end(b, end, words) {
        return Some(Match { start, end: footer });
    }
    while end > header_end && before(b, end).is_some_and(|c| c.is_ascii_whitespace()) {
        end -= 1;
    }
    Some(Match { start, end })
}

/// The end of `-----END <words>-----` at `at`, if it is there.
fn pem_end(b: &[u8], at: usize, words: &[u8]) -> Option<usize> {
    let rest = b.get(at..)?;
    let tail = rest.strip_prefix(b"-----END ")?.strip_prefix(words)?.strip_prefix(PEM_DASHES)?;
    Some(at + rest.len() - tail.len())
}

#[cfg(test)]
mod tests;
