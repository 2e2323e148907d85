//! Strict JSON validation of a request body in one pass, without serde, noting the top-level
//! `"model"` member on the way.
//!
//! Every forwarded request body is validated before its `model` is read, and in wasm serde's
//! `IgnoredAny` visitor cost about as much as routing itself; a second pass to find `model`
//! cost as much again. This accepts exactly what `std::str::from_utf8` and
//! `serde_json::from_slice::<IgnoredAny>` together accept (RFC 8259; ignoring a value has no
//! nesting limit in serde, so none here either), which the tests and the `model_scan` fuzz
//! target check against serde. UTF-8 is checked string by string: outside strings valid JSON
//! is ASCII, and a multi-byte sequence never contains an ASCII byte, so a body whose strings
//! are UTF-8 is UTF-8.

use std::ops::Range;

/// Why a body is not JSON, with serde's line/column convention.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Invalid {
    what: &'static str,
    at: usize,
}

impl Invalid {
    /// "`what` at line L column C" for `body`.
    pub(crate) fn describe(&self, body: &[u8]) -> String {
        let before = body.get(..self.at).unwrap_or(body);
        let line = 1 + before.iter().filter(|&&b| b == b'\n').count();
        let column = before.iter().rev().take_while(|&&b| b != b'\n').count() + 1;
        format!("{} at line {line} column {column}", self.what)
    }
}

/// What a valid body's top level holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Shape {
    /// The top-level value is an object.
    pub(crate) object: bool,
    /// Its `"model"` member (always [`Model::Missing`] for other values).
    pub(crate) model: Model,
    /// It may have a `"stream"` member: it has a key spelled `"stream"`, or a key with
    /// escapes (which could spell it). False means certainly none.
    pub(crate) may_stream: bool,
}

/// The top-level `"model"` member; when there are several, the first problem in body order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Model {
    Missing,
    /// A string token: its span, quotes included, and whether it holds escapes.
    Found(Range<usize>, bool),
    NotString,
    Duplicate,
}

/// Validates `b` as one JSON document (whitespace around it allowed).
pub(crate) fn validate(b: &[u8]) -> Result<Shape, Invalid> {
    let mut v = Validator {
        b,
        pos: 0,
        depth: 0,
        objects: 0,
        deeper: Vec::new(),
        escaped: false,
        model_next: false,
        model: Model::Missing,
        may_stream: false,
    };
    v.ws();
    let object = v.peek() == Some(b'{');
    loop {
        v.value()?;
        if v.after_value()? {
            break;
        }
    }
    v.ws();
    match v.pos < b.len() {
        true => Err(v.err("trailing characters")),
        false => Ok(Shape { object, model: v.model, may_stream: v.may_stream }),
    }
}

struct Validator<'a> {
    b: &'a [u8],
    pos: usize,
    depth: usize,
    /// Bit `d` set: the container at depth `d + 1` is an object, for the first 64 levels ...
    /// (a `u64`: shifting a `u128` is a library call in wasm)
    objects: u64,
    /// ... and beyond them (allocated only for such bodies).
    deeper: Vec<bool>,
    /// The last string read had escapes.
    escaped: bool,
    /// The value about to be read is the top-level `"model"` member's.
    model_next: bool,
    model: Model,
    /// See [`Shape::may_stream`].
    may_stream: bool,
}

