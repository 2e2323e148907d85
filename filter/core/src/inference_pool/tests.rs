use serde_json::{json, Value};

use super::*;

fn fixture(name: &str) -> Value {
    let path = format!("{}/../../testdata/kube/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// The fixture pod named `name` at `ip`, ready or not.
fn pod(name: &str, ip: &str, ready: bool) -> Value {
    let mut pod = fixture("pod.json");
    pod["metadata"]["name"] = json!(name);
    pod["status"]["podIP"] = json!(ip);
    for c in pod["status"]["conditions"].as_array_mut().unwrap() {
        if c["type"] == "Ready" {
            c["status"] = json!(if ready { "True" } else { "False" });
        }
    }
    pod
}

#[test]
fn a_pools_spec_is_its_selector_and_target_ports() {
    let pool = fixture("inferencepool.json");
    let spec = PoolSpec::of(&pool).unwrap();
    assert_eq!(spec.ports, [8000]);
    assert_eq!(spec.label_selector(), "app=vllm-pool");
    let mut two = pool.clone();
    two["spec"]["selector"]["matchLabels"]["tier"] = json!("gpu");
    two["spec"]["targetPorts"] = json!([{"number": 8000}, {"number": 8001}]);
    let spec = PoolSpec::of(&two).unwrap();
    assert_eq!((spec.label_selector().as_str(), spec.ports.as_slice()), ("app=vllm-pool,tier=gpu", &[8000, 8001][..]));
    let mut bare = pool;
    bare["spec"]["targetPorts"] = json!([]);
    assert!(PoolSpec::of(&bare).is_err(), "no target port, no endpoint");
}

#[test]
fn only_ready_pods_not_being_deleted_are_endpoints_one_per_target_port() {
    let spec = PoolSpec { selector: [("app".into(), "v".into())].into(), ports: vec![8000, 8001] };
    let mut leaving = pod("c", "10.0.0.3", true);
    leaving["metadata"]["deletionTimestamp"] = json!("2026-12-06T10:05:00Z");
    let mut unscheduled = pod("d", "", false);
    unscheduled["status"].as_object_mut().unwrap().remove("podIP");
    let pods =
        [pod("a", "10.0.0.1", true), pod("b", "10.0.0.2", false), leaving, unscheduled, pod("e", "fd00::5", true)];
    assert_eq!(spec.endpoints(&pods), ["10.0.0.1:8000", "10.0.0.1:8001", "[fd00::5]:8000", "[fd00::5]:8001"]);
    assert_eq!(ready_ip(&fixture("pod.json")), Some("10.244.1.12"));
}

#[test]
fn watch_lines_are_read_with_their_resource_version() {
    let pod = fixture("pod.json");
    let line = json!({"type": "MODIFIED", "object": pod}).to_string();
    assert_eq!(WatchLine::parse(line.as_bytes()).unwrap(), (WatchLine::Applied(pod.clone()), Some("1".to_string())));
    let line = json!({"type": "DELETED", "object": pod}).to_string();
    assert!(matches!(WatchLine::parse(line.as_bytes()).unwrap().0, WatchLine::Deleted(_)));
    let bookmark =
        r#"{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"12746"}}}"#;
    assert_eq!(WatchLine::parse(bookmark.as_bytes()).unwrap(), (WatchLine::Bookmark, Some("12746".to_string())));
    let gone = r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 5 (10)","reason":"Expired","code":410}}"#;
    assert_eq!(
        WatchLine::parse(gone.as_bytes()).unwrap().0,
        WatchLine::Error(410, "too old resource version: 5 (10)".into())
    );
    for bad in ["", "{}", "[1]", r#"{"type":"SOMETHING","object":{}}"#, r#"{"type":"ADDED"}"#] {
        assert!(WatchLine::parse(bad.as_bytes()).is_err(), "{bad:?}");
    }
}
