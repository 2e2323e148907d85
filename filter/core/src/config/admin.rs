//! The `admin:` block: how people reach the admin API — sessions, failed-login throttling, the
//! audit log's retention and single sign-on (OIDC). Read by the sidecar at start, like
//! `store:`; the filter only checks it. Admin users, their roles and API tokens live in the
//! PostgreSQL store (the file store keeps the single bootstrap token).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::syntax;
use super::validate::Problems;

/// An admin role. Each covers the ones after it: an `owner` may do all an `admin` may, an
/// `admin` all a `key-manager` may, a `key-manager` all a `viewer` may.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Read-only, no secret field anywhere.
    Viewer,
    /// A viewer who also manages keys and groups (optionally only the groups given).
    KeyManager,
    /// Everything but admin users and other people's tokens.
    Admin,
    /// Everything.
    Owner,
}

impl Role {
    /// Every role, the narrowest first.
    pub const ALL: [Role; 4] = [Role::Viewer, Role::KeyManager, Role::Admin, Role::Owner];

    /// The role's name as written in configs and the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::KeyManager => "key-manager",
            Role::Admin => "admin",
            Role::Owner => "owner",
        }
    }

    /// The role named `s`, or an error naming the roles there are.
    pub fn parse(s: &str) -> Result<Role, String> {
        Role::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| format!("unknown role {s:?} (expected owner, admin, key-manager or viewer)"))
    }

    /// Whether this role may do what `needed` may.
    pub fn covers(self, needed: Role) -> bool {
        self >= needed
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Default idle expiry of an admin session: 30 minutes without a request.
pub const DEFAULT_IDLE_SECS: u64 = 30 * 60;
/// Default absolute expiry of an admin session: 8 hours after login.
pub const DEFAULT_ABSOLUTE_SECS: u64 = 8 * 60 * 60;
/// Default failed logins one user name may have in the window before it is locked.
pub const DEFAULT_MAX_FAILURES_PER_USER: u32 = 5;
/// Default failed logins one source address may have in the window.
pub const DEFAULT_MAX_FAILURES_PER_ADDRESS: u32 = 20;
/// Default window over which failures count, and how long a lock lasts.
pub const DEFAULT_WINDOW_SECS: u64 = 15 * 60;
/// Default days audit records are kept.
pub const DEFAULT_AUDIT_RETENTION_DAYS: u32 = 365;
/// Default shortest password (OWASP: 15 without a second factor).
pub const DEFAULT_PASSWORD_MIN_LENGTH: u32 = 15;

/// `admin:` as written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RawAdmin {
    /// Session lifetimes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions: Option<RawSessions>,
    /// Failed-login throttling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub login: Option<RawLogin>,
    /// Audit log retention.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit: Option<RawAudit>,
    /// Single sign-on with an OpenID provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oidc: Option<RawOidc>,
}

/// `admin.sessions`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RawSessions {
    /// Seconds without a request after which a session ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_secs: Option<u64>,
    /// Seconds after login after which a session ends, however busy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub absolute_secs: Option<u64>,
    /// `auto` (default: `Secure` when the request came over TLS or `X-Forwarded-Proto: https`),
    /// `always` or `never`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secure_cookie: Option<String>,
}

/// `admin.login`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RawLogin {
    /// Failed logins one user name may have in the window before further tries are refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_failures_per_user: Option<u32>,
    /// Failed logins one source address may have in the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_failures_per_address: Option<u32>,
    /// Seconds over which failures count (a lock ends when its failures leave the window).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_secs: Option<u64>,
    /// Shortest password accepted for a new or changed password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_min_length: Option<u32>,
}

/// `admin.audit`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RawAudit {
    /// Days audit records are kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_days: Option<u32>,
}

/// `admin.oidc`: login with an OpenID provider (authorization code + PKCE).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RawOidc {
    /// The issuer URL; discovery reads `<issuer>/.well-known/openid-configuration`.
    pub issuer: String,
    /// The client id registered with the provider.
    pub client_id: String,
    /// Environment variable holding the client secret (absent: a public client, PKCE only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret_env: Option<String>,
    /// The callback URL registered with the provider: `<admin base URL>/api/v1/session/oidc/callback`.
    pub redirect_uri: String,
    /// Scopes asked for besides `openid`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    /// The ID-token claim holding the user's groups or roles (default `groups`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role_claim: Option<String>,
    /// Claim value → role; a user gets the broadest role any of their values maps to, and
    /// is refused when none maps.
    #[serde(default)]
    pub role_map: BTreeMap<String, String>,
    /// Claim value → the key groups a `key-manager` from it may manage (absent: all).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub key_groups: BTreeMap<String, Vec<String>>,
    /// Where the provider sends the browser after logout (RP-initiated logout), if anywhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_logout_redirect_uri: Option<String>,
}

