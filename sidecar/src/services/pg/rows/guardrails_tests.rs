//! Guardrail policies in the Postgres store: a policy and the models, groups and keys naming it
//! round-trip, a bad rule is refused with its path, and a policy something names cannot be
//! deleted from under it (nor a provider a moderation rule asks).

use ferrogate_core::config::guardrails::{RawGuardRule, RawGuardrail};
use ferrogate_core::config::{RawConfig, RawGroup, RawKey, RawModel, RawProvider, RawTarget};

use crate::services::pg::tests::{admin_over, call, Schema};
use crate::services::pg::{Change, PgStore, Resource, Section, StoreError};

fn rule(detector: &str, action: &str) -> RawGuardRule {
    RawGuardRule { detector: Some(detector.into()), action: Some(action.into()), ..RawGuardRule::default() }
}

/// A policy with detector rules both ways, a webhook and a moderation check of `provider`.
fn pii(provider: &str) -> RawGuardrail {
    RawGuardrail {
        name: "pii".into(),
        input: vec![
            rule("email", "redact"),
            RawGuardRule {
                name: Some("codename".into()),
                words: vec!["bluebird".into(), "project x".into()],
                ..rule("keywords", "block")
            },
            RawGuardRule { name: Some("ticket".into()), pattern: Some("TCK-[0-9]{6}".into()), ..rule("regex", "log") },
            RawGuardRule {
                kind: Some("webhook".into()),
                name: Some("dlp".into()),
                url: Some("http://127.0.0.1:8080/check".into()),
                timeout_ms: Some(300),
                fail: Some("closed".into()),
                ..RawGuardRule::default()
            },
            RawGuardRule {
                kind: Some("moderation".into()),
                name: Some("mod".into()),
                provider: Some(provider.into()),
                model: Some("omni-moderation-latest".into()),
                fail: Some("open".into()),
                ..RawGuardRule::default()
            },
        ],
        output: vec![rule("secret", "redact")],
        max_prompt_chars: Some(200_000),
        restore: Some(true),
    }
}

fn provider(name: &str) -> RawProvider {
    RawProvider {
        name: name.into(),
        kind: "openai_compatible".into(),
        base_url: "http://127.0.0.1:8000".into(),
        ..RawProvider::default()
    }
}

fn model(guardrails: &[&str]) -> RawModel {
    RawModel {
        name: "chat".into(),
        targets: vec![RawTarget { provider: "local".into(), model: "m".into(), weight: None }],
        guardrails: guardrails.iter().map(|g| g.to_string()).collect(),
        ..RawModel::default()
    }
}

fn group(guardrails: &[&str]) -> RawGroup {
    RawGroup {
        name: "contractors".into(),
        models: vec!["*".into()],
        guardrails: guardrails.iter().map(|g| g.to_string()).collect(),
        ..RawGroup::default()
    }
}

fn key(guardrails: &[&str]) -> RawKey {
    RawKey {
        name: "ci".into(),
        digest: format!("sha256:{}", "e".repeat(64)),
        groups: vec!["contractors".into()],
        guardrails: guardrails.iter().map(|g| g.to_string()).collect(),
        ..RawKey::default()
    }
}

fn create(resource: Resource) -> Change {
    Change::Create(resource)
}

/// `store` holding provider `local`, policy `pii` and a model, a group and a key naming it.
async fn named_everywhere(store: &PgStore) {
    for change in [
        create(Resource::Provider(provider("local"))),
        create(Resource::Guardrail(pii("local"))),
        create(Resource::Model(model(&["pii"]))),
        create(Resource::Group(group(&["pii"]))),
        create(Resource::Key(key(&["pii"]))),
    ] {
        store.write(change).await.unwrap();
    }
}

#[tokio::test]
async fn a_policy_and_the_models_groups_and_keys_naming_it_round_trip() {
    let schema = Schema::new().await;
    let store = PgStore::connect(&schema.url, None).await.unwrap();
    named_everywhere(&store).await;
    let (_, raw) = store.load().await.unwrap();
    assert_eq!(raw.guardrails, [pii("local")]);
    assert_eq!(raw.models, [model(&["pii"])]);
    assert_eq!(raw.groups, [group(&["pii"])]);
    assert_eq!(raw.keys, [key(&["pii"])]);
    // The rows build into a configuration that applies the policy to all three.
    let built = ferrogate_core::snapshot::build(raw).unwrap();
    assert!(built.problems.is_empty(), "{:?}", built.problems);
    assert_eq!(built.config.guardrails.for_request(Some(0), Some(0), &[0]), [0]);
    // At rest: the policy without its name, which is the row's key.
    let db = store.pool.get().await.unwrap();
    let spec: serde_json::Value = db.query_one("SELECT spec FROM fg_guardrails", &[]).await.unwrap().get(0);
    assert!(spec.get("name").is_none() && spec["input"][1]["words"][1] == "project x", "{spec}");
    // Listed in the config file's shape.
    let listed = store.list(Section::Guardrails).await.unwrap();
    assert_eq!(listed, serde_json::to_value([pii("local")]).unwrap());
    // Replacing the lists empties them.
    store.write(Change::Replace(Resource::Key(key(&[])))).await.unwrap();
    assert!(store.load().await.unwrap().1.keys[0].guardrails.is_empty());
}

