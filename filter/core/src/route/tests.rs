//! Routing tests: classification, target/endpoint choice, rewrites, errors.

use super::*;
use crate::config::RawConfig;
use crate::stored::Op;

const YAML: &str = r#"
providers:
  - { name: local, kind: openai_compatible, base_url: "http://127.0.0.1:8000", api_key_env: LOCAL_KEY }
  - { name: pool, kind: openai_compatible, base_url: "http://vllm:8000/prefix/", endpoints: ["10.0.0.1:8000", "10.0.0.2:8000"] }
  - { name: openai, kind: openai, base_url: "https://api.openai.com", api_key_env: OPENAI_API_KEY }
  - { name: anthropic, kind: anthropic, base_url: "https://api.anthropic.com", api_key_env: ANTHROPIC_API_KEY }
  - { name: google, kind: gemini, base_url: "https://generativelanguage.googleapis.com", api_key_env: GEMINI_API_KEY }
models:
  - { name: chat, targets: [{ provider: local, model: sim-small }] }
  - name: rr
    targets: [{ provider: local, model: a }, { provider: pool, model: b }]
  - name: w
    strategy: weighted
    targets: [{ provider: local, model: a, weight: 3 }, { provider: openai, model: b }]
  - name: first
    strategy: first
    targets: [{ provider: openai, model: a }, { provider: local, model: b }]
  - { name: claude, targets: [{ provider: anthropic, model: claude-x }] }
  - { name: same, targets: [{ provider: local, model: same }] }
  - { name: gem, targets: [{ provider: google, model: gem-x }] }
aliases: { default: chat }
"#;

fn config() -> Config {
    let mut raw: RawConfig = serde_saphyr::from_str(YAML).unwrap();
    raw.resolve_api_keys(|var| Some(format!("k-{var}")));
    Config::try_from(raw).unwrap()
}

fn chat(c: &Config, body: &str, counter: u64) -> Result<RouteDecision<'static>, ApiError> {
    // Leak the config so decisions can be returned from the helper (tests only).
    let c: &'static Config = Box::leak(Box::new(c.clone()));
    route(c, Caller::Open, Api::ChatCompletions, "/v1/chat/completions", body.as_bytes(), counter)
}

#[test]
fn classify_paths_and_methods() {
    assert_eq!(classify("GET", "/v1/models"), Endpoint::ListModels);
    assert_eq!(classify("GET", "/v1/models?x=1"), Endpoint::ListModels);
    assert_eq!(classify("GET", "/v1/models/chat"), Endpoint::GetModel("chat"));
    assert_eq!(classify("POST", "/v1/chat/completions"), Endpoint::Forward(Api::ChatCompletions));
    assert_eq!(classify("POST", "/v1/completions?a=b"), Endpoint::Forward(Api::Completions));
    assert_eq!(classify("POST", "/v1/embeddings"), Endpoint::Forward(Api::Embeddings));
    assert_eq!(classify("POST", "/mcp/tools"), Endpoint::Mcp { server: "tools", rest: "" });
    assert_eq!(classify("POST", "/mcp"), Endpoint::McpFederated);
    assert_eq!(classify("GET", "/mcp/?tools=search"), Endpoint::McpFederated);
    assert_eq!(classify("GET", "/mcp/tools?x=1"), Endpoint::Mcp { server: "tools", rest: "" });
    assert_eq!(
        classify("POST", "/mcp/old/messages/?session_id=1"),
        Endpoint::Mcp { server: "old", rest: "/messages/" }
    );
    let card = Endpoint::A2a { agent: "echo", rest: "/.well-known/agent-card.json" };
    assert_eq!(classify("GET", "/a2a/echo/.well-known/agent-card.json"), card);
    assert_eq!(classify("POST", "/a2a/echo"), Endpoint::A2a { agent: "echo", rest: "" });
    let status = |m, p| match classify(m, p) {
        Endpoint::Reject(e) => e.status,
        other => panic!("{other:?}"),
    };
    assert_eq!(status("GET", "/v1/chat/completions"), 405);
    assert_eq!(status("POST", "/v1/models"), 405);
    assert_eq!(status("POST", "/v1/chat/completions/"), 404);
    assert_eq!(status("GET", "/"), 404);
    assert_eq!(status("GET", "/v1/models/"), 404);
    assert_eq!(status("POST", "/mcpx"), 404);
    assert_eq!(status("POST", "/mcp//x"), 404);
}