/// When session cookies carry `Secure`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecureCookie {
    /// When the request came over TLS (or says so in `X-Forwarded-Proto`).
    Auto,
    /// Always.
    Always,
    /// Never (plain-HTTP development).
    Never,
}

/// `admin:` validated, defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct AdminSettings {
    /// Idle expiry of a session, seconds.
    pub idle_secs: u64,
    /// Absolute expiry of a session, seconds.
    pub absolute_secs: u64,
    /// When cookies carry `Secure`.
    pub secure_cookie: SecureCookie,
    /// Failures per user name in the window before a lock.
    pub max_failures_per_user: u32,
    /// Failures per source address in the window before a lock.
    pub max_failures_per_address: u32,
    /// Failure window and lock duration, seconds.
    pub window_secs: u64,
    /// Shortest password.
    pub password_min_length: u32,
    /// Days audit records are kept.
    pub audit_retention_days: u32,
    /// Single sign-on, when configured.
    pub oidc: Option<Oidc>,
}

/// `admin.oidc` validated.
#[derive(Debug, Clone, PartialEq)]
pub struct Oidc {
    /// Issuer URL, exactly as the provider's discovery document must give it.
    pub issuer: String,
    /// Client id.
    pub client_id: String,
    /// Variable holding the client secret.
    pub client_secret_env: Option<String>,
    /// Callback URL.
    pub redirect_uri: String,
    /// Scopes, `openid` first.
    pub scopes: Vec<String>,
    /// Claim naming groups or roles.
    pub role_claim: String,
    /// Claim value → role.
    pub role_map: BTreeMap<String, Role>,
    /// Claim value → key groups of a key-manager.
    pub key_groups: BTreeMap<String, Vec<String>>,
    /// Post-logout redirect.
    pub post_logout_redirect_uri: Option<String>,
}

impl Default for AdminSettings {
    fn default() -> Self {
        AdminSettings {
            idle_secs: DEFAULT_IDLE_SECS,
            absolute_secs: DEFAULT_ABSOLUTE_SECS,
            secure_cookie: SecureCookie::Auto,
            max_failures_per_user: DEFAULT_MAX_FAILURES_PER_USER,
            max_failures_per_address: DEFAULT_MAX_FAILURES_PER_ADDRESS,
            window_secs: DEFAULT_WINDOW_SECS,
            password_min_length: DEFAULT_PASSWORD_MIN_LENGTH,
            audit_retention_days: DEFAULT_AUDIT_RETENTION_DAYS,
            oidc: None,
        }
    }
}

/// Checks `admin:` and applies defaults; problems are reported at their paths.
pub(super) fn validate(raw: Option<&RawAdmin>, p: &mut Problems) -> AdminSettings {
    let mut s = AdminSettings::default();
    let Some(raw) = raw else { return s };
    if let Some(sessions) = &raw.sessions {
        s.idle_secs = positive(p, "admin.sessions.idle_secs", sessions.idle_secs, s.idle_secs);
        s.absolute_secs = positive(p, "admin.sessions.absolute_secs", sessions.absolute_secs, s.absolute_secs);
        if s.idle_secs > s.absolute_secs {
            p.add("admin.sessions.idle_secs", "is longer than absolute_secs");
        }
        s.secure_cookie = match sessions.secure_cookie.as_deref() {
            None | Some("auto") => SecureCookie::Auto,
            Some("always") => SecureCookie::Always,
            Some("never") => SecureCookie::Never,
            Some(other) => {
                p.add(
                    "admin.sessions.secure_cookie",
                    format!("unknown value {other:?} (expected auto, always or never)"),
                );
                SecureCookie::Auto
            }
        };
    }
    if let Some(login) = &raw.login {
        let user = login.max_failures_per_user.map(u64::from);
        let address = login.max_failures_per_address.map(u64::from);
        let per_user = positive(p, "admin.login.max_failures_per_user", user, s.max_failures_per_user.into());
        let per_address =
            positive(p, "admin.login.max_failures_per_address", address, s.max_failures_per_address.into());
        s.max_failures_per_user = u32::try_from(per_user).unwrap_or(u32::MAX);
        s.max_failures_per_address = u32::try_from(per_address).unwrap_or(u32::MAX);
        s.window_secs = positive(p, "admin.login.window_secs", login.window_secs, s.window_secs);
        if let Some(n) = login.password_min_length {
            if !(8..=128).contains(&n) {
                p.add("admin.login.password_min_length", "must be between 8 and 128");
            } else {
                s.password_min_length = n;
            }
        }
    }
    if let Some(days) = raw.audit.as_ref().and_then(|a| a.retention_days) {
        s.audit_retention_days = u32::try_from(positive(p, "admin.audit.retention_days", Some(days.into()), 1))
            .unwrap_or(DEFAULT_AUDIT_RETENTION_DAYS);
    }
    s.oidc = raw.oidc.as_ref().map(|o| oidc(o, p));
    s
}

