//! Hand-written checks for the small string grammars in the config (slugs, URLs, `host:port`,
//! digests, timestamps). Written by hand rather than with `regex`/`url` to keep the filter wasm
//! small; each returns a human-readable reason that the validator attaches to a path.

/// URL scheme of a provider's `base_url`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// Plain HTTP (default port 80).
    Http,
    /// HTTP over TLS (default port 443).
    Https,
}

impl Scheme {
    /// The port implied when a URL names none.
    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }

    /// `http` or `https`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

/// A parsed `base_url`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseUrl {
    /// `http` or `https`.
    pub scheme: Scheme,
    /// Lower-cased host; IPv6 literals keep their brackets.
    pub host: String,
    /// Explicit port, or the scheme's default.
    pub port: u16,
    /// Path prefix without trailing slash (`""` when none), prepended to every API path.
    pub path_prefix: String,
}

impl BaseUrl {
    /// `host` or `host:port` when the port is not the scheme's default (the `:authority` to send).
    pub fn authority(&self) -> String {
        if self.port == self.scheme.default_port() {
            self.host.clone()
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// [`check_slug`]'s rule as a JSON Schema `pattern` (ECMA-262, also valid for Rust's `regex`
/// and Python's `re`), for the admin API's OpenAPI document.
pub const SLUG_PATTERN: &str = "^[a-z0-9][a-z0-9-]{0,62}$";

/// The characters [`check_public_name`] accepts, as a regex character class: anything but
/// `/ \ ? # %` (they would change the `/api/v1/models/{name}` or Gemini path the name lands
/// in), Unicode whitespace (`char::is_whitespace`) and control characters (`char::is_control`),
/// spelled out rather than written `\s` because regex dialects disagree on what `\s` covers.
macro_rules! public_name_class {
    (with_dot) => {
        r"[^/\\?#%\x00-\x20\x7f-\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
    };
    (no_dot) => {
        r"[^/\\?#%.\x00-\x20\x7f-\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
    };
}

/// [`check_public_name`]'s rule as a JSON Schema `pattern`. Without look-ahead (not every
/// dialect has it), "not `.` or `..`" becomes three branches: a first character that is not a
/// dot, a second one that is not, or three characters at least. Lengths count characters where
/// the validator counts bytes, so the pattern is looser than the check for non-ASCII names,
/// never stricter.
pub const PUBLIC_NAME_PATTERN: &str = concat!(
    "^(?:",
    public_name_class!(no_dot),
    public_name_class!(with_dot),
    "{0,127}|",
    public_name_class!(with_dot),
    public_name_class!(no_dot),
    public_name_class!(with_dot),
    "{0,126}|",
    public_name_class!(with_dot),
    "{3,128})$"
);

/// Longest public model or alias name, in bytes.
pub const MAX_PUBLIC_NAME_BYTES: usize = 128;

/// Checks a name against `^[a-z0-9][a-z0-9-]{0,62}$`: providers, keys, groups, guardrails,
/// MCP servers and A2A agents. Their names go into URL paths, logs and metric labels as they
/// are, so they are kept to what needs no escaping anywhere.
pub fn check_slug(s: &str) -> Result<(), String> {
    let ok_len = !s.is_empty() && s.len() <= 63;
    let mut bytes = s.bytes();
    let ok_first = bytes.next().is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    let ok_rest = bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok_len && ok_first && ok_rest {
        Ok(())
    } else {
        Err(format!("{s:?} is not a slug (^[a-z0-9][a-z0-9-]{{0,62}}$)"))
    }
}

/// Checks a public model or alias name: 1 to 128 bytes, not `.` or `..`, no whitespace or
/// control character and none of `/ \ ? # %`. The name is a path segment of
/// `/api/v1/models/{name}` and of Gemini's `/v1beta/models/{model}:generateContent`, so these
/// would change the path it lands in; `:` and `.` stay allowed (`llama3:8b`, `claude-3.5`).
pub fn check_public_name(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err("must not be empty".into());
    }
    if s.len() > MAX_PUBLIC_NAME_BYTES {
        return Err(format!("is {} bytes long (at most {MAX_PUBLIC_NAME_BYTES})", s.len()));
    }
    if s.contains('/') {
        return Err(format!("{s:?} must not contain '/' (reserved for provider/model)"));
    }
    if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("{s:?} must not contain whitespace or control characters"));
    }
    if s.contains(['\\', '?', '#', '%']) {
        return Err(format!("{s:?} must not contain '\\', '?', '#' or '%' (it is a URL path segment)"));
    }
    if s == "." || s == ".." {
        return Err(format!("{s:?} is not a name (a '.' or '..' path segment)"));
    }
    Ok(())
}

