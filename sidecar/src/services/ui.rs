//! The web dashboard: plain HTML, CSS and JavaScript modules under `sidecar/ui/`, embedded in
//! the binary and served by the admin listener at `/ui/` (see `docs/dashboard.md`).
//!
//! The assets are public (they hold no data: every figure they show comes from the admin API,
//! which authenticates each call), so they are outside the operations table. Every answer under
//! `/ui` carries a strict `Content-Security-Policy` (no inline script or style, nothing from
//! another origin), `X-Frame-Options: DENY`, `X-Content-Type-Options: nosniff` and
//! `Referrer-Policy: no-referrer`. Assets are revalidated at each load (`no-cache` with an
//! `ETag`), so a new binary's dashboard is used at once.

use std::sync::OnceLock;

use axum::extract::Path;
use axum::http::header::{self, HeaderMap, HeaderName, HeaderValue};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

/// The policy of every UI answer: only this origin's scripts, styles, images (and `data:`
/// images) and API; no framing, no `<base>`, forms post only here.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// One embedded file: its path under `/ui/`, content type and bytes.
struct Asset {
    path: &'static str,
    kind: &'static str,
    body: &'static [u8],
}

macro_rules! asset {
    ($path:literal, $kind:expr) => {
        Asset { path: $path, kind: $kind, body: include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/ui/", $path)) }
    };
}

const JS: &str = "text/javascript; charset=utf-8";

/// Every file of the dashboard (a file not listed here is not served).
static ASSETS: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("app.css", "text/css; charset=utf-8"),
    asset!("favicon.svg", "image/svg+xml"),
    asset!("js/app.js", JS),
    asset!("js/api.js", JS),
    asset!("js/dom.js", JS),
    asset!("js/charts.js", JS),
    asset!("js/pages/login.js", JS),
    asset!("js/pages/keys.js", JS),
    asset!("js/pages/groups.js", JS),
    asset!("js/pages/models.js", JS),
    asset!("js/pages/audit.js", JS),
    asset!("js/pages/users.js", JS),
    asset!("js/pages/tokens.js", JS),
    asset!("js/pages/overview.js", JS),
    asset!("js/pages/limits.js", JS),
    asset!("js/pages/requests.js", JS),
    asset!("js/prom.js", JS),
    asset!("js/pages/targets.js", JS),
    asset!("js/pages/pricing.js", JS),
    asset!("js/pages/problems.js", JS),
];

/// The routes of the dashboard, to merge into the admin router.
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/ui", get(|| async { secured(redirect()) }))
        .route("/ui/", get(|headers: HeaderMap| async move { secured(serve("index.html", &headers)) }))
        .route(
            "/ui/{*path}",
            get(|Path(path): Path<String>, headers: HeaderMap| async move { secured(serve(&path, &headers)) }),
        )
}

fn redirect() -> Response {
    (StatusCode::PERMANENT_REDIRECT, [(header::LOCATION, "/ui/")]).into_response()
}

/// The asset at `path` (relative to `/ui/`), 304 when the browser's copy is current, 404 when
/// there is no such asset.
fn serve(path: &str, headers: &HeaderMap) -> Response {
    let Some((i, asset)) = ASSETS.iter().enumerate().find(|(_, a)| a.path == path) else {
        let body = serde_json::json!({"error": format!("no such dashboard file: /ui/{path}")}).to_string();
        return (StatusCode::NOT_FOUND, [(header::CONTENT_TYPE, "application/json")], body).into_response();
    };
    let etag = &etags()[i];
    let cache = [(header::CACHE_CONTROL, HeaderValue::from_static("no-cache")), (header::ETAG, etag.clone())];
    let current = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag.to_str().unwrap_or_default() || t.trim() == "*"));
    if current {
        return (StatusCode::NOT_MODIFIED, cache).into_response();
    }
    (cache, [(header::CONTENT_TYPE, asset.kind)], asset.body).into_response()
}

/// The entity tag of each asset (FNV-1a of its bytes), in the order of [`ASSETS`].
fn etags() -> &'static [HeaderValue] {
    static TAGS: OnceLock<Vec<HeaderValue>> = OnceLock::new();
    TAGS.get_or_init(|| {
        ASSETS
            .iter()
            .map(|a| {
                let hash = a
                    .body
                    .iter()
                    .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3));
                HeaderValue::from_str(&format!("\"{hash:016x}\"")).expect("hex is a header value")
            })
            .collect()
    })
}

/// `answer` with the security headers every UI answer carries.
fn secured(mut answer: Response) -> Response {
    let h = answer.headers_mut();
    let set = [
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (HeaderName::from_static("cross-origin-opener-policy"), "same-origin"),
    ];
    for (name, value) in set {
        h.insert(name, HeaderValue::from_static(value));
    }
    answer
}

#[cfg(test)]
mod tests;
