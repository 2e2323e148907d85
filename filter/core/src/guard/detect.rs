//! Detectors: each finds one kind of sensitive value in a text and reports byte ranges.
//!
//! Every detector is a hand-written scanner (or, for custom patterns, `regex-lite`, which never
//! backtracks), so the work per byte is bounded whatever the input. A match is decided by the
//! text of the match and at most one character on either side; [`Detector::max_len`] bounds
//! how long a match can be before it is recognised, which is what the streaming redactor
//! ([`super::stream`]) holds back.
//!
//! The built-ins keep that contract this way: a value is made of maximal runs of its own
//! characters (a card inside a longer digit run is not tried), so one character either side
//! tells where a run starts and ends. Where more is read it is counted in `max_len`: after a
//! final `.` of an email or IP address, the character after it (the end of a sentence, or the
//! next label); phones and grouped cards take the longest grouping from their start, read
//! within `max_len` of it; a secret is recognised within `max_len` of its start (after
//! `Bearer ` for bearer tokens) and then extends as far as its characters go.

/// What kind of value a detector finds: names the placeholder and the metrics label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// An email address.
    Email,
    /// A phone number.
    Phone,
    /// A payment card number.
    Card,
    /// An IBAN.
    Iban,
    /// An IPv4 or IPv6 address.
    Ip,
    /// A US social security number.
    Ssn,
    /// A credential: cloud key, token, private key block.
    Secret,
    /// A custom pattern or keyword.
    Custom,
}

impl Kind {
    /// The tag of its placeholders (`[EMAIL_1]`).
    pub fn tag(self) -> &'static str {
        match self {
            Kind::Email => "EMAIL",
            Kind::Phone => "PHONE",
            Kind::Card => "CARD",
            Kind::Iban => "IBAN",
            Kind::Ip => "IP",
            Kind::Ssn => "SSN",
            Kind::Secret => "SECRET",
            Kind::Custom => "REDACTED",
        }
    }
}

/// One match: a byte range of the scanned text, on character boundaries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Match {
    /// First byte.
    pub start: usize,
    /// One past the last byte.
    pub end: usize,
}

/// Why a custom detector cannot be built.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DetectError {
    /// The pattern does not compile (or is too large).
    #[error("invalid pattern: {0}")]
    Pattern(String),
    /// A keyword list with nothing in it, or an empty word.
    #[error("keyword lists need at least one non-empty word")]
    NoWords,
}

/// A detector, built-in or custom.
#[derive(Debug, Clone)]
pub enum Detector {
    /// Email addresses.
    Email,
    /// Phone numbers.
    Phone,
    /// Payment cards (Luhn).
    Card,
    /// IBANs (mod-97).
    Iban,
    /// IPv4 and IPv6 addresses.
    Ip,
    /// US SSNs.
    Ssn,
    /// Credentials.
    Secret,
    /// A custom regular expression.
    Regex(Box<regex_lite::Regex>),
    /// Whole words or phrases, case-insensitive.
    Keywords(Vec<String>),
}

/// Longest custom pattern accepted, bytes.
pub const MAX_PATTERN: usize = 1024;
/// Compiled-size bound of a custom pattern.
const PATTERN_SIZE_LIMIT: usize = 1 << 20;
/// Longest match a custom pattern is expected to make; what a stream holds back for it.
pub const CUSTOM_MAX_LEN: usize = 256;

impl Detector {
    /// A built-in detector by its configuration name.
    pub fn builtin(name: &str) -> Option<Detector> {
        Some(match name {
            "email" => Detector::Email,
            "phone" => Detector::Phone,
            "card" => Detector::Card,
            "iban" => Detector::Iban,
            "ip" => Detector::Ip,
            "ssn" => Detector::Ssn,
            "secret" => Detector::Secret,
            _ => return None,
        })
    }

