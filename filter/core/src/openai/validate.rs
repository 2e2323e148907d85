//! Strict JSON validation of a request body in one pass, without serde.
//!
//! Every forwarded request body is validated before its `model` is read, and in wasm serde's
//! `IgnoredAny` visitor cost about as much as routing itself. This accepts exactly what
//! `serde_json::from_slice::<IgnoredAny>` accepts (RFC 8259; ignoring a value has no nesting
//! limit in serde, so none here either), which the tests and the `model_scan` fuzz target check
//! against serde. UTF-8 is checked by the caller, for the whole body.

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

/// Validates `b` as one JSON document (whitespace around it allowed).
pub(crate) fn validate(b: &[u8]) -> Result<(), Invalid> {
    let mut v = Validator { b, pos: 0, depth: 0, objects: 0, deeper: Vec::new() };
    loop {
        v.value()?;
        if v.after_value()? {
            break;
        }
    }
    v.ws();
    match v.pos < b.len() {
        true => Err(v.err("trailing characters")),
        false => Ok(()),
    }
}

struct Validator<'a> {
    b: &'a [u8],
    pos: usize,
    depth: usize,
    /// Bit `d` set: the container at depth `d + 1` is an object, for the first 128 levels ...
    objects: u128,
    /// ... and beyond them (allocated only for such bodies).
    deeper: Vec<bool>,
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
            1..=128 => self.objects & (1u128 << (self.depth - 1)) != 0,
            _ => self.deeper.last().copied().unwrap_or(false),
        }
    }

    /// One complete scalar or empty container, or — through containers' openings — the first
    /// such value inside them (their rest is [`after_value`](Self::after_value)'s).
    fn value(&mut self) -> Result<(), Invalid> {
        loop {
            self.ws();
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
        if self.depth <= 128 {
            let bit = 1u128 << (self.depth - 1);
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
        self.string()?;
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

    fn close(&mut self) {
        self.pos += 1;
        if self.depth > 128 {
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

    /// A string: no raw control characters, only JSON's escapes.
    fn string(&mut self) -> Result<(), Invalid> {
        self.pos += 1;
        loop {
            let rest = self.b.get(self.pos..).unwrap_or_default();
            let skip = crate::bytes::find_string_special(rest).unwrap_or(rest.len());
            self.pos += skip;
            match self.peek() {
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(());
                }
                Some(b'\\') => self.escape()?,
                Some(_) => return Err(self.err("control character while parsing a string")),
                None => return Err(self.err("EOF while parsing a string")),
            }
        }
    }

    fn escape(&mut self) -> Result<(), Invalid> {
        self.pos += 1;
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
mod tests;
