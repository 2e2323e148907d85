use super::*;
use crate::config::Config;

fn config() -> Config {
    let doc = r#"{"providers":[{"name":"oa","kind":"openai","base_url":"https://api.openai.com"}],
      "models":[{"name":"m","targets":[{"provider":"oa","model":"gpt"}]}],
      "guardrails":[
        {"name":"a","restore":true,"input":[{"name":"names","detector":"keywords","words":["alice"],"action":"redact"}],
         "output":[{"name":"leak","detector":"keywords","words":["hunter2"],"action":"block"}]},
        {"name":"b","max_prompt_chars":40,"input":[{"name":"proj","detector":"keywords","words":["bluebird"],"action":"block"},
          {"name":"names","detector":"keywords","words":["alice","robert"],"action":"mask"}]}]}"#;
    match Config::from_json_slice(doc.as_bytes()) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn policies_apply_in_order_on_text_parts_only() {
    let c = config();
    let mut vault = Vault::default();
    let mut tallies = Tallies::default();
    let body = br#"{"model":"alice","messages":[{"role":"user","name":"alice","content":"alice meets robert"}]}"#;
    let out = super::body(&c.guardrails, &[0, 1], Stage::Input, Shape::ChatRequest, body, &mut vault, &mut tallies);
    let Outcome::Rewritten(bytes) = out else { panic!("{out:?}") };
    let text = String::from_utf8_lossy(&bytes);
    // Policy a redacts alice first, so policy b only masks robert; model and name are not text.
    assert!(text.contains(r#""content":"[REDACTED_1] meets **bert""#), "{text}");
    assert!(text.contains(r#""model":"alice""#) && text.contains(r#""name":"alice""#), "{text}");
    let hits: Vec<_> = tallies.each(&c.guardrails).map(|(p, s, r, a, n)| (p.name.as_str(), s, r, a, n)).collect();
    assert_eq!(
        hits,
        vec![("a", Stage::Input, "names", Action::Redact, 1), ("b", Stage::Input, "names", Action::Mask, 1)]
    );
    // The answer gets the original back (policy a restores), not the masked value.
    let answer = br#"{"choices":[{"index":0,"message":{"role":"assistant","content":"Hi [REDACTED_1] and **bert"}}]}"#;
    let restored = restore(Shape::ChatAnswer, answer, &vault).unwrap_or_default();
    assert!(String::from_utf8_lossy(&restored).contains("Hi alice and **bert"));
}

#[test]
fn refusals_name_policy_and_rule() {
    let c = config();
    let g = &c.guardrails;
    let (mut vault, mut tallies) = (Vault::default(), Tallies::default());
    let blocked = br#"{"messages":[{"role":"user","content":"about Bluebird"}]}"#;
    let out = super::body(g, &[0, 1], Stage::Input, Shape::ChatRequest, blocked, &mut vault, &mut tallies);
    assert_eq!(out, Outcome::Refused(Refusal { policy: 1, rule: "proj".into(), stage: Stage::Input }));
    let long = br#"{"messages":[{"role":"user","content":"0123456789012345678901234567890123456789x"}]}"#;
    let out = super::body(g, &[0, 1], Stage::Input, Shape::ChatRequest, long, &mut vault, &mut tallies);
    assert_eq!(out, Outcome::Refused(Refusal { policy: 1, rule: "max_prompt_chars".into(), stage: Stage::Input }));
    let answer = br#"{"choices":[{"message":{"content":"the password is hunter2"}}]}"#;
    let out = super::body(g, &[0, 1], Stage::Output, Shape::ChatAnswer, answer, &mut vault, &mut tallies);
    assert_eq!(out, Outcome::Refused(Refusal { policy: 0, rule: "leak".into(), stage: Stage::Output }));
    let clean = br#"{"messages":[{"role":"user","content":"hello"}]}"#;
    assert_eq!(
        super::body(g, &[0, 1], Stage::Input, Shape::ChatRequest, clean, &mut vault, &mut tallies),
        Outcome::Unchanged
    );
    assert_eq!(
        super::body(g, &[0], Stage::Input, Shape::ChatRequest, b"not json", &mut vault, &mut tallies),
        Outcome::Unchanged
    );
}

#[test]
fn gemini_arrays_are_scanned_element_by_element() {
    let c = config();
    let (mut vault, mut tallies) = (Vault::default(), Tallies::default());
    let input = br#"{"contents":[{"role":"user","parts":[{"text":"hi alice"}]}]}"#;
    let out = super::body(&c.guardrails, &[0], Stage::Input, Shape::GeminiRequest, input, &mut vault, &mut tallies);
    assert!(matches!(out, Outcome::Rewritten(_)), "{out:?}");
    let chunks = br#"[{"candidates":[{"content":{"parts":[{"text":"hello [REDACTED_1]"}]}}]},{"candidates":[{"content":{"parts":[{"text":"bye"}]}}]}]"#;
    let restored = restore(Shape::GeminiAnswer, chunks, &vault).unwrap_or_default();
    let text = String::from_utf8_lossy(&restored);
    assert!(text.starts_with('[') && text.contains("hello alice") && text.contains("bye"), "{text}");
    let leak = br#"[{"candidates":[{"content":{"parts":[{"text":"ok"}]}}]},{"candidates":[{"content":{"parts":[{"text":"it is hunter2"}]}}]}]"#;
    let out = super::body(&c.guardrails, &[0], Stage::Output, Shape::GeminiAnswer, leak, &mut vault, &mut tallies);
    assert_eq!(out, Outcome::Refused(Refusal { policy: 0, rule: "leak".into(), stage: Stage::Output }));
}
