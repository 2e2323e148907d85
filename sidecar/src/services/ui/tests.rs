use std::collections::BTreeSet;

use axum::body::Body;
use axum::http::Request;
use tower::ServiceExt;

use super::*;

async fn get(path: &str, headers: &[(&str, &str)]) -> (StatusCode, HeaderMap, Vec<u8>) {
    let mut req = Request::builder().uri(path);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let answer = router::<()>().oneshot(req.body(Body::empty()).unwrap()).await.unwrap();
    let (parts, body) = answer.into_parts();
    (parts.status, parts.headers, axum::body::to_bytes(body, 1 << 22).await.unwrap().to_vec())
}

fn assert_secured(path: &str, headers: &HeaderMap) {
    let h = |n: &str| headers.get(n).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    assert_eq!(h("content-security-policy"), CONTENT_SECURITY_POLICY, "{path}");
    assert!(!CONTENT_SECURITY_POLICY.contains("unsafe"), "no unsafe-inline, no unsafe-eval");
    assert_eq!(h("x-frame-options"), "DENY", "{path}");
    assert_eq!(h("x-content-type-options"), "nosniff", "{path}");
    assert_eq!(h("referrer-policy"), "no-referrer", "{path}");
}

#[tokio::test]
async fn every_asset_is_served_with_its_type_and_the_security_headers() {
    for asset in ASSETS {
        let path = format!("/ui/{}", asset.path);
        let (status, headers, body) = get(&path, &[]).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert_eq!(headers[header::CONTENT_TYPE], asset.kind, "{path}");
        assert_eq!(headers[header::CACHE_CONTROL], "no-cache", "{path}");
        assert_eq!(body, asset.body, "{path}");
        assert_secured(&path, &headers);
        let etag = headers[header::ETAG].to_str().unwrap().to_string();
        let (status, headers, body) = get(&path, &[("if-none-match", &etag)]).await;
        assert_eq!(status, StatusCode::NOT_MODIFIED, "{path}");
        assert!(body.is_empty());
        assert_secured(&path, &headers);
    }
    let (status, headers, body) = get("/ui/", &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers[header::CONTENT_TYPE], "text/html; charset=utf-8");
    assert_eq!(body, ASSETS[0].body);
    assert_secured("/ui/", &headers);
}

#[tokio::test]
async fn ui_redirects_and_unknown_files_are_404() {
    let (status, headers, _) = get("/ui", &[]).await;
    assert_eq!(status, StatusCode::PERMANENT_REDIRECT);
    assert_eq!(headers[header::LOCATION], "/ui/");
    assert_secured("/ui", &headers);
    for missing in ["/ui/nothing.js", "/ui/js/../index.html", "/ui/js/", "/ui/index.htm"] {
        let (status, headers, body) = get(missing, &[]).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{missing}");
        assert_eq!(headers[header::CONTENT_TYPE], "application/json");
        let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert!(answer["error"].as_str().unwrap().starts_with("no such dashboard file"), "{answer}");
        assert_secured(missing, &headers);
    }
}

/// Nothing the policy would block: no inline script, style attribute, event handler attribute
/// or `javascript:` URL in the HTML, no `eval`-like call or style attribute in the modules; and
/// every file the HTML and the modules load is an embedded asset (no CDN, no missing file).
#[test]
fn the_assets_obey_the_policy_and_load_only_each_other() {
    let served: BTreeSet<&str> = ASSETS.iter().map(|a| a.path).collect();
    assert_eq!(served.len(), ASSETS.len(), "an asset is listed twice");
    for asset in ASSETS {
        let text = std::str::from_utf8(asset.body).unwrap();
        // The SVG namespace is a name, not a location: nothing is loaded from it.
        let lower = text.to_ascii_lowercase().replace("'http://www.w3.org/2000/svg'", "");
        assert!(
            !lower.contains("http://") && !lower.contains("https://") || asset.path == "favicon.svg",
            "{}: nothing from another origin",
            asset.path
        );
        if asset.path.ends_with(".html") {
            for bad in ["<style", " style=", " onclick=", " onload=", " onsubmit=", "javascript:"] {
                assert!(!lower.contains(bad), "{}: {bad}", asset.path);
            }
            for script in lower.split("<script").skip(1) {
                assert!(script.split('>').next().unwrap().contains(" src="), "{}: an inline script", asset.path);
            }
            for attr in ["src=\"", "href=\""] {
                for found in text.split(attr).skip(1) {
                    let target = found.split('"').next().unwrap();
                    if target.starts_with('#') {
                        continue;
                    }
                    assert!(served.contains(target), "{}: {attr}{target} is not an asset", asset.path);
                }
            }
        }
        if asset.path.ends_with(".js") {
            for bad in ["eval(", "new Function", "innerHTML", "setAttribute('style'", ".style."] {
                assert!(!text.contains(bad), "{}: {bad}", asset.path);
            }
            let dir = asset.path.rsplit_once('/').map_or("", |(d, _)| d);
            for found in text.split(" from '").skip(1) {
                let target = found.split('\'').next().unwrap();
                let mut parts: Vec<&str> = dir.split('/').filter(|s| !s.is_empty()).collect();
                for seg in target.split('/') {
                    match seg {
                        "." => {}
                        ".." => {
                            parts.pop();
                        }
                        s => parts.push(s),
                    }
                }
                let resolved = parts.join("/");
                assert!(served.contains(resolved.as_str()), "{}: imports {target}, not an asset", asset.path);
            }
        }
    }
}