impl Validator<'_> {
    fn err(&self, what: &'static str) -> Invalid {
        Invalid { what, at: self.pos }
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.pos).copied()
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn in_object(&self) -> bool {
        match self.depth {
            0 => false,
            1..=64 => self.objects & (1u64 << (self.depth - 1)) != 0,
            _ => self.deeper.last().copied().unwrap_or(false),
        }
    }

    /// One complete scalar or empty container, or — through containers' openings — the first
    /// such value inside them (their rest is [`after_value`](Self::after_value)'s).
    fn value(&mut self) -> Result<(), Invalid> {
        loop {
            self.ws();
            // After a top-level `"model"` key (read last, by `open` or `after_value`).
            if std::mem::take(&mut self.model_next) {
                if self.peek() == Some(b'"') {
                    let start = self.pos;
                    self.string()?;
                    self.note_model(Some(start..self.pos));
                    return Ok(());
                }
                self.note_model(None);
            }
            match self.peek() {
                Some(open @ (b'{' | b'[')) => {
                    if self.open(open == b'{')? {
                        continue;
                    }
                    return Ok(());
                }
                _ => return self.scalar(),
            }
        }
    }

    fn scalar(&mut self) -> Result<(), Invalid> {
        match self.peek() {
            Some(b'"') => self.string(),
            Some(b't') => self.literal(b"true"),
            Some(b'f') => self.literal(b"false"),
            Some(b'n') => self.literal(b"null"),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.err("expected value")),
            None => Err(self.err("EOF while parsing a value")),
        }
    }

    /// `{` or `[`: an empty container is closed at once (false); otherwise the cursor is left
    /// where its first value starts, after the first key of an object (true).
    fn open(&mut self, object: bool) -> Result<bool, Invalid> {
        self.pos += 1;
        self.depth += 1;
        if self.depth <= 64 {
            let bit = 1u64 << (self.depth - 1);
            self.objects = if object { self.objects | bit } else { self.objects & !bit };
        } else {
            self.deeper.push(object);
        }
        self.ws();
        if self.peek() == Some(if object { b'}' } else { b']' }) {
            self.close();
            return Ok(false);
        }
        if object {
            self.key()?;
        }
        Ok(true)
    }

    /// `"key" :` inside an object.
    fn key(&mut self) -> Result<(), Invalid> {
        self.ws();
        if self.peek() != Some(b'"') {
            return Err(self.err(if self.peek().is_none() {
                "EOF while parsing an object"
            } else {
                "key must be a string"
            }));
        }
        let start = self.pos;
        self.string()?;
        // Only a key of the top-level object can be the routing `model` (or `stream`).
        if self.depth == 1 {
            let span = start..self.pos;
            self.may_stream |= self.escaped || self.b.get(span.clone()) == Some(b"\"stream\"".as_slice());
            self.model_next = super::scan::is_model_key(self.b, span, self.escaped);
        }
        self.ws();
        if self.peek() != Some(b':') {
            return Err(self.err("expected `:`"));
        }
        self.pos += 1;
        Ok(())
    }

    /// After a complete value: closes finished containers and consumes one separator (and the
    /// next key in an object). True when the top-level value is complete.
    fn after_value(&mut self) -> Result<bool, Invalid> {
        loop {
            if self.depth == 0 {
                return Ok(true);
            }
            self.ws();
            let object = self.in_object();
            match self.peek() {
                Some(b',') => {
                    self.pos += 1;
                    if object {
                        self.key()?;
                    }
                    return Ok(false);
                }
                Some(b'}') if object => self.close(),
                Some(b']') if !object => self.close(),
                None => return Err(self.err("EOF while parsing a container")),
                Some(_) => return Err(self.err("expected `,` or the container's end")),
            }
        }
    }

    /// A top-level `"model"` member: its string token's span, or `None` for another kind of
    /// value. The first problem (a non-string, a second member) is kept.
    fn note_model(&mut self, span: Option<Range<usize>>) {
        self.model = match (&self.model, span) {
            (Model::Missing, Some(span)) => Model::Found(span, self.escaped),
            (Model::Missing, None) => Model::NotString,
            (Model::Found(..), _) => Model::Duplicate,
            (Model::NotString | Model::Duplicate, _) => return,
        };
    }

    fn close(&mut self) {
        self.pos += 1;
        if self.depth > 64 {
            self.deeper.pop();
        }
        self.depth -= 1;
    }

    fn literal(&mut self, word: &[u8]) -> Result<(), Invalid> {
        if self.b.get(self.pos..self.pos + word.len()) != Some(word) {
            return Err(self.err("expected ident"));
        }
        self.pos += word.len();
        Ok(())
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`
    fn number(&mut self) -> Result<(), Invalid> {
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => {
                self.pos += 1;
                if self.peek().is_some_and(|c| c.is_ascii_digit()) {
                    return Err(self.err("invalid number"));
                }
            }
            Some(b'1'..=b'9') => self.digits(),
            _ => return Err(self.err("invalid number")),
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            self.required_digits()?;
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            self.required_digits()?;
        }
        Ok(())
    }

    fn digits(&mut self) {
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
        }
    }

    fn required_digits(&mut self) -> Result<(), Invalid> {
        if !self.peek().is_some_and(|c| c.is_ascii_digit()) {
            return Err(self.err("invalid number"));
        }
        self.digits();
        Ok(())
    }

    /// A string: no raw control characters, only JSON's escapes, UTF-8.
    fn string(&mut self) -> Result<(), Invalid> {
        self.pos += 1;
        self.escaped = false;
        // From the first non-ASCII byte on, the search no longer stops at such bytes; the
        // stretch from there to the closing quote is checked as UTF-8 at the end.
        let mut non_ascii: Option<usize> = None;
        loop {
            let rest = self.b.get(self.pos..).unwrap_or_default();
            let skip = match non_ascii {
                None => crate::bytes::find_string_special_or_non_ascii(rest),
                Some(_) => crate::bytes::find_string_special(rest),
            };
            self.pos += skip.unwrap_or(rest.len());
            match self.peek() {
                Some(b'"') => break,
                Some(b'\\') => self.escape()?,
                Some(0x80..) => non_ascii = Some(self.pos),
                Some(_) => return Err(self.err("control character while parsing a string")),
                None => return Err(self.err("EOF while parsing a string")),
            }
        }
        if let Some(from) = non_ascii {
            if std::str::from_utf8(self.b.get(from..self.pos).unwrap_or_default()).is_err() {
                return Err(Invalid { what: "invalid UTF-8", at: from });
            }
        }
        self.pos += 1;
        Ok(())
    }

    fn escape(&mut self) -> Result<(), Invalid> {
        self.pos += 1;
        self.escaped = true;
        match self.peek() {
            Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => self.pos += 1,
            Some(b'u') => {
                let hex = self.b.get(self.pos + 1..self.pos + 5);
                if !hex.is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) {
                    return Err(self.err("invalid escape"));
                }
                self.pos += 5;
            }
            _ => return Err(self.err("invalid escape")),
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests;
