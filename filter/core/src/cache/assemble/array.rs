//! Framing of a Gemini stream sent without `alt=sse`: one JSON array whose elements are
//! `GenerateContentResponse` objects, written as they are generated. Each element is handed
//! out as soon as its closing brace arrives, so memory holds one element, not the array.

/// Where the scanner is in the array.
#[derive(Debug, Default)]
pub(super) struct ArrayScanner {
    /// The opening `[` was seen.
    opened: bool,
    /// The closing `]` was seen.
    pub(super) closed: bool,
    /// Nesting depth inside the current element (0 between elements).
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// Bytes of the element in progress.
    pub(super) pending: Vec<u8>,
    /// Something other than an array of objects.
    pub(super) malformed: bool,
}

impl ArrayScanner {
    /// Scans `bytes`, calling `element` with each whole element.
    pub(super) fn feed(&mut self, bytes: &[u8], mut element: impl FnMut(&[u8])) {
        for &b in bytes {
            if self.malformed {
                return;
            }
            if self.depth > 0 {
                self.pending.push(b);
                if self.inside(b) {
                    element(&self.pending);
                    self.pending.clear();
                }
            } else {
                self.between(b);
            }
        }
    }

    /// One byte inside an element; true when it closes the element.
    fn inside(&mut self, b: u8) -> bool {
        if self.in_string {
            match b {
                _ if self.escaped => self.escaped = false,
                b'\\' => self.escaped = true,
                b'"' => self.in_string = false,
                _ => {}
            }
            return false;
        }
        match b {
            b'"' => self.in_string = true,
            b'{' | b'[' => self.depth += 1,
            b'}' | b']' => {
                self.depth -= 1;
                return self.depth == 0;
            }
            _ => {}
        }
        false
    }

    /// One byte between elements: whitespace, the brackets, commas, or an element's `{`.
    fn between(&mut self, b: u8) {
        match b {
            b' ' | b'\t' | b'\r' | b'\n' => {}
            b'[' if !self.opened => self.opened = true,
            b',' if self.opened && !self.closed => {}
            b']' if self.opened && !self.closed => self.closed = true,
            b'{' if self.opened && !self.closed => {
                self.depth = 1;
                self.pending.push(b);
            }
            _ => self.malformed = true,
        }
    }
}
