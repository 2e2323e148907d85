//! The header block of an event-stream message: `name length (u8) | name | type (u8) | value`
//! repeated, big-endian, with the value types of the AWS specification.

use super::EventStreamError;

/// A header value, one variant per wire type (0 to 9).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderValue {
    /// Types 0 (true) and 1 (false): no value bytes.
    Bool(bool),
    /// Type 2, a signed byte.
    Byte(i8),
    /// Type 3, i16.
    Short(i16),
    /// Type 4, i32.
    Int(i32),
    /// Type 5, i64.
    Long(i64),
    /// Type 6, u16 length then the bytes.
    Bytes(Vec<u8>),
    /// Type 7, u16 length then UTF-8.
    String(String),
    /// Type 8, milliseconds since the Unix epoch (i64).
    Timestamp(i64),
    /// Type 9, 16 bytes.
    Uuid([u8; 16]),
}

/// One header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// The name (`:event-type`, `:message-type`, …).
    pub name: String,
    /// The value.
    pub value: HeaderValue,
}

/// Reads the header block `block`; `base` is its offset in the message, for error positions.
/// Names must be unique (botocore refuses repeats too).
pub(super) fn parse_headers(block: &[u8], base: usize) -> Result<Vec<Header>, EventStreamError> {
    let mut cursor = Cursor { bytes: block, at: 0, base };
    let mut headers = Vec::new();
    while cursor.at < block.len() {
        let name_len = usize::from(cursor.u8()?);
        let name = cursor.utf8(name_len)?;
        let value = cursor.value()?;
        headers.push(Header { name, value });
    }
    let mut names: Vec<&str> = headers.iter().map(|h| h.name.as_str()).collect();
    names.sort_unstable();
    if let Some(pair) = names.windows(2).find(|pair| pair.first() == pair.get(1)) {
        let name = pair.first().map_or_else(String::new, |n| (*n).to_owned());
        return Err(EventStreamError::DuplicateHeader { name });
    }
    Ok(headers)
}

struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
    base: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], EventStreamError> {
        let end = self.at.checked_add(n).filter(|&end| end <= self.bytes.len());
        let slice = end.and_then(|end| self.bytes.get(self.at..end));
        let slice = slice.ok_or(EventStreamError::TruncatedHeader { offset: self.base + self.at })?;
        self.at += n;
        Ok(slice)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], EventStreamError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, EventStreamError> {
        Ok(u8::from_be_bytes(self.array()?))
    }

    fn utf8(&mut self, len: usize) -> Result<String, EventStreamError> {
        let offset = self.base + self.at;
        let bytes = self.take(len)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| EventStreamError::InvalidUtf8 { offset })
    }

    fn u16_len(&mut self) -> Result<usize, EventStreamError> {
        Ok(usize::from(u16::from_be_bytes(self.array()?)))
    }

    fn value(&mut self) -> Result<HeaderValue, EventStreamError> {
        let offset = self.base + self.at;
        Ok(match self.u8()? {
            0 => HeaderValue::Bool(true),
            1 => HeaderValue::Bool(false),
            2 => HeaderValue::Byte(i8::from_be_bytes(self.array()?)),
            3 => HeaderValue::Short(i16::from_be_bytes(self.array()?)),
            4 => HeaderValue::Int(i32::from_be_bytes(self.array()?)),
            5 => HeaderValue::Long(i64::from_be_bytes(self.array()?)),
            6 => {
                let len = self.u16_len()?;
                HeaderValue::Bytes(self.take(len)?.to_vec())
            }
            7 => {
                let len = self.u16_len()?;
                HeaderValue::String(self.utf8(len)?)
            }
            8 => HeaderValue::Timestamp(i64::from_be_bytes(self.array()?)),
            9 => HeaderValue::Uuid(self.array()?),
            type_byte => return Err(EventStreamError::UnknownHeaderType { type_byte, offset }),
        })
    }
}