/// `v` when it is at least 1, else `default` and a problem at `path`.
fn positive(p: &mut Problems, path: &str, v: Option<u64>, default: u64) -> u64 {
    match v {
        None => default,
        Some(0) => {
            p.add(path, "must be at least 1");
            default
        }
        Some(v) => v,
    }
}

fn oidc(raw: &RawOidc, p: &mut Problems) -> Oidc {
    p.check("admin.oidc.issuer", syntax::parse_base_url(&raw.issuer));
    p.check("admin.oidc.redirect_uri", syntax::parse_base_url(&raw.redirect_uri));
    if let Some(uri) = &raw.post_logout_redirect_uri {
        p.check("admin.oidc.post_logout_redirect_uri", syntax::parse_base_url(uri));
    }
    if raw.client_id.is_empty() {
        p.add("admin.oidc.client_id", "must not be empty");
    }
    if let Some(var) = &raw.client_secret_env {
        p.check("admin.oidc.client_secret_env", syntax::check_env_name(var));
    }
    if raw.role_map.is_empty() {
        p.add("admin.oidc.role_map", "must map at least one claim value to a role (nobody could log in)");
    }
    let mut role_map = BTreeMap::new();
    for (value, role) in &raw.role_map {
        if let Some(role) = p.check(format!("admin.oidc.role_map.{value}"), Role::parse(role)) {
            role_map.insert(value.clone(), role);
        }
    }
    for (value, groups) in &raw.key_groups {
        for (i, g) in groups.iter().enumerate() {
            p.check(format!("admin.oidc.key_groups.{value}[{i}]"), syntax::check_slug(g));
        }
    }
    let mut scopes = vec!["openid".to_string()];
    scopes.extend(raw.scopes.iter().filter(|s| s.as_str() != "openid").cloned());
    Oidc {
        issuer: raw.issuer.clone(),
        client_id: raw.client_id.clone(),
        client_secret_env: raw.client_secret_env.clone(),
        redirect_uri: raw.redirect_uri.clone(),
        scopes,
        role_claim: raw.role_claim.clone().unwrap_or_else(|| "groups".to_string()),
        role_map,
        key_groups: raw.key_groups.clone(),
        post_logout_redirect_uri: raw.post_logout_redirect_uri.clone(),
    }
}

/// `admin:` of a whole document, checked on its own (the sidecar reads it at start).
///
/// # Errors
/// The problems, with their paths.
pub fn settings(raw: Option<&RawAdmin>) -> Result<AdminSettings, Vec<super::Problem>> {
    let mut p = Problems(Vec::new());
    let s = validate(raw, &mut p);
    if p.0.is_empty() {
        Ok(s)
    } else {
        Err(p.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_are_ordered_and_named() {
        assert!(Role::Owner.covers(Role::Viewer));
        assert!(Role::KeyManager.covers(Role::Viewer));
        assert!(!Role::KeyManager.covers(Role::Admin));
        assert_eq!(Role::parse("key-manager"), Ok(Role::KeyManager));
        assert!(Role::parse("root").unwrap_err().contains("owner, admin, key-manager or viewer"));
        assert_eq!(serde_json::to_string(&Role::KeyManager).unwrap(), "\"key-manager\"");
    }

    #[test]
    fn defaults_and_problems() {
        assert_eq!(settings(None), Ok(AdminSettings::default()));
        let raw: RawAdmin = serde_json::from_str(
            r#"{"sessions":{"idle_secs":0,"secure_cookie":"sometimes"},
                "oidc":{"issuer":"http://op:9400","client_id":"c","redirect_uri":"http://gw/cb",
                        "role_map":{"ops":"root","team":"key-manager"},"key_groups":{"team":["Team A"]}}}"#,
        )
        .unwrap();
        let problems = settings(Some(&raw)).unwrap_err();
        let paths: Vec<&str> = problems.iter().map(|p| p.path.as_str()).collect();
        assert!(paths.contains(&"admin.sessions.idle_secs"), "{paths:?}");
        assert!(paths.contains(&"admin.sessions.secure_cookie"), "{paths:?}");
        assert!(paths.contains(&"admin.oidc.role_map.ops"), "{paths:?}");
        assert!(paths.contains(&"admin.oidc.key_groups.team[0]"), "{paths:?}");
        let err = serde_json::from_str::<RawAdmin>(r#"{"sesions":{}}"#).unwrap_err().to_string();
        assert!(err.contains("sesions"), "{err}");
    }
}
