//! Upstream paths: the provider's `base_url` prefix, the API path, and the client's query
//! string — for Gemini, the model and method in the path and the client's `key` parameter
//! removed (the client's credential never reaches the upstream).

use super::Api;
use crate::config::Provider;

/// `(model, method)` of a Gemini path `/v1beta/models/{model}:{method}` (query already cut).
pub(super) fn gemini_model(path: &str) -> Option<(&str, &str)> {
    let rest = path.strip_prefix("/v1beta/models/")?;
    let (model, method) = rest.rsplit_once(':')?;
    (!model.is_empty()).then_some((model, method))
}

/// Whether the client asked for server-sent events (`alt=sse`).
pub(super) fn is_sse(client_path: &str) -> bool {
    client_path.split_once('?').is_some_and(|(_, q)| q.split('&').any(|p| p == "alt=sse"))
}

/// The path of a request forwarded in the client's own dialect.
pub(super) fn verbatim(provider: &Provider, api: Api, upstream_model: &str, client_path: &str) -> String {
    let prefix = &provider.base_url.path_prefix;
    let query = client_path.split_once('?').map(|(_, q)| q);
    let api_path = match api {
        Api::GenerateContent => format!("/v1beta/models/{upstream_model}:generateContent"),
        Api::StreamGenerateContent => format!("/v1beta/models/{upstream_model}:streamGenerateContent"),
        other => other.path().to_string(),
    };
    // Gemini clients may put their key in the query; it is theirs, not the provider's.
    let kept: Vec<&str> = query.map(|q| q.split('&').filter(|p| !p.starts_with("key=")).collect()).unwrap_or_default();
    match kept.is_empty() {
        true => format!("{prefix}{api_path}"),
        false => format!("{prefix}{api_path}?{}", kept.join("&")),
    }
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
        assert!(!is_sse("/x?alt=json"));
    }
}
