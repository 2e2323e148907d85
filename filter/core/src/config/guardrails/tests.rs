use crate::config::Config;

fn load(extra: &str) -> Result<Config, String> {
    let doc = format!(
        r#"{{"providers":[{{"name":"oa","kind":"openai","base_url":"https://api.openai.com"}},
            {{"name":"an","kind":"anthropic","base_url":"https://api.anthropic.com"}}],
          "models":[{{"name":"m","targets":[{{"provider":"oa","model":"gpt"}}],"guardrails":["pii"]}}],
          "groups":[{{"name":"g","models":["*"],"guardrails":["words"]}}],
          {extra}}}"#
    );
    Config::from_json_slice(doc.as_bytes()).map_err(|e| e.to_string())
}

const POLICIES: &str = r#""guardrails":[
    {"name":"pii","restore":true,"max_prompt_chars":100,
     "input":[{"detector":"email","action":"redact"},{"detector":"card","action":"block"},
              {"kind":"webhook","name":"hook","url":"http://127.0.0.1:9/check","fail":"open","timeout_ms":250}],
     "output":[{"detector":"email","action":"mask"},{"kind":"moderation","provider":"oa"}]},
    {"name":"words","input":[{"name":"secret-project","detector":"keywords","words":["bluebird"],"action":"block"}]}]"#;

#[test]
fn policies_compile_and_apply_model_then_groups_then_key() {
    let keys = r#""keys":[{"name":"k","digest":"sha256:0000000000000000000000000000000000000000000000000000000000000000","groups":["g"],"guardrails":["pii","words"]}]"#;
    let config = match load(&format!("{POLICIES},{keys}")) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    };
    let g = &config.guardrails;
    assert_eq!(g.for_request(Some(0), Some(0), &[0]), vec![0, 1]);
    assert_eq!(g.for_request(None, None, &[0]), vec![1]);
    assert_eq!(g.for_request(None, None, &[]), Vec::<usize>::new());
    let pii = g.policy(0).map(|p| (p.input.rules().len(), p.input_checks.len(), p.output_checks.len(), p.restore));
    assert_eq!(pii, Some((2, 1, 1, true)));
    let hook = g.policy(0).and_then(|p| p.input_checks.first()).map(|c| (c.name.as_str(), c.fail_open, c.timeout_ms));
    assert_eq!(hook, Some(("hook", true, 250)));
}

#[test]
fn bad_rules_are_reported_with_their_path() {
    let bad = r#""guardrails":[{"name":"pii","input":[
        {"detector":"emial","action":"redact"},
        {"detector":"email","action":"shred"},
        {"detector":"regex","pattern":"(x","action":"block"},
        {"detector":"keywords","words":[],"action":"block","name":"kw"},
        {"kind":"webhook","name":"w"},
        {"kind":"moderation","provider":"an","name":"mod"},
        {"kind":"moderation","provider":"nope","name":"mod2"},
        {"detector":"ip","action":"log","url":"http://x"},
        {"detector":"ssn","action":"log","name":"ip"},
        {"kind":"webhook","name":"w2","url":"http://127.0.0.1:1","fail":"maybe","timeout_ms":0}]}]"#;
    let e = load(&bad.replace("]}]", r#"],"outputs":[]}]"#)).err().unwrap_or_default();
    assert!(e.contains("unknown field `outputs`"), "{e}");
    let e = load(bad).err().unwrap_or_default();
    for expected in [
        r#"guardrails[0].input[0].detector: unknown detector "emial""#,
        r#"guardrails[0].input[1].action: unknown action "shred""#,
        "guardrails[0].input[2].pattern: invalid pattern",
        "guardrails[0].input[3].words: keyword lists need at least one non-empty word",
        "guardrails[0].input[4].url: a webhook needs a url",
        r#"guardrails[0].input[5].provider: provider "an" does not speak OpenAI's API"#,
        r#"guardrails[0].input[6].provider: unknown provider "nope""#,
        "guardrails[0].input[7].url: only webhook and moderation rules take it",
        r#"guardrails[0].input[8].name: two rules named "ip""#,
        r#"guardrails[0].input[9].fail: unknown value "maybe""#,
        "guardrails[0].input[9].timeout_ms: must be between 1 and 60000",
        r#"groups[0].guardrails[0]: unknown guardrail policy "words""#,
    ] {
        assert!(e.contains(expected), "missing {expected:?} in {e}");
    }
}

#[test]
fn webhook_urls_answer_to_the_egress_policy() {
    let doc = r#""guardrails":[{"name":"pii","input":[{"kind":"webhook","url":"http://169.254.169.254/x"}]},
        {"name":"words","input":[{"detector":"ip","action":"log"}]}]"#;
    let e = load(doc).err().unwrap_or_default();
    assert!(e.contains("guardrails[0].input[0].url: host 169.254.169.254 is blocked"), "{e}");
}
