//! Cloud kinds' paths, headers and bodies, through the router.

use crate::auth::Caller;
use crate::config::{Config, RawConfig};
use crate::route::{route, Api, RouteDecision};

const YAML: &str = r#"
providers:
  - { name: azure, kind: azure_openai, base_url: "https://res.openai.azure.com", api_version: "2024-10-21", api_key_env: AZ }
  - { name: azure1, kind: azure_openai, base_url: "https://res.openai.azure.com", api_key_env: AZ }
  - name: entra
    kind: azure_openai
    base_url: "https://res.openai.azure.com"
    credentials: { source: azure_client_credentials, tenant_id: t, client_id: c, client_secret_env: S }
  - { name: vertex, kind: vertex, project: my-proj-1, region: us-east5, api_key_env: GT }
  - { name: vglobal, kind: vertex, project: my-proj-1, region: global, api_key_env: GT }
models:
  - { name: az, targets: [{ provider: azure, model: gpt4o-deploy }] }
  - { name: az1, targets: [{ provider: azure1, model: gpt-4o-mini }] }
  - { name: entra, targets: [{ provider: entra, model: d }] }
  - { name: gem, targets: [{ provider: vertex, model: gemini-2.5-flash }] }
  - { name: claude, targets: [{ provider: vertex, model: "claude-sonnet-4@20250514" }] }
  - { name: glob, targets: [{ provider: vglobal, model: "anthropic/claude-x@1" }] }
"#;

fn config() -> &'static Config {
    let mut raw: RawConfig = serde_saphyr::from_str(YAML).unwrap();
    raw.resolve_api_keys(|var| Some(format!("k-{var}")));
    Box::leak(Box::new(Config::try_from(raw).unwrap()))
}

fn go(api: Api, path: &str, body: &str) -> RouteDecision<'static> {
    route(config(), Caller::Open, api, path, body.as_bytes(), 0).unwrap()
}

fn json(d: &RouteDecision<'_>) -> serde_json::Value {
    serde_json::from_slice(d.body.as_deref().unwrap()).unwrap()
}

