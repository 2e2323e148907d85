//! Upstream paths: the provider's `base_url` prefix, the API path, and the client's query
//! string — for Gemini, the model and method in the path and the client's `key` parameter
//! removed (the client's credential never reaches the upstream).

use super::Api;
use crate::config::Provider;

/// Why a model id cannot be placed in an upstream URL path (`None`: it can). Ids are sent as
/// they are, not percent-encoded (providers spell them literally: `meta-llama/Llama-3.1-8B`,
/// `tunedModels/x`), so an id must not be able to change the path it lands in: no `.` or `..`
/// segment, no empty segment, no query or fragment, no percent-escapes (a `%2e%2e` becomes
/// `..` in the upstream), no backslash, no space, control or non-ASCII byte.
pub fn unsafe_in_path(id: &str) -> Option<&'static str> {
    if id.is_empty() {
        return Some("is empty");
    }
    if let Some(b) = id.bytes().find(|b| !b.is_ascii_graphic() || matches!(b, b'?' | b'#' | b'%' | b'\\')) {
        return Some(match b {
            b'?' | b'#' => "contains a query or fragment character ('?', '#')",
            b'%' => "contains a percent-escape ('%')",
            b'\\' => "contains a backslash",
            _ => "contains a space, a control character or a non-ASCII byte",
        });
    }
    if id.split('/').any(|segment| matches!(segment, "" | "." | "..")) {
        return Some("contains an empty, '.' or '..' path segment");
    }
    None
}

/// `(model, method)` of a Gemini path `/v1beta/models/{model}:{method}` (query already cut).
pub(super) fn gemini_model(path: &str) -> Option<(&str, &str)> {
    let rest = path.strip_prefix("/v1beta/models/")?;
    let (model, method) = rest.rsplit_once(':')?;
    (!model.is_empty()).then_some((model, method))
}

/// Whether the client asked for server-sent events (`alt=sse`).
pub(super) fn is_sse(client_path: &str) -> bool {
    super::split_query(client_path).1.is_some_and(|q| q.split('&').any(|p| p == "alt=sse"))
}

/// The path of a request forwarded in the client's own dialect.
pub(super) fn verbatim(provider: &Provider, api: Api, upstream_model: &str, client_path: &str) -> String {
    // Built by pushing, once per request: `format!` is a visible cost in wasm.
    let mut path = String::with_capacity(client_path.len() + provider.base_url.path_prefix.len() + 64);
    path.push_str(&provider.base_url.path_prefix);
    match api {
        Api::GenerateContent | Api::StreamGenerateContent => {
            path.push_str("/v1beta/models/");
            path.push_str(upstream_model);
            path.push_str(if api == Api::GenerateContent { ":generateContent" } else { ":streamGenerateContent" });
        }
        other => path.push_str(other.path()),
    }
    // Gemini clients may put their key in the query; it is theirs, not the provider's.
    let query = super::split_query(client_path).1.unwrap_or_default();
    for (i, param) in query.split('&').filter(|p| !p.is_empty() && !p.starts_with("key=")).enumerate() {
        path.push(if i == 0 { '?' } else { '&' });
        path.push_str(param);
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemini_paths() {
        assert_eq!(gemini_model("/v1beta/models/flash:generateContent"), Some(("flash", "generateContent")));
        assert_eq!(
            gemini_model("/v1beta/models/google/gemini-2.5:streamGenerateContent"),
            Some(("google/gemini-2.5", "streamGenerateContent"))
        );
        assert_eq!(gemini_model("/v1beta/models/:generateContent"), None);
        assert_eq!(gemini_model("/v1beta/models/flash"), None);
        assert!(is_sse("/x?key=k&alt=sse"));
        assert_eq!(
            gemini_model("/v1beta/models/gspy/../../x:generateContent"),
            Some(("gspy/../../x", "generateContent"))
        );
        assert!(!is_sse("/x?alt=json"));
    }

    #[test]
    fn ids_that_could_move_the_path_are_refused() {
        for ok in
            ["gemini-2.5-flash", "meta-llama/Llama-3.1-8B-Instruct", "tunedModels/x-1", "a.b", "org/m:free", "v1.5..2"]
        {
            assert_eq!(unsafe_in_path(ok), None, "{ok}");
        }
        for bad in [
            "../../evil",
            "x/../y",
            "./x",
            "x/.",
            "..",
            "evil?x=1",
            "m#frag",
            "%2e%2e/x",
            "a\\b",
            "a b",
            "a\tb",
            "a\u{7f}",
            "modèle",
            "",
            "a//b",
            "/a",
            "a/",
        ] {
            assert!(unsafe_in_path(bad).is_some(), "{bad:?}");
        }
    }
}
