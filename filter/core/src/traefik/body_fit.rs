//! Keeping a rewritten request body at the client's length.
//!
//! Traefik's http-wasm host forwards a request with the client's `Content-Length` whatever the
//! guest wrote (Go's transport sends `r.ContentLength`, which the host never updates), and Go
//! refuses to send a body of another length. So unless a Traefik `buffering` middleware follows
//! (it recounts the length), a rewritten body must keep its length: a shorter one is padded with
//! trailing spaces (insignificant after a JSON document, and in a multipart body's epilogue); a
//! longer JSON one first loses the insignificant whitespace of its encoding.

/// A rewritten body that cannot be brought to the client's length.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the rewritten body needs {have} bytes but the request's Content-Length is {want}")]
pub struct FitError {
    /// The body's length at its most compact.
    pub have: usize,
    /// The client's length.
    pub want: usize,
}

/// `body` brought to exactly `want` bytes; `json` says whether it is a JSON document (which may
/// be compacted), else only padding is allowed.
pub fn fit_length(mut body: Vec<u8>, want: usize, json: bool) -> Result<Vec<u8>, FitError> {
    if body.len() > want && json {
        body = compact_json(&body);
    }
    if body.len() > want {
        return Err(FitError { have: body.len(), want });
    }
    body.resize(want, b' ');
    Ok(body)
}

/// `json` without whitespace outside strings (the bytes inside strings are kept as they are).
fn compact_json(json: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(json.len());
    let (mut in_string, mut escaped) = (false, false);
    for &b in json {
        if in_string {
            out.push(b);
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
        } else if !matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
            in_string = b == b'"';
            out.push(b);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_shorter_body_is_padded_and_stays_valid_json() {
        let fitted = fit_length(br#"{"model":"m"}"#.to_vec(), 20, true).unwrap();
        assert_eq!(fitted, b"{\"model\":\"m\"}       ");
        assert!(serde_json::from_slice::<serde_json::Value>(&fitted).is_ok());
    }

    #[test]
    fn a_longer_json_body_is_compacted_outside_strings_only() {
        let body = br#"{ "model": "a longer name",  "x": "a  b\" c" }"#.to_vec();
        let fitted = fit_length(body, 41, true).unwrap();
        assert_eq!(fitted, br#"{"model":"a longer name","x":"a  b\" c"} "#);
    }

    #[test]
    fn a_body_that_cannot_fit_is_refused_with_both_lengths() {
        assert_eq!(fit_length(b"{\"a\":1}".to_vec(), 5, true), Err(FitError { have: 7, want: 5 }));
        // Multipart bodies are only padded.
        assert_eq!(fit_length(b"a b".to_vec(), 2, false), Err(FitError { have: 3, want: 2 }));
    }
}