    /// A custom regular expression (bounded in length and compiled size).
    pub fn regex(pattern: &str) -> Result<Detector, DetectError> {
        if pattern.len() > MAX_PATTERN {
            return Err(DetectError::Pattern(format!("longer than {MAX_PATTERN} bytes")));
        }
        let re = regex_lite::RegexBuilder::new(pattern)
            .size_limit(PATTERN_SIZE_LIMIT)
            .build()
            .map_err(|e| DetectError::Pattern(e.to_string()))?;
        Ok(Detector::Regex(Box::new(re)))
    }

    /// A keyword list: each word or phrase matched case-insensitively at word boundaries.
    pub fn keywords(words: &[String]) -> Result<Detector, DetectError> {
        let words: Vec<String> = words.iter().map(|w| w.trim().to_lowercase()).filter(|w| !w.is_empty()).collect();
        if words.is_empty() {
            return Err(DetectError::NoWords);
        }
        Ok(Detector::Keywords(words))
    }

    /// The kind of value found.
    pub fn kind(&self) -> Kind {
        match self {
            Detector::Email => Kind::Email,
            Detector::Phone => Kind::Phone,
            Detector::Card => Kind::Card,
            Detector::Iban => Kind::Iban,
            Detector::Ip => Kind::Ip,
            Detector::Ssn => Kind::Ssn,
            Detector::Secret => Kind::Secret,
            Detector::Regex(_) | Detector::Keywords(_) => Kind::Custom,
        }
    }

    /// Appends every match in `text`, non-overlapping and in ascending order.
    pub fn find(&self, text: &str, out: &mut Vec<Match>) {
        match self {
            Detector::Regex(re) => out
                .extend(re.find_iter(text).filter(|m| !m.is_empty()).map(|m| Match { start: m.start(), end: m.end() })),
            Detector::Keywords(words) => keywords::find(words, text, out),
            Detector::Email => email::find(text, out),
            Detector::Phone => phone::find(text, out),
            Detector::Card => card::find(text, out),
            Detector::Iban => iban::find(text, out),
            Detector::Ip => ip::find(text, out),
            Detector::Ssn => ssn::find(text, out),
            Detector::Secret => secret::find(text, out),
        }
    }

    /// The most bytes a match can span before it is recognised: a stream holds this much back.
    pub fn max_len(&self) -> usize {
        match self {
            Detector::Keywords(words) => words.iter().map(String::len).max().unwrap_or(0) + 1,
            Detector::Regex(_) => CUSTOM_MAX_LEN,
            Detector::Email => email::MAX_LEN,
            Detector::Phone => phone::MAX_LEN,
            Detector::Card => card::MAX_LEN,
            Detector::Iban => iban::MAX_LEN,
            Detector::Ip => ip::MAX_LEN,
            Detector::Ssn => ssn::MAX_LEN,
            // Secrets extend as far as their characters go: this is the longest prefix that
            // recognises one; the stream keeps redacting the rest of the token.
            Detector::Secret => secret::MAX_LEN,
        }
    }
}

// Byte-level helpers of the built-in scanners. Every class they test is ASCII, so a boundary
// is one byte: a non-ASCII byte (part of a multi-byte character) is never in a class, and
// spans start and end on ASCII bytes, hence on character boundaries.

/// The byte before `i`, if any.
fn before(b: &[u8], i: usize) -> Option<u8> {
    i.checked_sub(1).and_then(|p| b.get(p).copied())
}

/// True for the bytes of a word: ASCII letters, digits and `_`.
fn is_word(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// True when the byte at `i` exists and is an ASCII digit.
fn digit_at(b: &[u8], i: usize) -> bool {
    b.get(i).is_some_and(u8::is_ascii_digit)
}

/// How many bytes of `class` follow from `i`, counting at most `cap` (so a long run costs
/// no more than `cap`).
fn run_len(b: &[u8], i: usize, cap: usize, class: impl Fn(u8) -> bool) -> usize {
    b.get(i..).unwrap_or_default().iter().take(cap).take_while(|c| class(**c)).count()
}

mod card;
mod email;
mod iban;
mod ip;
mod keywords;
mod phone;
mod secret;
mod ssn;

#[cfg(test)]
mod tests;
