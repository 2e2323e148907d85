//! Authorization of every admin request, in one place: the route's [`Access`] comes from the
//! operations table (`services::openapi`), the caller from `services::identity`. A handler
//! behind it finds the caller's [`Principal`] and the request's [`RequestMeta`] in the request
//! extensions; a route missing from the table under `/api/` still needs a caller (any role), so
//! an undocumented route can never be open.

use std::net::SocketAddr;
use std::sync::OnceLock;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::Admin;
use crate::services::identity::{AuditEvent, AuthError, RequestMeta, Role};
use crate::services::openapi::{self, Access, Operation};

/// The operations table, built once.
fn table() -> &'static [Operation] {
    static TABLE: OnceLock<Vec<Operation>> = OnceLock::new();
    TABLE.get_or_init(openapi::operations)
}

/// Whether the routed template `template` (`/api/v1/keys/{name}`) matches the concrete `path`.
pub fn matches(template: &str, path: &str) -> bool {
    let mut t = template.split('/');
    let mut p = path.split('/');
    loop {
        match (t.next(), p.next()) {
            (None, None) => return true,
            (Some(ts), Some(ps)) if ts.starts_with('{') && ts.ends_with('}') && !ps.is_empty() => {}
            (Some(ts), Some(ps)) if ts == ps => {}
            _ => return false,
        }
    }
}

/// The documented operation `method path` is, if any. A literal path wins over a template
/// (`/api/v1/cache/purge` over `/api/v1/{section}/{name}`).
pub fn operation(method: &Method, path: &str) -> Option<&'static Operation> {
    let method = method.as_str().to_ascii_lowercase();
    let mut found = table().iter().filter(|o| o.method == method && matches(&o.path, path));
    let first = found.next()?;
    Some(found.fold(first, |best, o| if literal_segments(&o.path) > literal_segments(&best.path) { o } else { best }))
}

fn literal_segments(template: &str) -> usize {
    template.split('/').filter(|s| !s.starts_with('{')).count()
}

/// What `method path` needs: its documented access; undocumented paths under `/api/` need any
/// authenticated caller (they answer 404 or 405 after that), others are public.
pub fn access(method: &Method, path: &str) -> Access {
    match operation(method, path) {
        Some(op) => op.access,
        None if path.starts_with("/api/") => Access::Role(Role::Viewer),
        None => Access::Public,
    }
}

/// The middleware: authenticates and authorizes, then hands the request on with its
/// [`RequestMeta`] and (for a non-public route) its `Principal` in the extensions.
pub async fn authorize(State(admin): State<Admin>, mut req: Request, next: Next) -> Response {
    let peer = req.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0);
    let meta = RequestMeta::of(req.method(), req.uri().path(), req.headers(), peer);
    let needed = access(req.method(), req.uri().path());
    req.extensions_mut().insert(meta.clone());
    let Access::Role(needed) = needed else { return next.run(req).await };
    let principal = match admin.identity.authenticate(req.headers(), req.method()).await {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    if !principal.role.covers(needed) {
        let e = AuthError::Forbidden(format!(
            "forbidden: {} {} needs the {needed} role; {} has {}",
            req.method(),
            req.uri().path(),
            principal.actor.label(),
            principal.role
        ));
        // A refused change is a security event (OWASP `authz_fail`); refused reads are not
        // recorded, or a dashboard probing what it may show would fill the log.
        if !req.method().is_safe() {
            let event = AuditEvent {
                action: "authz_fail".into(),
                object: Some(req.uri().path().to_string()),
                status: e.status().as_u16(),
                detail: Some(e.to_string()),
                ..AuditEvent::default()
            };
            admin.identity.audit(&principal, &meta, event).await;
        }
        return e.into_response();
    }
    req.extensions_mut().insert(principal);
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_match_whole_segments() {
        assert!(matches("/api/v1/keys/{name}", "/api/v1/keys/alice"));
        assert!(!matches("/api/v1/keys/{name}", "/api/v1/keys/"));
        assert!(!matches("/api/v1/keys/{name}", "/api/v1/keys/alice/x"));
        assert!(!matches("/api/v1/keys", "/api/v1/keysx"));
    }

    #[test]
    fn literal_routes_win_and_unknown_api_paths_need_a_caller() {
        let purge = operation(&Method::POST, "/api/v1/cache/purge").unwrap();
        assert_eq!(purge.path, "/api/v1/cache/purge");
        assert_eq!(access(&Method::GET, "/healthz"), Access::Public);
        assert_eq!(access(&Method::GET, "/api/v1/nothing/here/at/all"), Access::Role(Role::Viewer));
        assert_eq!(access(&Method::GET, "/elsewhere"), Access::Public);
    }
}
