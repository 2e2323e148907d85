//! The request-path parsers a client controls: classification (never panics), the query split
//! (agrees with `split_once('?')`), the Gemini `?key=` reader (a key is always a trimmed piece
//! of a `key=` parameter; a crasher with whitespace around the key set this rule), and the model-id check for upstream paths (an id it accepts cannot move the path:
//! visible ASCII only, no `?#%\`, no empty, `.` or `..` segment).
#![no_main]

use ferrogate_core::auth::gemini_query_key;
use ferrogate_core::dialect::Dialect;
use ferrogate_core::route::{classify, split_query, unsafe_in_path};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(path) = std::str::from_utf8(data) else { return };
    for method in ["GET", "POST", "DELETE"] {
        let _ = classify(method, path);
    }
    let _ = Dialect::from_path(path);
    let (bare, query) = split_query(path);
    match path.split_once('?') {
        Some((b, q)) => assert_eq!((bare, query), (b, Some(q))),
        None => assert_eq!((bare, query), (path, None)),
    }
    if let Some(key) = gemini_query_key(path) {
        // A piece of one `key=` parameter of the query, ASCII whitespace trimmed.
        assert!(path.starts_with("/v1beta/") && !key.is_empty());
        assert!(!key.first().is_some_and(u8::is_ascii_whitespace) && !key.last().is_some_and(u8::is_ascii_whitespace));
        let text = std::str::from_utf8(key).unwrap_or_default();
        let query = query.unwrap_or_default();
        assert!(query.split('&').any(|p| p.strip_prefix("key=").is_some_and(|v| v.contains(text))));
    }
    if unsafe_in_path(path).is_none() {
        assert!(path.bytes().all(|b| b.is_ascii_graphic() && !b"?#%\\".contains(&b)));
        assert!(path.split('/').all(|s| !matches!(s, "" | "." | "..")));
    }
});