/// Checks an environment variable name (`[A-Za-z_][A-Za-z0-9_]*`).
pub fn check_env_name(s: &str) -> Result<(), String> {
    let mut bytes = s.bytes();
    let first = bytes.next().is_some_and(|b| b.is_ascii_alphabetic() || b == b'_');
    if first && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        Ok(())
    } else {
        Err(format!("{s:?} is not an environment variable name"))
    }
}

/// [`check_digest`]'s rule as a JSON Schema `pattern`.
pub const DIGEST_PATTERN: &str = "^sha256:[0-9a-f]{64}$";

/// Checks a key digest: `sha256:` followed by 64 lower-case hex digits.
pub fn check_digest(s: &str) -> Result<(), String> {
    let hex = s.strip_prefix("sha256:").unwrap_or("");
    if hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        Ok(())
    } else {
        Err(format!("{s:?} is not \"sha256:\" followed by 64 lower-case hex digits"))
    }
}

/// Parses `scheme://host[:port][/prefix]` (no user info, query or fragment).
pub fn parse_base_url(s: &str) -> Result<BaseUrl, String> {
    let (scheme, rest) = if let Some(r) = s.strip_prefix("https://") {
        (Scheme::Https, r)
    } else if let Some(r) = s.strip_prefix("http://") {
        (Scheme::Http, r)
    } else {
        return Err(format!("{s:?} must start with http:// or https://"));
    };
    if rest.contains(['?', '#', '@']) {
        return Err(format!("{s:?} must not contain user info, a query or a fragment"));
    }
    let (hostport, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let (host, port) = split_host_port(hostport)?;
    let port = port.unwrap_or(scheme.default_port());
    let path_prefix = path.trim_end_matches('/').to_string();
    if path_prefix.contains("//") || path_prefix.contains(|c: char| c.is_whitespace()) {
        return Err(format!("{s:?} has an invalid path prefix"));
    }
    Ok(BaseUrl { scheme, host, port, path_prefix })
}

/// Parses an endpoint `host:port` (port required) and returns it normalised (lower-case host).
pub fn parse_endpoint(s: &str) -> Result<String, String> {
    match split_host_port(s)? {
        (host, Some(port)) => Ok(format!("{host}:{port}")),
        (_, None) => Err(format!("{s:?} must be host:port")),
    }
}

/// The host (an IPv6 literal keeps its brackets) and the port digits of an endpoint written
/// `host:port`, as [`parse_endpoint`] accepted it; `None` when there is no numeric port. The
/// one place the KV sockets, the LMCache occupancy URL, the DNS resolver and the LMCache
/// controller take an endpoint apart.
pub fn endpoint_parts(endpoint: &str) -> Option<(&str, &str)> {
    let (host, port) = endpoint.rsplit_once(':')?;
    // An IPv6 host is bracketed; any other holds no colon.
    let host_ok =
        if host.starts_with('[') { host.ends_with(']') } else { !host.is_empty() && !host.contains([':', ']']) };
    (host_ok && !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit())).then_some((host, port))
}

