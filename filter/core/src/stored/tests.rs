use super::*;

#[test]
fn ids_are_resp_and_safe_characters() {
    for ok in ["resp_1", "resp_chatcmpl-7f3a", "resp_msg_01XyZ", "resp_a.b:c"] {
        assert!(valid_id(ok), "{ok}");
    }
    let long = format!("resp_{}", "a".repeat(MAX_ID_LEN));
    for bad in ["", "resp_", "resp", "msg_1", "resp_a/b", "resp_a%2F", "resp_a b", "resp_é", "resp_a?b", &long] {
        assert!(!valid_id(bad), "{bad:?}");
    }
}

#[test]
fn a_malformed_id_is_400_in_openai_shape() {
    let e = lifecycle("GET", "/v1/responses/bogus").unwrap_err();
    assert_eq!((e.status, e.param, e.kind), (400, Some("response_id"), "invalid_request_error"));
    let body: serde_json::Value = serde_json::from_slice(&e.body()).unwrap();
    assert!(body["error"]["message"].as_str().unwrap().contains("bogus"), "{body}");
}

#[test]
fn store_is_wanted_unless_false() {
    assert!(wants_store(br#"{"model":"m","input":"hi"}"#));
    assert!(wants_store(br#"{"model":"m","store":true}"#));
    assert!(!wants_store(br#"{"model":"m","store":false}"#));
    assert!(!wants_store(br#"{"input":{"store":true},"store":false}"#));
    assert!(wants_store(br#"{"input":{"store":false}}"#));
}

#[test]
fn the_completed_event_is_found_in_a_stream() {
    let stream = concat!(
        "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\"}}\n\n",
        "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",",
        "\"delta\":\"\\\"type\\\":\\\"response.completed\\\"\"}\n\n",
        "event: response.completed\r\ndata: {\"type\":\"response.completed\",\r\ndata: \"response\":{\"id\":\"resp_1\"}}\r\n\r\n",
    );
    let data = final_event(stream.as_bytes()).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&data).unwrap();
    assert_eq!(v["response"]["id"], "resp_1");
    // Without its final blank line too (the stream ended right after it).
    let trimmed = stream.trim_end();
    assert!(final_event(trimmed.as_bytes()).is_some());
    // A stream that failed or was cut never completed.
    let cut = stream.split("event: response.completed").next().unwrap();
    assert_eq!(final_event(cut.as_bytes()), None);
    assert_eq!(final_event(b""), None);
    // A response that stopped at its token bound is a response; a failed one is not kept.
    let incomplete = "event: response.incomplete\ndata: {\"type\":\"response.incomplete\",\"response\":{\"id\":\"resp_2\",\"status\":\"incomplete\"}}\n\n";
    let data = final_event(format!("{cut}{incomplete}").as_bytes()).unwrap();
    assert_eq!(serde_json::from_slice::<serde_json::Value>(&data).unwrap()["response"]["status"], "incomplete");
    let failed = "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"id\":\"resp_3\"}}\n\n";
    assert_eq!(final_event(format!("{cut}{failed}").as_bytes()), None);
}

#[test]
fn background_is_refused_and_nothing_can_be_cancelled() {
    assert_eq!(check_background(br#"{"model":"m","input":"background"}"#), Ok(()));
    assert_eq!(check_background(br#"{"model":"m","background":false}"#), Ok(()));
    let e = check_background(br#"{"model":"m","background":true}"#).unwrap_err();
    assert_eq!((e.status, e.param), (400, Some("background")));
    let e = lifecycle("POST", "/v1/responses/resp_1/cancel").unwrap_err();
    assert_eq!((e.status, e.param), (400, Some("response_id")));
    assert!(e.message.contains("background"), "{}", e.message);
    assert_eq!(lifecycle("POST", "/v1/responses/x/cancel").unwrap_err().status, 400);
}
