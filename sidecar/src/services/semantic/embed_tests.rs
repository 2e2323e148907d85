use ferrogate_core::config::{Config, RawConfig};
use serde_json::json;

use super::*;

fn config() -> Config {
    let raw: RawConfig = serde_json::from_value(json!({
        "providers": [
            {"name": "local", "kind": "openai_compatible", "base_url": "http://embed.internal:8080/prefix",
             "api_key": "sk-local"},
            {"name": "pool", "kind": "openai_compatible", "base_url": "http://pool.internal",
             "endpoints": ["127.0.0.1:9001", "127.0.0.1:9002"]},
            {"name": "claude", "kind": "anthropic", "base_url": "https://api.anthropic.com", "api_key": "sk-ant"},
        ],
        "models": [
            {"name": "embed", "targets": [{"provider": "claude", "model": "c"}, {"provider": "local", "model": "minilm"}]},
            {"name": "pooled", "targets": [{"provider": "pool", "model": "bge"}]},
            {"name": "chat", "targets": [{"provider": "claude", "model": "claude-x"}]},
        ],
    }))
    .unwrap();
    Config::try_from(raw).unwrap()
}

#[test]
fn resolves_the_first_openai_speaking_target() {
    let e = endpoint(&config(), "embed").unwrap();
    assert_eq!(e.url, "http://embed.internal:8080/prefix/v1/embeddings");
    assert_eq!(e.authority, "embed.internal:8080");
    assert_eq!(e.upstream, "minilm");
    let c = e.credential.unwrap();
    assert_eq!((c.name, c.value.as_str()), ("authorization", "Bearer sk-local"));
}

#[test]
fn a_pool_is_asked_at_its_first_member() {
    let e = endpoint(&config(), "pooled").unwrap();
    assert_eq!(e.url, "http://127.0.0.1:9001/v1/embeddings");
    assert_eq!(e.authority, "pool.internal");
    assert!(e.credential.is_none());
}

#[test]
fn pinned_models_resolve() {
    let e = endpoint(&config(), "local/other-model").unwrap();
    assert_eq!(e.upstream, "other-model");
}

#[test]
fn unknown_and_unsupported_models_are_errors() {
    assert!(matches!(endpoint(&config(), "nope"), Err(EmbedError::UnknownModel(_))));
    assert!(matches!(endpoint(&config(), "chat"), Err(EmbedError::Unsupported(_))));
    assert!(matches!(endpoint(&config(), "claude/x"), Err(EmbedError::Unsupported(_))));
}

#[test]
fn parses_openai_answers() {
    let body = br#"{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.5,-1,2e-3]}],
        "model":"m","usage":{"prompt_tokens":3,"total_tokens":3}}"#;
    assert_eq!(parse(body).unwrap(), vec![0.5, -1.0, 0.002]);
    for bad in [&br#"{"data":[]}"#[..], br#"{"data":[{"embedding":[]}]}"#, br#"{"error":"x"}"#, b"not json"] {
        assert!(matches!(parse(bad), Err(EmbedError::Answer(_))), "{}", String::from_utf8_lossy(bad));
    }
}

#[test]
fn outages_are_tracked_per_model() {
    let e = Embedder::new();
    let failed: Result<(), EmbedError> = Err(EmbedError::Status(500));
    e.report("a", &failed);
    e.report("a", &failed);
    assert!(e.is_failing("a"));
    assert!(!e.is_failing("b"));
    e.report("a", &Ok(()));
    assert!(!e.is_failing("a"));
}

#[tokio::test]
async fn an_unreachable_model_fails_fast() {
    // A port nobody listens on: refused at once, long before the timeout.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let raw: RawConfig = serde_json::from_value(json!({
        "providers": [{"name": "p", "kind": "openai_compatible", "base_url": format!("http://127.0.0.1:{port}")}],
        "models": [{"name": "embed", "targets": [{"provider": "p", "model": "m"}]}],
    }))
    .unwrap();
    let config = Config::try_from(raw).unwrap();
    let started = std::time::Instant::now();
    let err = Embedder::new().embed(&config, "embed", "hello").await.unwrap_err();
    assert!(matches!(err, EmbedError::Transport(_)), "{err}");
    assert!(started.elapsed() < EMBED_TIMEOUT);
}
