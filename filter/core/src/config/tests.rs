//! Config tests: the fixtures in `testdata/config/`, every invalid case with its path, unknown
//! keys, indexes and model resolution.

use super::*;

fn fixture(name: &str) -> String {
    let path = format!("{}/../../testdata/config/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn load_yaml(yaml: &str) -> Result<Config, ConfigError> {
    let raw: RawConfig = serde_saphyr::from_str(yaml).expect("yaml shape");
    Config::try_from(raw)
}

/// The problems of an invalid document, as `path: message` strings.
fn problems(yaml: &str) -> Vec<String> {
    load_yaml(yaml).expect_err("should be invalid").problems.iter().map(Problem::to_string).collect()
}

fn problem_paths(yaml: &str) -> Vec<String> {
    load_yaml(yaml).expect_err("should be invalid").problems.into_iter().map(|p| p.path).collect()
}

#[test]
fn parse_quickstart() {
    let c = load_yaml(&fixture("quickstart.yaml")).unwrap();
    let p = &c.providers[0];
    assert_eq!(
        (p.name.as_str(), p.kind, p.authority.as_str()),
        ("local", ProviderKind::OpenAiCompatible, "127.0.0.1:8000")
    );
    assert_eq!(c.models[0].strategy, Strategy::RoundRobin);
    assert_eq!(c.models[0].targets, [Target { provider: 0, model: "sim-small".into(), weight: 1 }]);
    assert_eq!(c.resolve("default"), Some(Resolved::Model(0)));
    assert_eq!(c.store, Store::File);
}

#[test]
fn parse_minimal() {
    let c = load_yaml(&fixture("minimal.yaml")).unwrap();
    let p = &c.providers[0];
    assert_eq!((p.base_url.scheme, p.base_url.port, p.authority.as_str()), (Scheme::Https, 443, "api.openai.com"));
    assert_eq!(p.api_key_env.as_deref(), Some("OPENAI_API_KEY"));
    assert!(p.credential.is_none(), "no key until resolve_api_keys");
}

#[test]
fn parse_full() {
    let c = load_yaml(&fixture("full.yaml")).unwrap();
    assert_eq!(c.providers.len(), 6);
    let pool = &c.providers[c.provider_index("vllm-pool").unwrap()];
    assert_eq!(pool.endpoints, ["10.0.0.11:8000", "10.0.0.12:8000", "[fd00::13]:8000"]);
    assert_eq!(pool.base_url.path_prefix, "");
    assert_eq!(c.providers[5].base_url.path_prefix, "/openai");
    assert_eq!(c.providers[5].authority, "llm.corp.example:8443");
    let chat = &c.models[0];
    assert_eq!((chat.strategy, chat.targets[0].weight, chat.targets[1].weight), (Strategy::Weighted, 3, 1));
    assert_eq!(chat.fallbacks, [1]);
    assert_eq!(c.models[1].strategy, Strategy::Priority);
    assert_eq!(c.models[3].strategy, Strategy::LeastLoaded);
    assert_eq!(c.aliases.get("smart"), Some(&2));
    assert_eq!(c.keys[1].groups, [0, 1]);
    let names: Vec<&str> = c.keys[1].groups.iter().map(|&g| c.groups[g].name.as_str()).collect();
    assert_eq!(c.keys[1].group_names, names);
    assert_eq!(c.keys[1].expires_at, Some(1_893_456_000));
    assert_eq!(c.keys[0].limits.cost_usd_per_month, Some(50.0));
    assert_eq!(c.keys[0].limits.overrun, crate::limits::cut::Overrun::Cut);
    assert_eq!(c.keys[0].limits.tokens_per_conversation, Some(400_000));
    assert_eq!(c.keys[0].limits.cost_usd_per_conversation, Some(2.5));
    assert_eq!(c.keys[0].limits.max_wait_ms, 250, "the default");
    assert_eq!(c.groups[1].limits.tokens_per_day, Some(5_000_000));
    assert_eq!(c.pricing["gpt-4o-mini"].cached_input_per_mtok, 0.075);
    assert_eq!(c.pricing["sim-small"].cached_input_per_mtok, 0.1, "defaults to the input price");
    assert_eq!(c.redis_url_env.as_deref(), Some("FERROGATE_REDIS_URL"));
    let names: Vec<&str> = c.public_names().collect();
    assert_eq!(names, ["chat", "gpt", "claude", "gemini-flash", "embed", "default", "smart"]);
}

#[test]
fn json_and_yaml_agree() {
    let raw: RawConfig = serde_saphyr::from_str(&fixture("full.yaml")).unwrap();
    let json = serde_json::to_vec(&raw).unwrap();
    assert_eq!(Config::from_json_slice(&json).unwrap(), Config::try_from(raw).unwrap());
}

#[test]
fn resolve_forms() {
    let c = load_yaml(&fixture("full.yaml")).unwrap();
    assert_eq!(c.resolve("chat"), Some(Resolved::Model(0)));
    assert_eq!(c.resolve("default"), Some(Resolved::Model(0)));
    assert_eq!(c.resolve("openai/gpt-4o"), Some(Resolved::Pinned { provider: 2, model: "gpt-4o" }));
    // Only the first '/' separates the provider; the rest is the upstream id.
    assert_eq!(
        c.resolve("vllm-pool/meta-llama/Llama-3.1-8B-Instruct"),
        Some(Resolved::Pinned { provider: 1, model: "meta-llama/Llama-3.1-8B-Instruct" })
    );
    assert_eq!(c.resolve("nope/x"), None);
    assert_eq!(c.resolve("openai/"), None);
    assert_eq!(c.resolve("gpt-5"), None);
}

#[test]
fn resolve_api_keys_fills_credentials() {
    let mut raw: RawConfig = serde_saphyr::from_str(&fixture("full.yaml")).unwrap();
    raw.providers[3].api_key = Some("kept".into());
    raw.resolve_api_keys(|var| (var != "GEMINI_API_KEY").then(|| format!("val-{var}")));
    let c = Config::try_from(raw).unwrap();
    let cred = |i: usize| c.providers[i].credential.clone().map(|k| (k.name, k.value));
    assert_eq!(cred(0), Some(("authorization", "Bearer val-LOCAL_KEY".into())));
    assert_eq!(cred(1), None, "no api_key_env");
    assert_eq!(cred(2), Some(("authorization", "Bearer val-OPENAI_API_KEY".into())));
    assert_eq!(cred(3), Some(("x-api-key", "kept".into())));
    assert_eq!(cred(4), None, "variable not set");
    assert!(!format!("{c:?}").contains("val-OPENAI"), "Debug must redact keys");
}

#[test]
fn rejects_bad_api_key_without_echoing_it() {
    let yaml = "providers: [{name: a, kind: openai, base_url: 'http://h', api_key: \"sec\\nret\"}]";
    let p = problems(yaml);
    assert_eq!(p.len(), 1);
    assert!(p[0].starts_with("providers[0].api_key: "), "{p:?}");
    assert!(!p[0].contains("sec"));
}

#[test]
fn invalid_fixture_reports_every_problem() {
    let paths = problem_paths(&fixture("invalid-references.yaml"));
    let expected = [
        "providers[2].name",
        "models[1].name",
        "providers[0].name",
        "providers[1].kind",
        "providers[1].base_url",
        "providers[2].endpoints[0]",
        "models[0].targets[0].provider",
        "models[0].strategy",
        "models[0].fallbacks[0]",
        "models[1].targets",
        "aliases.default",
        "keys[0].digest",
        "keys[0].groups[0]",
    ];
    assert_eq!(paths, expected);
}

#[test]
fn problem_messages_name_the_culprit() {
    let yaml = "providers: [{name: a, kind: openai, base_url: 'http://h'}]\nmodels:\n  - {name: m, targets: [{provider: a, model: x}]}\n  - {name: n, targets: [{provider: x, model: y}]}";
    assert_eq!(problems(yaml), [r#"models[1].targets[0].provider: unknown provider "x""#]);
}

#[test]
fn rejects_each_invalid_value() {
    let base = "providers: [{name: a, kind: openai, base_url: 'http://h'}]\n";
    let cases = [
        ("models: [{name: m, targets: [{provider: a, model: x, weight: 0}]}]", "models[0].targets[0].weight"),
        ("models: [{name: m, targets: [{provider: a, model: ''}]}]", "models[0].targets[0].model"),
        ("models: [{name: 'a/b', targets: [{provider: a, model: x}]}]", "models[0].name"),
        ("models: [{name: m, targets: [{provider: a, model: x}], fallbacks: [m]}]", "models[0].fallbacks[0]"),
        ("models: [{name: m, targets: [{provider: a, model: x}]}]\naliases: {m: m}", "aliases.m"),
        ("groups: [{name: g, models: ['b/*']}]", "groups[0].models[0]"),
        ("groups: [{name: g, models: ['ghost']}]", "groups[0].models[0]"),
        ("groups: [{name: g}, {name: g}]", "groups[1].name"),
        ("groups: [{name: g, limits: {cost_usd_per_day: -1}}]", "groups[0].limits.cost_usd_per_day"),
        ("groups: [{name: g, limits: {requests_per_day: 1, max_wait_ms: 10001}}]", "groups[0].limits.max_wait_ms"),
        ("keys: [{name: k, digest: 'sha256:00', groups: []}]", "keys[0].digest"),
        ("keys: [{name: k, digest: 'sha256:00', expires_at: tomorrow}]", "keys[0].expires_at"),
        ("pricing: {m: {input_per_mtok: -0.1, output_per_mtok: 1}}", "pricing.m.input_per_mtok"),
        ("store: {kind: postgres}", "store.url_env"),
        ("store: {kind: file, url_env: X}", "store.url_env"),
        ("store: {kind: sqlite}", "store.kind"),
        ("redis: {url_env: 'not a var'}", "redis.url_env"),
        ("models: [{name: m, targets: [{provider: a, model: x}], flow_control: {}}]", "models[0].flow_control"),
        (
            "models: [{name: m, targets: [{provider: a, model: x}], flow_control: {max_waiting: 1, max_queue: 0}}]",
            "models[0].flow_control.max_queue",
        ),
        (
            "models: [{name: m, targets: [{provider: a, model: x}], flow_control: {max_kv_usage: 1.5}}]",
            "models[0].flow_control.max_kv_usage",
        ),
        (
            "models: [{name: m, targets: [{provider: a, model: x}], flow_control: {max_waiting: 2, bands: [{priority: 1}, {priority: 1}]}}]",
            "models[0].flow_control.bands[1].priority",
        ),
        (
            "models: [{name: m, targets: [{provider: a, model: x}], flow_control: {max_waiting: 2, queue_ttl_ms: 0}}]",
            "models[0].flow_control.queue_ttl_ms",
        ),
    ];
    for (yaml, path) in cases {
        let paths = problem_paths(&format!("{base}{yaml}"));
        assert!(paths.iter().any(|p| p == path), "{yaml}: expected {path}, got {paths:?}");
    }
    let paths = problem_paths("providers: [{name: a, kind: openai, base_url: 'http://h', max_concurrency: 0}]");
    assert_eq!(paths, ["providers[0].max_concurrency"]);
    let paths = problem_paths(
        "providers: [{name: a, kind: openai, base_url: 'http://h', api_key_env: '9X', endpoints: ['h:1', 'H:1']}]",
    );
    assert_eq!(paths, ["providers[0].endpoints[1]", "providers[0].api_key_env"]);
    let dns =
        "providers: [{name: a, kind: openai_compatible, base_url: 'http://h', endpoints_dns: 'pool.ns.svc:8000'}]";
    let c = load_yaml(dns).unwrap();
    assert!(c.providers[0].endpoints.is_empty(), "filled by the sidecar, not by the filter");
    let paths = problem_paths(
        "providers: [{name: a, kind: openai_compatible, base_url: 'http://h', endpoints_dns: 'pool.ns.svc'},\n\
         {name: b, kind: openai_compatible, base_url: 'http://h', endpoints_dns: 'p:1', endpoints: ['h:1']}]",
    );
    assert_eq!(paths, ["providers[0].endpoints_dns", "providers[1].endpoints_dns"]);
    let pool = "providers: [{name: a, kind: openai_compatible, base_url: 'http://h', \
                endpoints_inference_pool: 'llm/vllm-pool', kv_events_port: 5557, lmcache: {pull: 'tcp://0.0.0.0:8300', instances: {i0: '10.0.0.1:8000'}}}]";
    let c = load_yaml(pool).unwrap();
    assert!(c.providers[0].endpoints.is_empty(), "a pool's pods are filled in by the sidecar");
    let paths = problem_paths(
        "providers: [{name: a, kind: openai_compatible, base_url: 'http://h', endpoints_inference_pool: 'Pool'},\n\
         {name: b, kind: openai_compatible, base_url: 'http://h', endpoints_inference_pool: 'p', endpoints_dns: 'p:1'},\n\
         {name: c, kind: openai_compatible, base_url: 'http://h', endpoints_inference_pool: 'p', endpoints: ['h:1']},\n\
         {name: d, kind: openai_compatible, base_url: 'http://h', endpoints_inference_pool: 'a/b/c'}]",
    );
    let want = ["providers[0].endpoints_inference_pool", "providers[1].endpoints_inference_pool"];
    assert_eq!(
        paths,
        [&want[..], &["providers[2].endpoints_inference_pool", "providers[3].endpoints_inference_pool"]].concat()
    );
}

#[test]
fn flow_control_and_priorities_are_read() {
    let d = |c: char| format!("sha256:{}", c.to_string().repeat(64));
    let yaml = format!(
        "providers: [{{name: a, kind: openai_compatible, base_url: 'http://h', max_concurrency: 4}}]\n\
         models: [{{name: m, targets: [{{provider: a, model: x}}], flow_control: {{queue_ttl_ms: 500, bands: [{{priority: 9, max_queue: 3}}]}}}}]\n\
         groups: [{{name: lo, priority: -1}}, {{name: hi, priority: 7}}]\n\
         keys: [{{name: k1, digest: '{}', groups: [lo, hi]}}, {{name: k2, digest: '{}', groups: [hi], priority: 2}}, {{name: k3, digest: '{}'}}]",
        d('a'),
        d('b'),
        d('c')
    );
    let c = Config::try_from(serde_saphyr::from_str::<RawConfig>(&yaml).unwrap()).unwrap();
    assert_eq!(c.providers[0].max_concurrency, Some(4));
    let fc = c.models[0].flow.as_ref().unwrap();
    assert_eq!((fc.max_queue, fc.ttl_ms), (crate::flow::DEFAULT_MAX_QUEUE, 500));
    assert_eq!((fc.band(9), fc.band(0)), ((3, 500), (crate::flow::DEFAULT_MAX_QUEUE, 500)));
    let priorities: Vec<i32> = c.keys.iter().map(|k| k.priority).collect();
    assert_eq!(priorities, [7, 2, 0], "the highest group's, the key's own, the default");
}

#[test]
fn duplicate_key_names_and_digests() {
    let d = format!("sha256:{}", "a".repeat(64));
    let yaml = format!("keys: [{{name: k, digest: '{d}'}}, {{name: k, digest: '{d}'}}]");
    assert_eq!(problem_paths(&yaml), ["keys[1].name", "keys[1].digest"]);
}

#[test]
fn key_and_group_names_must_be_slugs() {
    let d = |n: u8| format!("sha256:{}", char::from(b'a' + n).to_string().repeat(64));
    let yaml = format!(
        "groups: [{{name: team-a}}, {{name: 'Team A'}}]\n\
         keys: [{{name: k1, digest: '{}', groups: [team-a]}}, {{name: 'a/b', digest: '{}'}}, {{name: '..', digest: '{}'}}]",
        d(0),
        d(1),
        d(2)
    );
    assert_eq!(
        problems(&yaml),
        [
            r#"groups[1].name: "Team A" is not a slug (^[a-z0-9][a-z0-9-]{0,62}$)"#,
            r#"keys[1].name: "a/b" is not a slug (^[a-z0-9][a-z0-9-]{0,62}$)"#,
            r#"keys[2].name: ".." is not a slug (^[a-z0-9][a-z0-9-]{0,62}$)"#,
        ]
    );
    // Slug names and the references to them are fine.
    let yaml = format!("groups: [{{name: team-a}}]\nkeys: [{{name: k1, digest: '{}', groups: [team-a]}}]", d(0));
    let c = load_yaml(&yaml).unwrap();
    assert_eq!(
        (c.keys[0].groups.as_slice(), c.keys[0].group_names.as_slice()),
        (&[0][..], &["team-a".to_string()][..])
    );
}

#[test]
fn model_and_alias_names_are_path_segments() {
    let base = "providers: [{name: a, kind: openai, base_url: 'http://h'}]\n";
    for (name, ok) in [("llama3:8b", true), ("claude-3.5-sonnet", true), ("..", false), ("a?b", false), ("a%20", false)]
    {
        let model = format!("{base}models: [{{name: '{name}', targets: [{{provider: a, model: x}}]}}]");
        assert_eq!(load_yaml(&model).is_ok(), ok, "model {name}");
        let alias =
            format!("{base}models: [{{name: m, targets: [{{provider: a, model: x}}]}}]\naliases: {{'{name}': m}}");
        assert_eq!(load_yaml(&alias).is_ok(), ok, "alias {name}");
    }
    let long = format!("{base}models: [{{name: {}, targets: [{{provider: a, model: x}}]}}]", "m".repeat(129));
    assert_eq!(problem_paths(&long), ["models[0].name"]);
}

#[test]
fn unknown_keys_are_rejected_by_name() {
    let cases = [
        ("provider: []", "provider"),
        ("providers: [{name: a, kind: openai, base_url: 'http://h', apikey: x}]", "apikey"),
        ("models: [{name: m, targets: [{provider: a, model: x, wieght: 1}]}]", "wieght"),
        ("keys: [{name: k, digest: d, limits: {rpm: 1}}]", "rpm"),
        ("pricing: {m: {input: 1, input_per_mtok: 1, output_per_mtok: 1}}", "input"),
        ("store: {kind: file, path: x}", "path"),
        ("responses: {ttl: 5}", "ttl"),
    ];
    for (yaml, key) in cases {
        let err = serde_saphyr::from_str::<RawConfig>(yaml).expect_err(yaml).to_string();
        assert!(err.contains(&format!("unknown field `{key}`")), "{yaml}: {err}");
        let json = serde_json::to_string(&serde_saphyr::from_str::<serde_json::Value>(yaml).unwrap()).unwrap();
        let err = Config::from_json_slice(json.as_bytes()).expect_err(yaml).to_string();
        assert!(err.contains(&format!("unknown field `{key}`")), "{yaml}: {err}");
    }
}

#[test]
fn empty_document_is_a_valid_empty_config() {
    let c = Config::from_json_slice(b"{}").unwrap();
    assert!(c.providers.is_empty() && c.models.is_empty());
}

#[test]
fn responses_retention_is_read_and_checked() {
    let c = load_yaml("responses: {ttl_secs: 60, max_bytes_per_key: 1000, max_chain_depth: 3}").unwrap();
    let want = Responses {
        ttl_ms: 60_000,
        max_entries: responses::DEFAULT_MAX_ENTRIES,
        max_bytes_per_key: 1000,
        max_chain_depth: 3,
        by_group: false,
        max_conversation_items: responses::DEFAULT_MAX_CONVERSATION_ITEMS,
        max_conversations_per_key: responses::DEFAULT_MAX_CONVERSATIONS,
    };
    assert_eq!(c.responses, want);
    assert_eq!(load_yaml("{}").unwrap().responses, Responses::default());
    assert_eq!(Responses::default().ttl_ms, 24 * 3600 * 1000);
    let p = problems(
        "responses: {ttl_secs: 0, max_entries: 0, max_bytes_per_key: 0, max_chain_depth: 0, \
         max_conversation_items: 0, max_conversations_per_key: 0}",
    );
    assert_eq!(p.len(), 6, "{p:?}");
    assert!(p.iter().all(|p| p.ends_with("must be at least 1")), "{p:?}");
    assert_eq!(problem_paths("responses: {ttl_secs: 999999999999}"), ["responses.ttl_secs"]);
    assert_eq!(problem_paths("responses: {max_chain_depth: 10001}"), ["responses.max_chain_depth"]);
    assert!(load_yaml("responses: {visibility: group}").unwrap().responses.by_group);
    assert_eq!(problem_paths("responses: {visibility: team}"), ["responses.visibility"]);
    let raw: RawConfig = serde_saphyr::from_str("responses: {max_entries: 0}").unwrap();
    let err = responses::from_raw(raw.responses.as_ref()).unwrap_err();
    assert_eq!(err[0].path, "responses.max_entries");
}

#[test]
fn key_pools_resolve_skipping_unset_variables_and_keep_the_first_as_credential() {
    let yaml = "providers:\n  - {name: a, kind: anthropic, base_url: 'http://h', api_keys_env: [K1, UNSET, K2, K3], \
                key_cooldown_secs: 5}\n  - {name: b, kind: openai, base_url: 'http://h', api_key_env: K1}";
    let mut raw: RawConfig = serde_saphyr::from_str(yaml).unwrap();
    raw.resolve_api_keys(|var| match var {
        "K1" => Some("sk-one".into()),
        "K2" => Some("sk-two".into()),
        "K3" => Some("sk-one".into()),
        _ => None,
    });
    assert_eq!(raw.providers[0].api_keys, ["sk-one", "sk-two", "sk-one"]);
    let c = Config::try_from(raw.clone()).unwrap();
    let a = &c.providers[0];
    let values: Vec<&str> = a.keys.iter().map(|k| k.credential.value.as_str()).collect();
    assert_eq!(values, ["sk-one", "sk-two"], "unset skipped, a key held twice kept once");
    assert_eq!(a.keys[0].credential.name, "x-api-key");
    assert_eq!(a.credential.as_ref(), Some(&a.keys[0].credential), "credential: the first key");
    assert_eq!(a.keys[1].fingerprint, crate::keypool::fingerprint("sk-two"));
    assert_eq!((a.key_cooldown_ms, a.key_generation), (5_000, crate::keypool::generation(&a.keys)));
    let b = &c.providers[1];
    assert_eq!(b.keys.len(), 1, "a single key is a pool of one");
    assert_eq!(b.credential.as_ref().map(|c| c.value.as_str()), Some("Bearer sk-one"));
    assert_eq!(b.key_cooldown_ms, crate::keypool::DEFAULT_COOLDOWN_SECS * 1_000);
    assert!(!format!("{c:?}").contains("sk-two"), "Debug must redact pooled keys");
    // A snapshot's keys are kept as they are.
    raw.resolve_api_keys(|_| Some("other".into()));
    assert_eq!(raw.providers[0].api_keys, ["sk-one", "sk-two", "sk-one"]);
}

#[test]
fn key_pool_problems_have_their_paths_and_never_echo_a_key() {
    let at = |fields: &str| {
        problem_paths(&format!("providers: [{{name: a, kind: openai, base_url: 'http://h', {fields}}}]"))
    };
    assert_eq!(at("api_keys_env: [K1, '9X', K1]"), ["providers[0].api_keys_env[1]", "providers[0].api_keys_env[2]"]);
    assert_eq!(at("api_keys_env: [K1], api_key_env: K2"), ["providers[0].api_keys_env"]);
    assert_eq!(at("key_cooldown_secs: 0"), ["providers[0].key_cooldown_secs"]);
    assert_eq!(at("key_cooldown_secs: 86401"), ["providers[0].key_cooldown_secs"]);
    assert_eq!(at("api_key: sk-1, api_keys: [sk-2]"), ["providers[0].api_keys"]);
    let signs_in = "providers: [{name: b, kind: bedrock, region: us-east-1, credentials: {source: aws_web_identity}, \
                    api_keys_env: [K1]}]";
    assert_eq!(problem_paths(signs_in), ["providers[0].api_keys_env"], "the sidecar's tokens are its keys");
    let p = problems("providers: [{name: a, kind: openai, base_url: 'http://h', api_keys: [sk-good, \"sec ret\"]}]");
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(p[0].starts_with("providers[0].api_keys[1]: ") && !p[0].contains("sec"), "{p:?}");
    let dup = problems("providers: [{name: a, kind: openai, base_url: 'http://h', api_keys_env: [K1, K1]}]");
    assert_eq!(dup, [r#"providers[0].api_keys_env[1]: duplicate variable "K1""#]);
}