/// Splits `host[:port]`, accepting `[v6]:port`; the host is validated and lower-cased.
fn split_host_port(s: &str) -> Result<(String, Option<u16>), String> {
    let (host, port) = if s.starts_with('[') {
        let end = s.find(']').ok_or_else(|| format!("{s:?}: unterminated IPv6 literal"))?;
        let (h, p) = s.split_at(end + 1);
        let inner = &h[1..h.len() - 1];
        if inner.is_empty() || !inner.bytes().all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.') {
            return Err(format!("{s:?}: invalid IPv6 literal"));
        }
        match p.strip_prefix(':') {
            Some(port) => (h, Some(port)),
            None if p.is_empty() => (h, None),
            None => return Err(format!("{s:?}: unexpected text after IPv6 literal")),
        }
    } else {
        match s.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        }
    };
    let valid_host = |b: u8| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_';
    if !host.starts_with('[') && (host.is_empty() || !host.bytes().all(valid_host)) {
        return Err(format!("{s:?}: invalid host"));
    }
    let port = match port {
        None => None,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => Some(n),
            _ => return Err(format!("{s:?}: invalid port {p:?}")),
        },
    };
    Ok((host.to_ascii_lowercase(), port))
}

/// Parses an `endpoints_inference_pool` reference, `name` or `namespace/name`: the namespace
/// (when given) and the pool's name, as Kubernetes names them (a namespace is a DNS label, a
/// pool's name a DNS subdomain), so a typo fails here rather than as a pool never found.
pub fn parse_pool_ref(s: &str) -> Result<(Option<&str>, &str), String> {
    let (namespace, name) = match s.split_once('/') {
        Some((ns, name)) => (Some(ns), name),
        None => (None, s),
    };
    if let Some(ns) = namespace.filter(|ns| !is_dns_label(ns)) {
        return Err(format!(
            "{s:?}: namespace {ns:?} is not a DNS label (lower-case letters, digits, '-'; 63 at most)"
        ));
    }
    if name.len() > 253 || !name.split('.').all(is_dns_label) {
        return Err(format!("{s:?}: {name:?} is not a Kubernetes object name (a DNS subdomain)"));
    }
    Ok((namespace, name))
}

/// An RFC 1123 label: 1–63 lower-case letters, digits and '-', starting and ending with a
/// letter or digit.
fn is_dns_label(s: &str) -> bool {
    let edge = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    s.len() <= 63
        && edge(s.as_bytes().first())
        && edge(s.as_bytes().last())
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// Parses an RFC 3339 timestamp (`2026-01-31T12:00:00Z`, optional fraction and `±HH:MM`
/// offset) into Unix seconds. The fraction is dropped: expiry has second resolution.
pub fn parse_rfc3339(s: &str) -> Result<i64, String> {
    let bad = || format!("{s:?} is not an RFC 3339 timestamp like 2026-01-31T00:00:00Z");
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return Err(bad());
    }
    if b[13] != b':' || b[16] != b':' {
        return Err(bad());
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = s.get(r)?;
        t.bytes().all(|c| c.is_ascii_digit()).then(|| t.parse().ok())?
    };
    let (y, mo, d) = (num(0..4), num(5..7), num(8..10));
    let (h, mi, se) = (num(11..13), num(14..16), num(17..19));
    let (Some(y), Some(mo), Some(d), Some(h), Some(mi), Some(se)) = (y, mo, d, h, mi, se) else {
        return Err(bad());
    };
    if !(1..=12).contains(&mo) || d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59 || se > 60 {
        return Err(bad());
    }
    let mut rest = &s[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad());
        }
        rest = &frac[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ => parse_offset(rest).ok_or_else(bad)?,
    };
    Ok(days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + se - offset)
}

/// `+HH:MM` / `-HH:MM` → seconds east of UTC.
fn parse_offset(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() != 6 || b[3] != b':' || !matches!(b[0], b'+' | b'-') {
        return None;
    }
    let h: i64 = s.get(1..3)?.parse().ok()?;
    let m: i64 = s.get(4..6)?.parse().ok()?;
    if h > 23 || m > 59 {
        return None;
    }
    let secs = h * 3600 + m * 60;
    Some(if b[0] == b'-' { -secs } else { secs })
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
#[path = "syntax_tests.rs"]
mod tests;
