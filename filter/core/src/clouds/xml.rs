//! Values out of STS's XML answers: the text of an element reached by a path of element names,
//! with XML's entities and character references decoded. STS answers are small, flat and
//! machine-written, so this is a bounded scan (linear in the answer, which is capped at
//! the sidecar's answer limit) rather than a full parser: no DTD, no entity definitions, no
//! nesting of an element inside one of the same name.

/// Why a value could not be read.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum XmlError {
    /// An element of the path is absent.
    #[error("no <{0}> element")]
    Missing(String),
    /// An element opens and never closes.
    #[error("<{0}> is not closed")]
    Unclosed(String),
    /// An `&...;` that is not one of XML's.
    #[error("unknown or malformed entity {0:?}")]
    Entity(String),
}

/// The decoded text of the element reached from `xml` through `path` (each name the first
/// element of that name inside the previous one).
pub fn text(xml: &str, path: &[&str]) -> Result<String, XmlError> {
    let mut inside = xml;
    for name in path {
        inside = inner(inside, name)?;
    }
    unescape(inside)
}

/// The content of the first `<name ...>` element of `xml` (empty for `<name/>`).
fn inner<'a>(xml: &'a str, name: &str) -> Result<&'a str, XmlError> {
    let open = format!("<{name}");
    let mut from = 0;
    while let Some(at) = xml.get(from..).and_then(|rest| rest.find(&open)) {
        let start = from + at + open.len();
        from = start;
        let rest = xml.get(start..).unwrap_or_default();
        // `<NameOther>` is not `<Name>`.
        if !rest.starts_with(['>', '/', ' ', '\t', '\r', '\n']) {
            continue;
        }
        let end_of_tag = rest.find('>').ok_or_else(|| XmlError::Unclosed(name.to_string()))?;
        if rest.get(..end_of_tag).is_some_and(|tag| tag.ends_with('/')) {
            return Ok("");
        }
        let content = rest.get(end_of_tag + 1..).unwrap_or_default();
        let close = content.find(&format!("</{name}>")).ok_or_else(|| XmlError::Unclosed(name.to_string()))?;
        return Ok(content.get(..close).unwrap_or_default());
    }
    Err(XmlError::Missing(name.to_string()))
}

/// `text` with XML's five entities and numeric character references decoded, and a CDATA
/// section taken as is.
pub fn unescape(text: &str) -> Result<String, XmlError> {
    let text = text.trim();
    if let Some(raw) = text.strip_prefix("<![CDATA[").and_then(|t| t.strip_suffix("]]>")) {
        return Ok(raw.to_string());
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let end = after.find(';').filter(|e| *e <= 10).ok_or_else(|| XmlError::Entity(clip(after)))?;
        out.push(entity(&after[..end])?);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The character `&name;` stands for.
fn entity(name: &str) -> Result<char, XmlError> {
    let bad = || XmlError::Entity(format!("&{name};"));
    let code = match name {
        "amp" => return Ok('&'),
        "lt" => return Ok('<'),
        "gt" => return Ok('>'),
        "quot" => return Ok('"'),
        "apos" => return Ok('\''),
        _ => match name.strip_prefix("#x").or_else(|| name.strip_prefix("#X")) {
            Some(hex) => u32::from_str_radix(hex, 16).map_err(|_| bad())?,
            None => name.strip_prefix('#').ok_or_else(bad)?.parse::<u32>().map_err(|_| bad())?,
        },
    };
    char::from_u32(code).ok_or_else(bad)
}

/// The start of an unterminated entity, for its error.
fn clip(after: &str) -> String {
    format!("&{}", after.chars().take(10).collect::<String>())
}
