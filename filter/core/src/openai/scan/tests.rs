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