#[tokio::test]
async fn a_file_s_policies_seed_a_new_database() {
    let schema = Schema::new().await;
    let store = PgStore::connect(&schema.url, None).await.unwrap();
    let raw: RawConfig = serde_saphyr::from_str(
        r#"
providers: [{ name: local, kind: openai_compatible, base_url: "http://127.0.0.1:8000" }]
models: [{ name: chat, targets: [{ provider: local, model: m }], guardrails: [pii, strict] }]
groups: [{ name: dev, models: ["chat"], guardrails: [strict] }]
keys: [{ name: ci, digest: "sha256:eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee", groups: [dev], guardrails: [pii] }]
guardrails:
  - name: strict
    input: [{ detector: card, action: block }]
  - name: pii
    restore: true
    input: [{ detector: email, action: redact }]
"#,
    )
    .unwrap();
    assert!(store.seed(&raw).await.unwrap());
    let (_, loaded) = store.load().await.unwrap();
    // Rows come back ordered by name.
    let names: Vec<&str> = loaded.guardrails.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(names, ["pii", "strict"]);
    let mut by_name = raw.clone();
    by_name.guardrails.sort_by(|a, b| a.name.cmp(&b.name));
    assert_eq!(loaded, by_name, "rows round-trip to the same document");
}

#[tokio::test]
async fn a_bad_rule_or_an_unknown_policy_is_refused_with_its_path() {
    let schema = Schema::new().await;
    let store = PgStore::connect(&schema.url, None).await.unwrap();
    named_everywhere(&store).await;
    let version = store.version().await.unwrap();
    let refused = |result: Result<i64, StoreError>| match result {
        Err(StoreError::Invalid(problems)) => problems.iter().map(|p| p.path.clone()).collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    let mut typo = pii("local");
    typo.input[0].detector = Some("emial".into());
    assert_eq!(
        refused(store.write(Change::Replace(Resource::Guardrail(typo))).await),
        ["guardrails[0].input[0].detector"]
    );
    let unknown = RawGuardrail { name: "other".into(), output: vec![rule("ssn", "shred")], ..RawGuardrail::default() };
    assert_eq!(refused(store.write(create(Resource::Guardrail(unknown))).await), ["guardrails[0].output[0].action"]);
    let mut stray = model(&["pii", "nowhere"]);
    stray.name = "other".into();
    assert_eq!(refused(store.write(create(Resource::Model(stray))).await), ["models[1].guardrails[1]"]);
    assert_eq!(
        refused(store.write(Change::Replace(Resource::Key(key(&["nowhere"])))).await),
        ["keys[0].guardrails[0]"]
    );
    assert_eq!(store.version().await.unwrap(), version, "refused writes leave no trace");
    assert_eq!(store.load().await.unwrap().1.guardrails, [pii("local")]);
}

#[tokio::test]
async fn a_policy_something_names_cannot_be_deleted_nor_the_provider_a_rule_asks() {
    let schema = Schema::new().await;
    let store = PgStore::connect(&schema.url, None).await.unwrap();
    named_everywhere(&store).await;
    let version = store.version().await.unwrap();
    let conflict = |result: Result<i64, StoreError>| match result {
        Err(StoreError::Conflict(msg)) => msg,
        other => panic!("{other:?}"),
    };
    let msg = conflict(store.write(Change::Delete(Section::Guardrails, "pii".into())).await);
    assert!(
        msg.ends_with("guardrails/pii would stop being servable: models/chat, groups/contractors, keys/ci"),
        "{msg}"
    );
    // The moderation rule asks provider `moderator`: it stays while the policy names it.
    store.write(create(Resource::Provider(provider("moderator")))).await.unwrap();
    store.write(Change::Replace(Resource::Guardrail(pii("moderator")))).await.unwrap();
    let msg = conflict(store.write(Change::Delete(Section::Providers, "moderator".into())).await);
    assert!(
        msg.contains("providers/moderator would make the configuration invalid: guardrails[0].input[4].provider"),
        "{msg}"
    );
    assert_eq!(store.version().await.unwrap(), version + 2, "refused writes leave no trace");
    // Once nothing names it, the policy goes; then the provider.
    store.write(Change::Replace(Resource::Model(model(&[])))).await.unwrap();
    store.write(Change::Replace(Resource::Group(group(&[])))).await.unwrap();
    store.write(Change::Replace(Resource::Key(key(&[])))).await.unwrap();
    store.write(Change::Delete(Section::Guardrails, "pii".into())).await.unwrap();
    store.write(Change::Delete(Section::Providers, "moderator".into())).await.unwrap();
    assert!(matches!(
        store.write(Change::Delete(Section::Guardrails, "pii".into())).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(store.load().await.unwrap().1.guardrails.is_empty());
}

#[tokio::test]
async fn the_admin_api_manages_policies_and_the_lists_naming_them() {
    use serde_json::json;
    let schema = Schema::new().await;
    let (app, _) = admin_over(std::sync::Arc::new(PgStore::connect(&schema.url, None).await.unwrap()));
    let provider = json!({"name": "local", "kind": "openai_compatible", "base_url": "http://127.0.0.1:8000"});
    assert_eq!(call(&app, "POST", "/api/v1/providers", provider).await.0, 200);
    let policy = json!({"name": "pii", "restore": true, "input": [{"detector": "email", "action": "redact"}]});
    assert_eq!(call(&app, "POST", "/api/v1/guardrails", policy.clone()).await.0, 200);
    assert_eq!(call(&app, "POST", "/api/v1/guardrails", policy.clone()).await.0, 409, "the name exists");
    let model = json!({"name": "chat", "targets": [{"provider": "local", "model": "m"}], "guardrails": ["pii"]});
    assert_eq!(call(&app, "PUT", "/api/v1/models/chat", model).await.0, 200);
    let group = json!({"name": "dev", "models": ["chat"], "guardrails": ["pii"]});
    assert_eq!(call(&app, "POST", "/api/v1/groups", group).await.0, 200);
    let key = json!({"name": "bob", "groups": ["dev"], "guardrails": ["pii"]});
    let (status, generated) = call(&app, "POST", "/api/v1/keys", key).await;
    assert!(status == 200 && generated["key"].as_str().is_some_and(|k| k.starts_with("fg-")), "{generated}");
    // Read back: the list, one policy, and the lists naming it.
    assert_eq!(call(&app, "GET", "/api/v1/guardrails", json!(null)).await, (200, json!([policy])));
    assert_eq!(call(&app, "GET", "/api/v1/guardrails/pii", json!(null)).await, (200, policy.clone()));
    assert_eq!(call(&app, "GET", "/api/v1/guardrails/nope", json!(null)).await.0, 404);
    for (section, name) in [("models", "chat"), ("groups", "dev"), ("keys", "bob")] {
        let (status, row) = call(&app, "GET", &format!("/api/v1/{section}/{name}"), json!(null)).await;
        assert_eq!((status, &row["guardrails"]), (200, &json!(["pii"])), "{section}: {row}");
    }
    // Refused with the path: an unknown detector, an unknown field, an unknown policy.
    let typo = json!({"name": "pii", "input": [{"detector": "emial", "action": "redact"}]});
    let (status, refused) = call(&app, "PUT", "/api/v1/guardrails/pii", typo).await;
    assert_eq!(
        (status, &refused["problems"][0]["path"]),
        (400, &json!("guardrails[0].input[0].detector")),
        "{refused}"
    );
    let (status, refused) = call(&app, "POST", "/api/v1/guardrails", json!({"name": "x", "inptu": []})).await;
    assert!(status == 400 && refused["error"].as_str().is_some_and(|e| e.contains("inptu")), "{refused}");
    let stray = json!({"name": "eve", "digest": format!("sha256:{}", "a".repeat(64)), "guardrails": ["nope"]});
    let (status, refused) = call(&app, "POST", "/api/v1/keys", stray).await;
    assert_eq!((status, &refused["problems"][0]["path"]), (400, &json!("keys[1].guardrails[0]")), "{refused}");
    // Named: 409 until nothing names it.
    let (status, refused) = call(&app, "DELETE", "/api/v1/guardrails/pii", json!(null)).await;
    assert!(status == 409 && refused["error"].as_str().is_some_and(|e| e.contains("models/chat")), "{refused}");
    for (section, name) in [("keys", "bob"), ("groups", "dev"), ("models", "chat")] {
        assert_eq!(call(&app, "DELETE", &format!("/api/v1/{section}/{name}"), json!(null)).await.0, 200);
    }
    assert_eq!(call(&app, "DELETE", "/api/v1/guardrails/pii", json!(null)).await.0, 200);
    assert_eq!(call(&app, "GET", "/api/v1/guardrails", json!(null)).await, (200, json!([])));
}
