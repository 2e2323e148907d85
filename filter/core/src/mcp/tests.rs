use super::*;
use serde_json::{json, Value};

fn msg(body: &str) -> Message {
    scan(body.as_bytes()).unwrap()
}

fn err(body: &str) -> ScanError {
    scan(body.as_bytes()).unwrap_err()
}

#[test]
fn scan_reads_a_request_with_a_numeric_or_string_id() {
    let m = msg(r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"x":[1]}}}"#);
    let want = Message {
        kind: Kind::Request,
        method: Some("tools/call".into()),
        id: Some("7".into()),
        name: Some("echo".into()),
    };
    assert_eq!(m, want);
    let m = msg(r#" {"id":"a\"b","method":"ping","jsonrpc":"2.0"} "#);
    assert_eq!((m.kind, m.id.as_deref(), m.name), (Kind::Request, Some(r#""a\"b""#), None));
    let echoed: Value = serde_json::from_str(m.id.as_deref().unwrap()).unwrap();
    assert_eq!(echoed, json!("a\"b"));
    assert_eq!(msg(r#"{"jsonrpc":"2.0","id":-1.5e3,"method":"x"}"#).id.as_deref(), Some("-1.5e3"));
}

#[test]
fn scan_reads_notifications_and_responses() {
    let m = msg(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    assert_eq!((m.kind, m.method.as_deref(), m.id), (Kind::Notification, Some("notifications/initialized"), None));
    let m = msg(r#"{"jsonrpc":"2.0","id":"s1","result":{"content":[]}}"#);
    assert_eq!((m.kind, m.method, m.id.as_deref()), (Kind::Response, None, Some(r#""s1""#)));
    let m = msg(r#"{"jsonrpc":"2.0","id":null,"error":{"code":-1,"message":"no"}}"#);
    assert_eq!((m.kind, m.id), (Kind::Response, None));
}

#[test]
fn scan_unescapes_method_and_name_and_reads_uri_for_resources() {
    let m = msg(r#"{"jsonrpc":"2.0","id":1,"method":"tools\/c\u0061ll","params":{"name":"ec\u0068o"}}"#);
    assert_eq!((m.method.as_deref(), m.name.as_deref()), (Some("tools/call"), Some("echo")));
    let body = r#"{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"name":"ok","uri":"file:///a.txt"}}"#;
    assert_eq!(msg(body).name.as_deref(), Some("file:///a.txt"));
    let body = r#"{"jsonrpc":"2.0","id":3,"method":"prompts/get","params":{"name":"review","uri":5}}"#;
    assert_eq!(msg(body).name.as_deref(), Some("review"));
    // Positional params name nothing.
    assert_eq!(msg(r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":["echo"]}"#).name, None);
}

#[test]
fn scan_refuses_what_is_not_one_jsonrpc_message() {
    assert_eq!(err(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#), ScanError::Batch);
    assert_eq!(err(r#""hello""#), ScanError::NotAnObject);
    assert_eq!(err(r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#), ScanError::NotJsonRpc);
    assert_eq!(err(r#"{"id":1,"method":"ping"}"#), ScanError::NotJsonRpc);
    assert_eq!(err(r#"{"jsonrpc":"2.0","id":1,"method":5}"#), ScanError::BadMethod);
    assert_eq!(err(r#"{"jsonrpc":"2.0","id":1,"method":"ping","result":{}}"#), ScanError::BadMethod);
    assert_eq!(err(r#"{"jsonrpc":"2.0","id":1}"#), ScanError::BadMethod);
    assert_eq!(err(r#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#), ScanError::BadId);
    assert_eq!(err(r#"{"jsonrpc":"2.0","id":true,"method":"ping"}"#), ScanError::BadId);
    assert_eq!(err(r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#), ScanError::BadId);
    assert_eq!(err(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":7}}"#), ScanError::BadName);
    assert_eq!(err(r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":null}}"#), ScanError::BadName);
    assert_eq!(ScanError::BadName.code(), -32600);
}

#[test]
fn scan_refuses_a_repeated_field_it_reads() {
    // The server may read the other copy: the grants would be checked against the wrong name.
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ok","name":"rm_rf"}}"#;
    assert!(matches!(err(body), ScanError::NotJson(m) if m.contains("duplicate")));
    assert!(matches!(err(r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"x"}"#), ScanError::NotJson(_)));
}

#[test]
fn scan_refuses_deep_nesting_and_garbage_as_parse_errors() {
    let deep =
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"x","params":{{"a":{}{}}}}}"#, "[".repeat(200), "]".repeat(200));
    assert!(serde_json::from_str::<serde::de::IgnoredAny>(&deep).is_ok(), "valid JSON, only deep");
    assert!(matches!(err(&deep), ScanError::NotJson(_)));
    let strings = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"x","params":{{"a":"{}"}}}}"#, "[".repeat(200));
    assert_eq!(msg(&strings).kind, Kind::Request, "brackets inside strings do not nest");
    for garbage in ["", "{", "nope", "{\"jsonrpc\":\"2.0\",}", "[1,", "\u{feff}{}"] {
        let e = err(garbage);
        assert!(matches!(e, ScanError::NotJson(_)), "{garbage:?}: {e:?}");
        assert_eq!(e.code(), -32700);
    }
    assert_eq!(scan(b"{\"jsonrpc\":\"2.0\",\"method\":\"\xff\"}").unwrap_err().code(), -32700);
}

#[test]
fn error_body_round_trips_with_the_id_and_an_escaped_message() {
    for (id, want) in [(Some("7"), json!(7)), (Some(r#""a\"b""#), json!("a\"b")), (None, Value::Null)] {
        let body: Value = serde_json::from_slice(&error_body(id, -32600, "bad \"name\"\n\u{1}")).unwrap();
        let expected = json!({"jsonrpc":"2.0","id":want,"error":{"code":-32600,"message":"bad \"name\"\n\u{1}"}});
        assert_eq!(body, expected);
    }
    let body: Value = serde_json::from_slice(&error_body(Some("1,\"x\":2"), -1, "m")).unwrap();
    assert_eq!(body["id"], Value::Null, "an id that is not one JSON value is not echoed");
    let m = msg(r#"{"jsonrpc":"2.0","id":"\u00e9","method":"x"}"#);
    let body: Value = serde_json::from_slice(&error_body(m.id.as_deref(), -32601, "no")).unwrap();
    assert_eq!(body["id"], json!("é"));
}

#[test]
fn glob_matches_stars_and_question_marks() {
    assert!(glob_match("echo", "echo"));
    assert!(!glob_match("echo", "echo2") && !glob_match("echo", "ech"));
    assert!(glob_match("*", "") && glob_match("*", "anything"));
    assert!(glob_match("?", "x") && !glob_match("?", "") && !glob_match("?", "xy"));
    assert!(glob_match("add*", "add") && glob_match("add*", "add_user") && !glob_match("add*", "xadd"));
    assert!(glob_match("*_admin", "db_admin") && !glob_match("*_admin", "db_admin2"));
    assert!(glob_match("a*b*c", "a_b_c") && !glob_match("a*b*c", "a_c_b"));
    assert!(glob_match("?é*", "xé日本") && glob_match("日?", "日本") && !glob_match("日?", "日"));
    assert!(glob_match("a**?", "ab") && !glob_match("a**?", "a"));
}

#[test]
fn glob_has_no_exponential_backtracking() {
    let name = "a".repeat(10_000);
    assert!(!glob_match("a*a*a*a*a*a*a*a*b", &name));
    assert!(glob_match("a*a*a*a*a*a*a*a*", &name));
}

fn list(tools: Value) -> Vec<u8> {
    json!({"jsonrpc":"2.0","id":1,"result":{"tools":tools,"nextCursor":"c2"}}).to_string().into_bytes()
}

fn allow(name: &str) -> bool {
    !name.ends_with("_admin")
}

#[test]
fn filter_list_drops_ungranted_tools_and_keeps_the_rest() {
    let body = list(json!([
        {"name":"b","inputSchema":{"type":"object"}},
        {"name":"db_admin"},
        {"name":"a","title":"A"},
        {"title":"no name"},
        {"name":3},
        "not a tool"
    ]));
    let out: Value = serde_json::from_slice(&filter_list(&body, &allow).unwrap().unwrap()).unwrap();
    let want = json!({"jsonrpc":"2.0","id":1,"result":{
        "tools":[{"name":"b","inputSchema":{"type":"object"}},{"name":"a","title":"A"}],"nextCursor":"c2"}});
    assert_eq!(out, want);
}

#[test]
fn filter_list_changes_only_the_tools_array() {
    let body = br#"{"result": {"_meta":{"z":1.50}, "tools": [ {"name":"x_admin"},{"z":1, "name":"k"} ], "ttlMs":5}, "jsonrpc":"2.0", "id":"q"}"#;
    let out = filter_list(body, &allow).unwrap().unwrap();
    let want =
        br#"{"result": {"_meta":{"z":1.50}, "tools": [{"z":1, "name":"k"}], "ttlMs":5}, "jsonrpc":"2.0", "id":"q"}"#;
    assert_eq!(String::from_utf8(out).unwrap(), String::from_utf8(want.to_vec()).unwrap());
}

#[test]
fn filter_list_leaves_what_it_need_not_change() {
    assert_eq!(filter_list(&list(json!([{"name":"a"},{"name":"b"}])), &allow), Ok(None));
    assert_eq!(filter_list(&list(json!([])), &allow), Ok(None));
    let error = br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"no tools"}}"#;
    assert_eq!(filter_list(error, &|_| false), Ok(None));
    assert_eq!(filter_list(br#"{"jsonrpc":"2.0","id":1,"result":{"tools":{}}}"#, &|_| false), Ok(None));
    assert_eq!(filter_list(br#"{"jsonrpc":"2.0","id":1,"result":[{"tools":[]}]}"#, &|_| false), Ok(None));
    assert_eq!(filter_list(b"null", &|_| false), Ok(None));
}

#[test]
fn filter_list_refuses_what_it_cannot_filter() {
    assert!(matches!(filter_list(b"{\"result\":{\"tools\":[", &allow), Err(FilterError::NotJson(_))));
    assert!(matches!(filter_list(b"<html>", &allow), Err(FilterError::NotJson(_))));
    assert_eq!(
        filter_list(&format!("[{}]", String::from_utf8(list(json!([]))).unwrap()).into_bytes(), &allow),
        Err(FilterError::Batch)
    );
    let dup = br#"{"result":{"tools":[{"name":"x_admin"}],"tools":[]}}"#;
    assert!(matches!(filter_list(dup, &allow), Err(FilterError::NotJson(_))));
    let many: Vec<Value> = (0..=MAX_TOOLS).map(|i| json!({"name": format!("t{i}")})).collect();
    assert_eq!(filter_list(&list(Value::Array(many)), &allow), Err(FilterError::TooMany));
    let max: Vec<Value> = (0..MAX_TOOLS).map(|i| json!({"name": format!("t{i}")})).collect();
    assert_eq!(filter_list(&list(Value::Array(max)), &allow), Ok(None));
}

#[test]
fn filter_list_sse_rewrites_only_the_result_event() {
    let note = r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"name":"x_admin"}}"#;
    let result = r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"a"},{"name":"x_admin"}]}}"#;
    let body =
        format!(": hi\r\nevent: message\r\ndata: {note}\r\n\r\nid: 7\r\nevent: message\r\ndata: {result}\r\n\r\n");
    let out = String::from_utf8(filter_list_sse(body.as_bytes(), &allow).unwrap().unwrap()).unwrap();
    let kept = r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"a"}]}}"#;
    let want = format!(": hi\r\nevent: message\r\ndata: {note}\r\n\r\nid: 7\r\nevent: message\r\ndata: {kept}\r\n\r\n");
    assert_eq!(out, want);
}

#[test]
fn filter_list_sse_joins_multi_line_data() {
    let body = "retry: 100\nid: 1\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\n\
                data:  \"result\":{\"tools\":[{\"name\":\"a_admin\"},\ndata:{\"name\":\"b\"}]}}\n\n: end\n";
    let out = String::from_utf8(filter_list_sse(body.as_bytes(), &allow).unwrap().unwrap()).unwrap();
    let want = "retry: 100\nid: 1\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,  \"result\":{\"tools\":[{\"name\":\"b\"}]}}\n\n: end\n";
    assert_eq!(out, want);
    assert_eq!(filter_list_sse(out.as_bytes(), &allow), Ok(None));
}

#[test]
fn filter_list_sse_keeps_event_ends_with_cr_line_endings() {
    // The dropped data line is followed by the new one, never by the blank line: "\r" + "\n"
    // would otherwise merge into one "\r\n" and the event would not end.
    let body = "data: {\"result\":{\"tools\":\rdata: [{\"name\":\"a_admin\"}]}}\r\n\nevent: next\ndata: {}\n";
    let out = String::from_utf8(filter_list_sse(body.as_bytes(), &allow).unwrap().unwrap()).unwrap();
    assert_eq!(out, "data: {\"result\":{\"tools\": []}}\r\n\nevent: next\ndata: {}\n");
}

#[test]
fn filter_list_sse_leaves_what_it_need_not_change() {
    let all = r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"a"}]}}"#;
    assert_eq!(
        filter_list_sse(format!("id: 0\ndata:\n\nevent: message\ndata: {all}\n\n").as_bytes(), &allow),
        Ok(None)
    );
    assert_eq!(filter_list_sse(b"", &allow), Ok(None));
    assert_eq!(filter_list_sse(b": keep-alive\r\r", &allow), Ok(None));
    assert!(matches!(filter_list_sse(b"data: [DONE]\n\n", &allow), Err(FilterError::NotJson(_))));
}