#[test]
fn routes_public_model_and_rewrites_body() {
    let c = config();
    let d = chat(&c, r#"{"model":"chat","messages":[{"role":"user","content":"hi"}]}"#, 0).unwrap();
    assert_eq!((d.provider, d.authority, d.path.as_str()), ("local", "127.0.0.1:8000", "/v1/chat/completions"));
    assert_eq!(d.upstream_model, "sim-small");
    assert_eq!(
        d.body.as_deref(),
        Some(br#"{"model":"sim-small","messages":[{"role":"user","content":"hi"}]}"#.as_slice())
    );
    assert_eq!(d.endpoint, None);
    let cred = d.credential.unwrap();
    assert_eq!((cred.name, cred.value.as_str()), ("authorization", "Bearer k-LOCAL_KEY"));
}

#[test]
fn alias_resolves_to_its_model() {
    let d = chat(&config(), r#"{"model":"default"}"#, 0).unwrap();
    assert_eq!((d.provider, d.upstream_model.as_str()), ("local", "sim-small"));
}

#[test]
fn unchanged_model_keeps_body_untouched() {
    let d = chat(&config(), r#"{"model":"same"}"#, 0).unwrap();
    assert_eq!(d.body, None);
}

#[test]
fn provider_model_addressing_passes_id_through() {
    let c = config();
    let d = chat(&c, r#"{"model":"openai/gpt-4o"}"#, 0).unwrap();
    assert_eq!((d.provider, d.authority, d.upstream_model.as_str()), ("openai", "api.openai.com", "gpt-4o"));
    assert_eq!(d.body.as_deref(), Some(br#"{"model":"gpt-4o"}"#.as_slice()));
    let d = chat(&c, r#"{"model":"pool/org/m"}"#, 1).unwrap();
    assert_eq!(
        (d.path.as_str(), d.upstream_model.as_str(), d.endpoint),
        ("/prefix/v1/chat/completions", "org/m", Some("10.0.0.2:8000"))
    );
    assert_eq!(d.credential, None);
}

#[test]
fn round_robin_uses_the_counter() {
    let c = config();
    let picks: Vec<(&str, Option<&str>)> =
        (0..4).map(|n| chat(&c, r#"{"model":"rr"}"#, n).unwrap()).map(|d| (d.provider, d.endpoint)).collect();
    // The pool endpoint rotates independently of the target rotation.
    assert_eq!(
        picks,
        [("local", None), ("pool", Some("10.0.0.1:8000")), ("local", None), ("pool", Some("10.0.0.2:8000"))]
    );
}

#[test]
fn weighted_and_priority() {
    let c = config();
    let w: Vec<&str> = (0..8).map(|n| chat(&c, r#"{"model":"w"}"#, n).unwrap().provider).collect();
    assert_eq!(w, ["local", "local", "local", "openai", "local", "local", "local", "openai"]);
    for n in 0..3 {
        assert_eq!(chat(&c, r#"{"model":"first"}"#, n).unwrap().provider, "openai");
    }
}

#[test]
fn keeps_query_and_api_path() {
    let c = config();
    let d = route(
        &c,
        Caller::Open,
        Api::Embeddings,
        "/v1/embeddings?api-version=1",
        br#"{"model":"pool/e","input":"x"}"#,
        0,
    )
    .unwrap();
    assert_eq!(d.path, "/prefix/v1/embeddings?api-version=1");
}

#[test]
fn errors_have_status_and_openai_shape() {
    let c = config();
    let err = |body: &str| chat(&c, body, 0).unwrap_err();
    assert_eq!(err(r#"{"model":"nope"}"#).status, 404);
    assert_eq!(err(r#"{"model":"nope"}"#).code, Some("model_not_found"));
    assert_eq!(err(r#"{"model":"ghost/x"}"#).status, 404);
    assert_eq!(err(r#"{"messages":[]}"#).status, 400);
    assert_eq!(err("not json").status, 400);
    assert_eq!(err("[1]").status, 400);
    let c: &'static Config = Box::leak(Box::new(c.clone()));
    let e = route(c, Caller::Open, Api::Embeddings, "/v1/embeddings", br#"{"model":"claude"}"#, 0).unwrap_err();
    assert_eq!((e.status, e.param), (400, Some("model")));
    assert!(e.message.contains("speaks the anthropic API"), "{}", e.message);
    let v: serde_json::Value = serde_json::from_slice(&e.body()).unwrap();
    assert_eq!(v["error"]["type"], "invalid_request_error");
}

/// A chat completion for a model served by Anthropic is translated; a Messages request for
/// it goes verbatim (only the model spliced); a Messages request for an OpenAI-speaking
/// model is translated the other way.
#[test]
fn providers_of_another_dialect_get_translated_bodies() {
    let c: &'static Config = Box::leak(Box::new(config()));
    let d = chat(c, r#"{"model":"claude","messages":[{"role":"user","content":"hi"}]}"#, 0).unwrap();
    assert_eq!(d.path, "/v1/messages");
    let (pair, ctx) = d.translation.unwrap();
    assert_eq!((pair.inbound, pair.outbound), (Inbound::OpenAiChat, Outbound::Anthropic));
    assert_eq!(ctx.model, "claude");
    let sent: serde_json::Value = serde_json::from_slice(&d.body.unwrap()).unwrap();
    assert_eq!((sent["model"].as_str(), sent["max_tokens"].as_u64()), (Some("claude-x"), Some(4096)));

    let messages = |model: &str| {
        let body =
            format!(r#"{{ "model" : "{model}", "max_tokens":5, "messages":[{{"role":"user","content":"hi"}}]}}"#);
        route(c, Caller::Open, Api::Messages, "/v1/messages", Box::leak(body.into_boxed_str()).as_bytes(), 0)
    };
    let d = messages("claude").unwrap();
    assert!(d.translation.is_none());
    assert_eq!(d.path, "/v1/messages");
    let spliced = r#"{ "model" : "claude-x", "max_tokens":5, "messages":[{"role":"user","content":"hi"}]}"#;
    assert_eq!(d.body.as_deref(), Some(spliced.as_bytes()), "verbatim but for the model");
    let d = messages("chat").unwrap();
    assert_eq!(d.path, "/v1/chat/completions");
    assert_eq!(d.translation.unwrap().0.inbound, Inbound::Anthropic);

    let d = chat(c, r#"{"model":"claude","messages":[],"stream":true}"#, 0).unwrap();
    assert!(d.translation.unwrap().1.stream, "streams are translated too");
    let e = chat(c, r#"{"model":"claude","messages":[],"seed":3}"#, 0).unwrap_err();
    assert!(e.message.contains("`seed`"), "{}", e.message);
}

#[test]
fn models_listing_in_open_mode() {
    let c = config();
    let v: serde_json::Value = serde_json::from_slice(&crate::openai::models_list_for(&c, Caller::Open)).unwrap();
    assert_eq!(v["object"], "list");
    let ids: Vec<&str> = v["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["chat", "rr", "w", "first", "claude", "same", "gem", "default"]);
    assert_eq!(v["data"][0]["object"], "model");
    assert!(crate::openai::model_entry_for(&c, Caller::Open, "default").is_ok());
    assert_eq!(crate::openai::model_entry_for(&c, Caller::Open, "openai/gpt-4o").unwrap_err().status, 404);
}

/// Routing with keys (`testdata/config/keys.yaml`): the caller's grants apply, after the
/// body checks and with 404 before 403.
#[test]
fn route_applies_grants() {
    let c = crate::testing::keys_config();
    let go = |caller: Caller, body: &str| {
        route(&c, caller, Api::ChatCompletions, "/v1/chat/completions", body.as_bytes(), 0)
            .map(|d| (d.provider.to_string(), d.upstream_model))
            .map_err(|e| e.status)
    };
    let alice = Caller::Key(0);
    let dave = Caller::Key(3);
    let cases = [
        (alice, r#"{"model":"default"}"#, Ok(("local", "sim-small"))),
        (alice, r#"{"model":"fast"}"#, Ok(("openai", "gpt-4o-mini"))),
        (alice, r#"{"model":"local/x"}"#, Ok(("local", "x"))),
        (alice, r#"{"model":"embed"}"#, Err(403)),
        (alice, r#"{"model":"nope"}"#, Err(404)),
        (dave, r#"{"model":"nope"}"#, Err(404)),
        (dave, r#"{"model":"chat"}"#, Err(403)),
        // Body problems come first: they say nothing about what exists.
        (dave, r#"{"messages":[]}"#, Err(400)),
        (Caller::Open, r#"{"model":"chat"}"#, Err(403)),
    ];
    for (caller, body, want) in cases {
        let want = want.map(|(p, m)| (p.to_string(), m.to_string()));
        assert_eq!(go(caller, body), want, "{caller:?} {body}");
    }
}

#[test]
fn multipart_audio_model_field_is_rewritten_in_place() {
    let c = config();
    let body = b"--XyZ\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nchat\r\n--XyZ\r\n\
Content-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\nContent-Type: audio/wav\r\n\r\nRIFF\x00\x01\r\n--XyZ--\r\n";
    let ct = Some(&b"multipart/form-data; boundary=XyZ"[..]);
    let d = route_request(&c, Caller::Open, Api::AudioTranscriptions, "/v1/audio/transcriptions", ct, body, 0).unwrap();
    let expected = String::from_utf8_lossy(body).replace("\r\n\r\nchat\r\n", "\r\n\r\nsim-small\r\n");
    assert_eq!(d.body.as_deref(), Some(expected.as_bytes()));
    assert_eq!(d.path, "/v1/audio/transcriptions");
    // Without a boundary the body cannot be read: 400, never a guess.
    let err = route_request(&c, Caller::Open, Api::AudioTranscriptions, "/", Some(b"text/plain"), body, 0);
    assert_eq!(err.unwrap_err().status, 400);
    // JSON APIs go through the JSON path.
    let d = route_request(
        &c,
        Caller::Open,
        Api::ImagesGenerations,
        "/v1/images/generations",
        None,
        br#"{"model":"chat"}"#,
        0,
    )
    .unwrap();
    assert_eq!(d.path, "/v1/images/generations");
    assert_eq!(d.body.as_deref(), Some(&br#"{"model":"sim-small"}"#[..]));
}

/// Gemini names the model and streaming in the path: verbatim to a Gemini provider (the
/// client's `key` parameter removed), translated elsewhere, and other clients reach Gemini
/// providers at the model's path.
#[test]
fn gemini_paths_route_by_the_model_in_them() {
    let c: &'static Config = Box::leak(Box::new(config()));
    let gemini =
        |api: Api, path: &'static str, body: &'static str| route(c, Caller::Open, api, path, body.as_bytes(), 0);
    let body = r#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}"#;
    let d = gemini(Api::StreamGenerateContent, "/v1beta/models/gem:streamGenerateContent?key=secret&alt=sse", body)
        .unwrap();
    assert_eq!(d.path, "/v1beta/models/gem-x:streamGenerateContent?alt=sse");
    assert_eq!((d.body, d.translation.is_none(), d.requested.as_str()), (None, true, "gem"));

    let d = gemini(Api::GenerateContent, "/v1beta/models/claude:generateContent", body).unwrap();
    assert_eq!(d.path, "/v1/messages");
    let (_, ctx) = d.translation.unwrap();
    assert_eq!((ctx.model.as_str(), ctx.stream), ("claude", false));
    let e = gemini(Api::StreamGenerateContent, "/v1beta/models/claude:streamGenerateContent", body).unwrap_err();
    assert!(e.message.contains("alt=sse"), "{}", e.message);
    assert_eq!(gemini(Api::GenerateContent, "/v1beta/models/nope:generateContent", body).unwrap_err().status, 404);

    let d = chat(c, r#"{"model":"gem","stream":true,"messages":[{"role":"user","content":"hi"}]}"#, 0).unwrap();
    assert_eq!(d.path, "/v1beta/models/gem-x:streamGenerateContent?alt=sse");
    assert!(classify("POST", "/v1beta/models/gem:generateContent") == Endpoint::Forward(Api::GenerateContent));
}

/// A Gemini body is validated like any other, though the model is in the path.
#[test]
fn gemini_bodies_are_validated_before_they_go_upstream() {
    let c: &'static Config = Box::leak(Box::new(config()));
    let path = "/v1beta/models/gem:generateContent";
    for (body, wants) in [("{\"contents\": [", "parse"), ("[1, 2]", "JSON object"), ("", "parse")] {
        let e = route(c, Caller::Open, Api::GenerateContent, path, body.as_bytes(), 0).unwrap_err();
        assert_eq!(e.status, 400, "{body:?}");
        assert!(e.message.contains(wants), "{body:?}: {}", e.message);
    }
}

/// A pinned id that could move the upstream path is refused with 400 in every dialect; the
/// Gemini path that carries one too. Configured ids are refused by validation.
#[test]
fn model_ids_that_could_move_the_upstream_path_are_refused() {
    let c: &'static Config = Box::leak(Box::new(config()));
    for id in ["google/../../evil?x=1#", "google/a/../../b", "local/%2e%2e/x", r"local/a\u0001b"] {
        let e = chat(c, &format!(r#"{{"model":"{id}"}}"#), 0).unwrap_err();
        assert_eq!((e.status, e.param), (400, Some("model")), "{id}: {}", e.message);
    }
    let body = r#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}"#;
    let path = "/v1beta/models/google/../../x:generateContent";
    let e = route(c, Caller::Open, Api::GenerateContent, path, body.as_bytes(), 0).unwrap_err();
    assert_eq!(e.status, 400, "{}", e.message);
    assert!(chat(c, r#"{"model":"google/gemini-2.5-flash"}"#, 0).is_ok());
    let mut raw: RawConfig = serde_saphyr::from_str(YAML).unwrap();
    raw.models[0].targets[0].model = "../x".into();
    let problems = Config::try_from(raw).unwrap_err().problems;
    assert!(problems.iter().any(|p| p.path == "models[0].targets[0].model"), "{problems:?}");
}

/// `/v1/responses` goes verbatim to OpenAI, translated to chat elsewhere; its lifecycle calls
/// go to the response store, except `cancel` (400: nothing runs in the background).
#[test]
fn responses_api_routes_and_lifecycle_goes_to_the_store() {
    let c: &'static Config = Box::leak(Box::new(config()));
    let go = |model: &str| {
        let body = Box::leak(format!(r#"{{"model":"{model}","input":"hi"}}"#).into_boxed_str());
        route(c, Caller::Open, Api::Responses, "/v1/responses", body.as_bytes(), 0)
    };
    let d = go("openai/gpt-4o").unwrap();
    assert_eq!((d.path.as_str(), d.translation.is_none()), ("/v1/responses", true));
    let d = go("chat").unwrap();
    assert_eq!(d.path, "/v1/chat/completions");
    assert_eq!(d.translation.unwrap().0.inbound, Inbound::Responses);
    assert_eq!(go("claude").unwrap().path, "/v1/messages");
    let stored = |method, path| match classify(method, path) {
        Endpoint::Stored(l) => Some((l.op, l.id)),
        _ => None,
    };
    assert_eq!(stored("GET", "/v1/responses/resp_1"), Some((Op::Retrieve, "resp_1")));
    assert_eq!(stored("DELETE", "/v1/responses/resp_1?x=1"), Some((Op::Delete, "resp_1")));
    assert_eq!(stored("GET", "/v1/responses/resp_1/input_items?limit=2"), Some((Op::InputItems, "resp_1")));
    for (method, path, status) in [
        ("POST", "/v1/responses/resp_1/cancel", 400),
        ("POST", "/v1/responses/resp_1", 405),
        ("GET", "/v1/responses/resp_1/other", 404),
        ("GET", "/v1/responses/nope", 400),
        ("GET", "/v1/responses/resp_a%2F..", 400),
        ("GET", "/v1/responses/", 400),
    ] {
        let Endpoint::Reject(e) = classify(method, path) else { panic!("{method} {path}") };
        assert_eq!(e.status, status, "{method} {path}");
    }
}

#[test]
fn split_query_agrees_with_split_once() {
    for path in ["", "?", "/v1/chat/completions", "/v1/x?a=1", "/é/ü?k=é?x", "/p?", "?q", "/a?b?c", "/ñañañañañaña?z"]
    {
        let want = path.split_once('?').map_or((path, None), |(p, q)| (p, Some(q)));
        assert_eq!(super::split_query(path), want, "{path}");
    }
}
