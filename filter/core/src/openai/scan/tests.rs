//! Scanner and rewrite tests: nesting, escapes, key order, non-objects, unicode.

use super::*;

fn model(body: &str) -> Result<String, ScanError> {
    find_model(body.as_bytes()).map(|m| m.value.into_owned())
}

#[test]
fn model_first_key() {
    let body = br#"{"model":"chat","messages":[]}"#;
    let m = find_model(body).unwrap();
    assert_eq!(m.value, "chat");
    assert_eq!(&body[m.span.clone()], br#""chat""#);
    assert!(matches!(m.value, Cow::Borrowed(_)));
}

#[test]
fn model_not_first_after_nested_values() {
    let body = r#" {
      "messages": [{"role":"user","content":"say \"model\": {\"x\"} ] }"}, {"model":"inner"}],
      "tools": {"model": "nested", "a": [1, 2.5e3, true, null, {"b": [[]]}]},
      "n": -1, "flag": false, "s": "\\",
      "model" : "outer" ,
      "stream": true }"#;
    assert_eq!(model(body).unwrap(), "outer");
}

#[test]
fn escapes_in_value_and_key() {
    assert_eq!(model(r#"{"model":"a\"b\\c\/d\u00e9"}"#).unwrap(), "a\"b\\c/dé");
    // An escaped key that decodes to "model" is the model key.
    assert_eq!(model(r#"{"mod\u0065l":"x"}"#).unwrap(), "x");
    assert_eq!(model(r#"{"mod\u0065l":"x","model":"y"}"#), Err(ScanError::DuplicateModel));
    // Keys that merely contain "model" are not it.
    assert_eq!(model(r#"{"model_x":"a","xmodel":"b","model":"c"}"#).unwrap(), "c");
}

#[test]
fn unicode_values() {
    assert_eq!(model(r#"{"model":"模型-ü"}"#).unwrap(), "模型-ü");
    assert_eq!(model(r#"{"model":"\u6a21\ud83d\ude00"}"#).unwrap(), "模😀");
}

#[test]
fn missing_and_wrong_types() {
    assert_eq!(model(r#"{"messages":[{"model":"x"}]}"#), Err(ScanError::ModelMissing));
    assert_eq!(model("{}"), Err(ScanError::ModelMissing));
    assert_eq!(model(r#"{"model":1}"#), Err(ScanError::ModelNotString));
    assert_eq!(model(r#"{"model":null}"#), Err(ScanError::ModelNotString));
    assert_eq!(model(r#"{"model":{"id":"x"}}"#), Err(ScanError::ModelNotString));
    assert_eq!(model(r#"{"model":"a","model":"b"}"#), Err(ScanError::DuplicateModel));
}

#[test]
fn non_objects_and_invalid_json() {
    for body in ["[]", "\"model\"", "1", "null", " [ {\"model\":\"x\"} ]"] {
        assert_eq!(model(body), Err(ScanError::NotObject), "{body}");
    }
    for body in ["", "{", "{\"model\":\"x\"", "{\"model\":\"x\"} trailing", "{'model':'x'}", "{\"model\":\"x\",}"] {
        assert!(matches!(model(body), Err(ScanError::NotJson(_))), "{body}");
    }
    assert!(matches!(find_model(b"{\"model\":\"\xff\"}"), Err(ScanError::NotJson(_))));
}

#[test]
fn rewrite_keeps_every_other_byte() {
    let body = "{ \"temperature\" :0.5,\n  \"model\" :\t\"chat\" , \"x-unknown\": {\"model\":\"keep\"} }";
    let m = find_model(body.as_bytes()).unwrap();
    let out = rewrite_model(body.as_bytes(), m.span, "sim-small");
    let expected = "{ \"temperature\" :0.5,\n  \"model\" :\t\"sim-small\" , \"x-unknown\": {\"model\":\"keep\"} }";
    assert_eq!(String::from_utf8(out).unwrap(), expected);
}

#[test]
fn rewrite_escapes_the_new_value() {
    let body = br#"{"model":"a"}"#;
    let m = find_model(body).unwrap();
    let out = rewrite_model(body, m.span, "q\"\\\n\u{1}é");
    assert_eq!(String::from_utf8(out.clone()).unwrap(), r#"{"model":"q\"\\\u000a\u0001é"}"#);
    assert_eq!(model(std::str::from_utf8(&out).unwrap()).unwrap(), "q\"\\\n\u{1}é");
}

#[test]
fn rewrite_round_trips_escaped_values() {
    let body = br#"{"a":1,"model":"x\u0041"}"#;
    let m = find_model(body).unwrap();
    assert_eq!(m.value, "xA");
    assert_eq!(rewrite_model(body, m.span, "y"), br#"{"a":1,"model":"y"}"#.to_vec());
}

#[test]
fn rewrite_clamps_bad_spans() {
    assert_eq!(rewrite_model(b"abc", 5..9, "z"), b"abc\"z\"".to_vec());
    #[allow(clippy::reversed_empty_ranges)]
    let reversed = 2..1;
    assert_eq!(rewrite_model(b"abc", reversed, "z"), b"ab\"z\"c".to_vec());
}

#[test]
fn a_key_whose_escapes_are_no_text_is_just_another_key() {
    // Valid JSON (serde accepts it); the lone surrogate key cannot be "model".
    let body = br#"{"\udeee":1,"model":"m"}"#;
    assert_eq!(find_model(body).map(|f| f.value.into_owned()), Ok("m".to_string()));
}

/// serde's reading of a body's top-level `model` (the first problem in body order), or `None`
/// where serde cannot tell (a key or model value whose escapes are no text, deep nesting).
fn serde_model(body: &[u8]) -> Option<Result<String, ScanError>> {
    use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
    struct Top;
    impl<'de> Visitor<'de> for Top {
        type Value = Result<String, ScanError>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("any JSON")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut outcome = Err(ScanError::ModelMissing);
            while let Some(key) = map.next_key::<String>()? {
                if key != "model" {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
                let value = map.next_value::<serde_json::Value>()?;
                outcome = match (outcome, value) {
                    (Err(ScanError::ModelMissing), serde_json::Value::String(s)) => Ok(s),
                    (Err(ScanError::ModelMissing), _) => Err(ScanError::ModelNotString),
                    (Ok(_), _) => Err(ScanError::DuplicateModel),
                    (problem, _) => problem,
                };
            }
            Ok(outcome)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok(Err(ScanError::NotObject))
        }
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok(Err(ScanError::NotObject))
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok(Err(ScanError::NotObject))
        }
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok(Err(ScanError::NotObject))
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok(Err(ScanError::NotObject))
        }
        fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
            Ok(Err(ScanError::NotObject))
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(Err(ScanError::NotObject))
        }
    }
    let json = std::str::from_utf8(body).is_ok() && serde_json::from_slice::<IgnoredAny>(body).is_ok();
    if !json {
        return Some(Err(ScanError::NotJson(String::new())));
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    de.deserialize_any(Top).ok()
}

/// `count` objects of zero to five members, keys and values chosen to meet `model` in every
/// form and place (escaped, nested, repeated, not a string), sometimes with a byte cut out.
fn objects(count: usize) -> impl Iterator<Item = Vec<u8>> {
    const KEYS: [&str; 8] = [
        "\"model\"",
        "\"mod\\u0065l\"",
        "\"k\"",
        "\"models\"",
        "\"\\u00e9\"",
        "\"é\"",
        "\"stream\"",
        "\"str\\u0065am\"",
    ];
    const VALUES: [&str; 10] = [
        "\"x\"",
        "\"a\\u0041\"",
        "\"é\\n\"",
        "1.5",
        "null",
        "{\"model\":\"in\"}",
        "[{\"model\":\"y\"},\"model\"]",
        "{\"a\":{\"model\":1,\"model\":2}}",
        "[]",
        "\"\"",
    ];
    const SPACE: [&str; 4] = ["", " ", "\n\t", "  "];
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move |n: usize| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % n as u64) as usize
    };
    (0..count).map(move |_| {
        let members: Vec<String> = (0..next(6))
            .map(|_| {
                format!("{}{}{}:{}{}", SPACE[next(4)], KEYS[next(8)], SPACE[next(4)], SPACE[next(4)], VALUES[next(10)])
            })
            .collect();
        let mut body = format!("{{{}}}", members.join(",")).into_bytes();
        if next(8) == 0 {
            body.remove(next(body.len()));
        }
        body
    })
}

#[test]
fn the_one_pass_agrees_with_serde_on_generated_bodies() {
    let (mut found, mut may_stream) = (0, 0);
    let near = crate::openai::validate::tests::near_json(100_000);
    for part in near.chain(objects(50_000)) {
        for (before, after) in [("", ""), ("{\"model\":", "}"), ("{", "}"), ("{\"a\":[1],", ",\"z\":2}")] {
            let body = [before.as_bytes(), &part, after.as_bytes()].concat();
            let Some(want) = serde_model(&body) else { continue };
            let got = find_model(&body);
            let shown = String::from_utf8_lossy(&body);
            match (&got, &want) {
                (Ok(field), Ok(value)) => {
                    assert_eq!(field.value, value.as_str(), "{shown}");
                    if !field.may_stream {
                        let top: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&body).unwrap();
                        assert!(!top.contains_key("stream"), "{shown}");
                    } else {
                        may_stream += 1;
                    }
                    let token: String = serde_json::from_slice(&body[field.span.clone()]).unwrap();
                    assert_eq!(&token, value, "{shown}");
                    found += 1;
                }
                (Err(ScanError::NotJson(_)), Err(ScanError::NotJson(_))) => {}
                _ => assert_eq!(got.map(|f| f.value.into_owned()), want, "{shown}"),
            }
        }
    }
    assert!(found > 5_000, "{found}");
    assert!(may_stream > 1_000 && may_stream < found, "{may_stream} of {found}");
}