#[test]
fn azure_deployment_and_v1_paths_and_headers() {
    let d = go(Api::ChatCompletions, "/v1/chat/completions?x=1", r#"{"model":"az","messages":[]}"#);
    assert_eq!(d.path, "/openai/deployments/gpt4o-deploy/chat/completions?api-version=2024-10-21");
    assert_eq!(d.authority, "res.openai.azure.com");
    let cred = d.credential.unwrap();
    assert_eq!((cred.name, cred.value.as_str()), ("api-key", "k-AZ"));
    assert_eq!(json(&d)["model"], "gpt4o-deploy", "the deployment name is the model");
    let d = go(Api::Embeddings, "/v1/embeddings", r#"{"model":"az1","input":"x"}"#);
    assert_eq!(d.path, "/openai/v1/embeddings");
    // Entra ID tokens are bearers.
    let mut raw: RawConfig = serde_saphyr::from_str(YAML).unwrap();
    raw.providers[2].api_key = Some("tok".into());
    let c = Config::try_from(raw).unwrap();
    let cred = c.providers[2].credential.as_ref().unwrap();
    assert_eq!((cred.name, cred.value.as_str()), ("authorization", "Bearer tok"));
}

#[test]
fn azure_takes_anthropic_clients_translated() {
    let body = r#"{"model":"az","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}"#;
    let d = go(Api::Messages, "/v1/messages", body);
    assert_eq!(d.path, "/openai/deployments/gpt4o-deploy/chat/completions?api-version=2024-10-21");
    assert!(d.translation.is_some());
    assert_eq!(json(&d)["messages"][0]["content"], "hi");
}

#[test]
fn vertex_gemini_native_and_translated() {
    let d =
        go(Api::StreamGenerateContent, "/v1beta/models/gem:streamGenerateContent?alt=sse&key=x", r#"{"contents":[]}"#);
    let base = "/v1/projects/my-proj-1/locations/us-east5/publishers/google/models/gemini-2.5-flash";
    assert_eq!(d.path, format!("{base}:streamGenerateContent?alt=sse"));
    assert_eq!(d.authority, "us-east5-aiplatform.googleapis.com");
    assert!(d.translation.is_none() && d.body.is_none(), "a Gemini body goes as it is");
    let cred = d.credential.unwrap();
    assert_eq!((cred.name, cred.value.as_str()), ("authorization", "Bearer k-GT"));
    let d = go(
        Api::ChatCompletions,
        "/v1/chat/completions",
        r#"{"model":"gem","stream":true,"messages":[{"role":"user","content":"hi"}]}"#,
    );
    assert_eq!(d.path, format!("{base}:streamGenerateContent?alt=sse"));
    assert!(json(&d)["contents"].is_array());
}

#[test]
fn vertex_anthropic_native_and_translated() {
    let body = r#"{"model":"claude","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let d = go(Api::Messages, "/v1/messages", body);
    let base = "/v1/projects/my-proj-1/locations/us-east5/publishers/anthropic/models/claude-sonnet-4@20250514";
    assert_eq!(d.path, format!("{base}:streamRawPredict"));
    assert!(d.translation.is_none());
    let sent = json(&d);
    assert_eq!(sent["anthropic_version"], "vertex-2023-10-16");
    assert!(sent.get("model").is_none(), "the model is in the path");
    assert_eq!(sent["stream"], true);
    let body = r#"{"model":"glob","messages":[{"role":"user","content":"hi"}]}"#;
    let d = go(Api::ChatCompletions, "/v1/chat/completions", body);
    assert_eq!(d.authority, "aiplatform.googleapis.com");
    let path = "/v1/projects/my-proj-1/locations/global/publishers/anthropic/models/claude-x@1:rawPredict";
    assert_eq!(d.path, path);
    assert!(d.translation.is_some());
    assert_eq!(json(&d)["anthropic_version"], "vertex-2023-10-16");
    assert!(json(&d).get("model").is_none());
}

#[test]
fn cloud_settings_are_checked_with_their_paths() {
    let bad = r#"
providers:
  - { name: a, kind: vertex, region: "US EAST" }
  - { name: b, kind: bedrock }
  - { name: c, kind: openai, base_url: "https://x", region: us-east-1, api_version: "2024-10-21" }
  - { name: d, kind: azure_openai, base_url: "https://x", api_version: "latest", credentials: { source: aws_env } }
  - { name: e, kind: bedrock, region: us-east-1, credentials: { source: aws_env, key_file: /x } }
  - { name: f, kind: openai_compatible, preset: nope }
  - { name: g, kind: openai, preset: groq, base_url: "https://x" }
"#;
    let raw: RawConfig = serde_saphyr::from_str(bad).unwrap();
    let err = Config::try_from(raw).unwrap_err();
    let paths: Vec<&str> = err.problems.iter().map(|p| p.path.as_str()).collect();
    for want in [
        "providers[0].region",
        "providers[0].project",
        "providers[1].region",
        "providers[1].base_url",
        "providers[2].region",
        "providers[2].api_version",
        "providers[3].api_version",
        "providers[3].credentials.source",
        "providers[4].credentials.key_file",
        "providers[5].preset",
        "providers[6].preset",
    ] {
        assert!(paths.contains(&want), "{want} missing from {paths:?}");
    }
}

#[test]
fn base_urls_derive_from_region_and_preset() {
    let yaml = r#"
providers:
  - { name: b, kind: bedrock, region: eu-west-3 }
  - { name: v, kind: vertex, project: my-proj-1, region: eu }
  - { name: g, kind: openai_compatible, preset: groq }
"#;
    let raw: RawConfig = serde_saphyr::from_str(yaml).unwrap();
    let c = Config::try_from(raw).unwrap();
    let hosts: Vec<&str> = c.providers.iter().map(|p| p.authority.as_str()).collect();
    assert_eq!(hosts, ["bedrock-runtime.eu-west-3.amazonaws.com", "aiplatform.eu.rep.googleapis.com", "api.groq.com"]);
    assert_eq!(c.providers[2].base_url.path_prefix, "/openai");
}

#[test]
fn a_preset_provider_gets_no_field_it_refuses() {
    let yaml = r#"
providers:
  - { name: groq, kind: openai_compatible, preset: groq, api_key_env: G }
models:
  - { name: fast, targets: [{ provider: groq, model: llama-3.3-70b-versatile }] }
"#;
    let mut raw: RawConfig = serde_saphyr::from_str(yaml).unwrap();
    raw.resolve_api_keys(|var| Some(format!("k-{var}")));
    let c: &'static Config = Box::leak(Box::new(Config::try_from(raw).unwrap()));
    let body = br#"{"model":"fast","logprobs":true,"logit_bias":{"1":2},"messages":[{"role":"user","content":"hi"}]}"#;
    let d = route(c, Caller::Open, Api::ChatCompletions, "/v1/chat/completions", body, 0).unwrap();
    assert_eq!((d.authority, d.path.as_str()), ("api.groq.com", "/openai/v1/chat/completions"));
    let sent = json(&d);
    assert_eq!(sent["model"], "llama-3.3-70b-versatile");
    assert!(sent.get("logprobs").is_none() && sent.get("logit_bias").is_none(), "{sent}");
}

#[test]
fn bedrock_signs_with_keys_or_sends_its_api_key_as_a_bearer() {
    let yaml = r#"
providers:
  - { name: signed, kind: bedrock, region: us-east-1, credentials: { source: aws_env } }
  - { name: bearer, kind: bedrock, region: us-west-2, api_key_env: BR }
  - { name: waiting, kind: bedrock, region: us-east-1, credentials: { source: aws_env } }
models:
  - { name: s, targets: [{ provider: signed, model: "us.anthropic.claude-3-5-haiku-20241022-v1:0" }] }
  - { name: b, targets: [{ provider: bearer, model: "arn:aws:bedrock:us-west-2:1:application-inference-profile/abc" }] }
  - { name: w, targets: [{ provider: waiting, model: m }] }
  - { name: l, targets: [{ provider: signed, model: "meta.llama3-1-70b-instruct-v1:0" }] }
"#;
    let mut raw: RawConfig = serde_saphyr::from_str(yaml).unwrap();
    raw.resolve_api_keys(|var| Some(format!("k-{var}")));
    raw.providers[0].aws_keys = Some(Box::new(crate::config::cloud::RawAwsKeys {
        access_key_id: "AKID".into(),
        secret_access_key: "SECRET".into(),
        session_token: None,
        expires_at: None,
    }));
    let c: &'static Config = Box::leak(Box::new(Config::try_from(raw).unwrap()));
    let chat = |model: &str| {
        let body = format!(r#"{{"model":"{model}","messages":[{{"role":"user","content":"hi"}}]}}"#);
        route(c, Caller::Open, Api::ChatCompletions, "/v1/chat/completions", body.as_bytes(), 0)
    };
    // Anthropic models take Messages through InvokeModel, the others Converse.
    let d = chat("s").unwrap();
    assert_eq!(d.path, "/model/us.anthropic.claude-3-5-haiku-20241022-v1%3A0/invoke");
    let sent: serde_json::Value = serde_json::from_slice(d.body.as_deref().unwrap()).unwrap();
    assert_eq!(sent["anthropic_version"], "bedrock-2023-05-31");
    assert!(sent.get("model").is_none() && sent.get("stream").is_none(), "{sent}");
    assert_eq!(d.translation.map(|(p, _)| p.outbound), Some(crate::translate::Outbound::Anthropic));
    assert_eq!(chat("l").unwrap().path, "/model/meta.llama3-1-70b-instruct-v1%3A0/converse");
    assert_eq!(d.authority, "bedrock-runtime.us-east-1.amazonaws.com");
    assert_eq!(d.aws.map(|(region, keys)| (region, keys.access_key_id.as_str())), Some(("us-east-1", "AKID")));
    assert!(d.credential.is_none());
    let d = chat("b").unwrap();
    assert_eq!(d.path, "/model/arn%3Aaws%3Abedrock%3Aus-west-2%3A1%3Aapplication-inference-profile%2Fabc/converse");
    assert!(d.aws.is_none());
    assert_eq!(d.credential.map(|c| c.value.as_str()), Some("Bearer k-BR"));
    let e = chat("w").unwrap_err();
    assert_eq!(e.status, 503);
    assert!(e.message.contains("no credentials for provider 'waiting'"), "{}", e.message);
    // Messages clients reach Claude as they wrote the request; streams take the stream path.
    let body = br#"{"model":"s","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let d = route(c, Caller::Open, Api::Messages, "/v1/messages", body, 0).unwrap();
    assert_eq!(d.path, "/model/us.anthropic.claude-3-5-haiku-20241022-v1%3A0/invoke-with-response-stream");
    assert!(d.translation.is_none() && d.aws.is_some());
    let sent: serde_json::Value = serde_json::from_slice(d.body.as_deref().unwrap()).unwrap();
    assert_eq!(
        sent,
        serde_json::json!({"max_tokens": 5, "messages": [{"role": "user", "content": "hi"}],
        "anthropic_version": "bedrock-2023-05-31"})
    );
    let count = br#"{"model":"s","messages":[{"role":"user","content":"hi"}]}"#;
    let e = route(c, Caller::Open, Api::CountTokens, "/v1/messages/count_tokens", count, 0).unwrap_err();
    assert!(e.message.contains("bedrock"), "{}", e.message);
    // Bedrock takes no other client dialect as it is: embeddings are refused with the reason.
    let e = route(c, Caller::Open, Api::Embeddings, "/v1/embeddings", br#"{"model":"s","input":"x"}"#, 0).unwrap_err();
    assert!(e.message.contains("bedrock"), "{}", e.message);
}

#[test]
fn bedrock_and_vertex_without_a_key_sign_in_by_default() {
    let yaml = r#"
providers:
  - { name: b, kind: bedrock, region: us-east-1 }
  - { name: v, kind: vertex, project: my-proj-1, region: us-east5, credentials_file_env: SA_FILE }
  - { name: k, kind: vertex, project: my-proj-1, region: us-east5, api_key_env: K }
  - { name: x, kind: vertex, project: my-proj-1, region: us-east5, credentials_file_env: "9", credentials: { source: gcp_metadata } }
  - { name: o, kind: openai, base_url: "https://x", credentials_file_env: SA }
"#;
    let raw: RawConfig = serde_saphyr::from_str(yaml).unwrap();
    let signs_in: Vec<bool> = raw.providers.iter().map(crate::config::cloud::signs_in).collect();
    assert_eq!(signs_in, [true, true, false, true, false]);
    let err = Config::try_from(raw).unwrap_err();
    let paths: Vec<&str> = err.problems.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(
        paths,
        ["providers[3].credentials_file_env", "providers[3].credentials_file_env", "providers[4].credentials_file_env"]
    );
}
