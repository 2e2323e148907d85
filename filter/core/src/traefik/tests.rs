#![allow(clippy::unwrap_used)]

use super::*;

#[test]
fn defaults_with_a_snapshot_file() {
    let s = Settings::from_json_slice(br#"{"snapshotFile":"/ferrogate/snapshot.json"}"#).unwrap();
    assert_eq!(s.cluster_header, "x-ferrogate-cluster");
    assert_eq!(s.max_body_bytes, DEFAULT_MAX_BODY_BYTES);
    assert_eq!(s.snapshot_check_ms, DEFAULT_SNAPSHOT_CHECK_MS);
    assert!(!s.followed_by_buffering && s.config.is_none() && s.usage_file.is_none());
}

#[test]
fn strings_from_label_providers_are_read_as_numbers_and_booleans() {
    let json = br#"{"config":{},"maxBodyBytes":"1024","snapshotCheckMs":250,"followedByBuffering":"true","clusterHeader":"X-Route"}"#;
    let s = Settings::from_json_slice(json).unwrap();
    assert_eq!((s.max_body_bytes, s.snapshot_check_ms, s.followed_by_buffering), (1024, 250, true));
    assert_eq!(s.cluster_header, "x-route");
}

#[test]
fn unknown_keys_and_bad_values_are_named() {
    let e = Settings::from_json_slice(br#"{"config":{},"snapshotfile":"/x"}"#).unwrap_err().to_string();
    assert!(e.contains("snapshotfile"), "{e}");
    let e = Settings::from_json_slice(br#"{"config":{},"maxBodyBytes":"lots"}"#).unwrap_err().to_string();
    assert!(e.contains("lots"), "{e}");
    let e = Settings::from_json_slice(br#"{"snapshotFile":"relative.json","maxBodyBytes":0}"#).unwrap_err().to_string();
    assert!(e.contains("snapshotFile") && e.contains("maxBodyBytes"), "{e}");
}

#[test]
fn nothing_to_serve_is_refused() {
    // Traefik sends `null` for a middleware without settings.
    for json in [&b"null"[..], b"{}"] {
        let e = Settings::from_json_slice(json).unwrap_err().to_string();
        assert!(e.contains("needs an inline config or a snapshotFile"), "{e}");
    }
}

#[test]
fn inline_config_problems_have_paths_under_config() {
    let json = br#"{"config":{"models":[{"name":"m","targets":[{"provider":"nope","model":"x"}]}]}}"#;
    let e = Settings::from_json_slice(json).unwrap_err().to_string();
    assert!(e.contains("config.models[0]"), "{e}");
}

#[test]
fn settings_keys_lists_every_field() {
    // Each listed key is accepted (an unlisted one would be refused as unknown).
    for key in SETTINGS_KEYS {
        let json = if key == "config" { r#"{"config":{}}"#.to_string() } else { format!(r#"{{"{key}":null}}"#) };
        assert!(serde_json::from_str::<RawSettings>(&json).is_ok(), "{key}");
    }
}
