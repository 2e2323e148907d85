//! Egress policy: which upstream addresses the gateway may connect to (rules against
//! server-side request forgery through the configuration).
//!
//! Every upstream URL the configuration names (providers, pool endpoints, MCP servers and their
//! OAuth token endpoints, A2A agents) is checked with [`Policy::check_host`] when the
//! configuration is validated; the proxy checks the addresses a name resolves to with
//! [`Policy::check_ip`] when it connects, since a name that passed can resolve anywhere.
//!
//! Hosts are read the way a browser (the WHATWG URL standard) and `getaddrinfo`/`inet_aton`
//! read them, so an address cannot slip past in another spelling: `0x7f.1`, `0177.0.0.1`,
//! `127.1` and `2130706433` are all 127.0.0.1, and `[::ffff:169.254.169.254]` is the cloud
//! metadata address. A host whose last label is a number but which is not a valid IPv4
//! address (`1.2.3.4.5`, `1.256.0.0`, `tools.8`) is refused rather than guessed at, as
//! browsers refuse it.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// What the gateway may connect to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Refuse 169.254.0.0/16 and fe80::/10 (and AWS's IPv6 metadata address, fd00:ec2::254):
    /// where cloud metadata services answer, with the instance's credentials. On by default.
    pub block_link_local: bool,
    /// Refuse 127.0.0.0/8, ::1, and 0.0.0.0/8 and `::` (which reach the local host too).
    pub block_loopback: bool,
    /// Refuse private and shared ranges: 10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7.
    pub block_private: bool,
    /// Host names (exact, or `*.suffix` for any name below the suffix) and IP literals the
    /// configuration may name; empty: any.
    pub allow_hosts: Vec<String>,
}

impl Default for Policy {
    fn default() -> Self {
        Policy { block_link_local: true, block_loopback: false, block_private: false, allow_hosts: Vec::new() }
    }
}

/// A range of addresses a policy can block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Link-local and cloud metadata addresses.
    LinkLocal,
    /// The local host.
    Loopback,
    /// Private and shared (carrier-grade NAT) ranges.
    Private,
}

impl Rule {
    /// The policy field that blocks it.
    pub fn field(self) -> &'static str {
        match self {
            Rule::LinkLocal => "block_link_local",
            Rule::Loopback => "block_loopback",
            Rule::Private => "block_private",
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "egress.{}", self.field())
    }
}

/// Why a host or an address may not be connected to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EgressError {
    /// The address is in a range the policy blocks.
    #[error("host {} is blocked by {rule}", shown(.host, .addr))]
    Blocked {
        /// The host as written (or the address itself).
        host: String,
        /// The address it stands for.
        addr: IpAddr,
        /// The rule that blocks it.
        rule: Rule,
    },
    /// `allow_hosts` is set and does not name the host.
    #[error("host {host} is not in egress.allow_hosts")]
    NotAllowed {
        /// The host as written.
        host: String,
    },
    /// The host reads as an IP address (its last label is a number) but is not a valid one.
    #[error("host {host:?} is not a valid IP address ({reason})")]
    InvalidAddress {
        /// The host as written.
        host: String,
        /// What is wrong with it.
        reason: &'static str,
    },
}

/// `host`, with the address it stands for when it is spelt otherwise (`0x7f.1 (127.0.0.1)`).
fn shown(host: &str, addr: &IpAddr) -> String {
    let plain = addr.to_string();
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if bare.eq_ignore_ascii_case(&plain) {
        host.to_string()
    } else {
        format!("{host} ({plain})")
    }
}

impl Policy {
    /// Checks a host the configuration names: an IP literal (in any spelling) against the
    /// blocked ranges, and every host against `allow_hosts` when that is set.
    ///
    /// # Errors
    /// The rule the host breaks.
    pub fn check_host(&self, host: &str) -> Result<(), EgressError> {
        match parse_ip(host)? {
            Some(addr) => {
                self.check_addr(host, addr)?;
                if self.allow_hosts.is_empty() || self.allow_hosts.iter().any(|a| parse_ip(a) == Ok(Some(addr))) {
                    return Ok(());
                }
            }
            None => {
                let name = normalise(host);
                if self.allow_hosts.is_empty() || self.allow_hosts.iter().any(|a| name_matches(&name, a)) {
                    return Ok(());
                }
            }
        }
        Err(EgressError::NotAllowed { host: host.to_string() })
    }

    /// Checks an address about to be connected to (what a name resolved to) against the
    /// blocked ranges.
    ///
    /// # Errors
    /// [`EgressError::Blocked`] naming the rule.
    pub fn check_ip(&self, addr: IpAddr) -> Result<(), EgressError> {
        self.check_addr(&addr.to_string(), addr)
    }

    /// Whether the policy blocks any range at all (a proxy can skip its checks otherwise).
    pub fn blocks_any(&self) -> bool {
        self.block_link_local || self.block_loopback || self.block_private
    }

    fn check_addr(&self, host: &str, addr: IpAddr) -> Result<(), EgressError> {
        let blocked = match classify(addr) {
            Some(Rule::LinkLocal) => self.block_link_local,
            Some(Rule::Loopback) => self.block_loopback,
            Some(Rule::Private) => self.block_private,
            None => false,
        };
        match classify(addr).filter(|_| blocked) {
            Some(rule) => Err(EgressError::Blocked { host: host.to_string(), addr, rule }),
            None => Ok(()),
        }
    }
}

/// Lower case, without the trailing dot of a fully qualified name.
fn normalise(host: &str) -> String {
    let host = host.strip_suffix('.').unwrap_or(host);
    host.to_ascii_lowercase()
}

/// Whether `name` is `entry` (`*.suffix`: any name below the suffix, not the suffix itself).
fn name_matches(name: &str, entry: &str) -> bool {
    let entry = normalise(entry);
    match entry.strip_prefix('*') {
        Some(suffix) if suffix.starts_with('.') => name.len() > suffix.len() && name.ends_with(suffix),
        _ => name == entry,
    }
}

/// The address `host` stands for: `Some` for an IP literal in any spelling browsers and
/// `getaddrinfo` accept (IPv6 in brackets or bare, with an optional `%zone`), `None` for a
/// name.
///
/// # Errors
/// A host that reads as an address (bracketed, or its last label a number) but is not one.
pub fn parse_ip(host: &str) -> Result<Option<IpAddr>, EgressError> {
    let invalid = |reason| EgressError::InvalidAddress { host: host.to_string(), reason };
    if let Some(inner) = host.strip_prefix('[') {
        let inner = inner.strip_suffix(']').ok_or_else(|| invalid("unterminated IPv6 literal"))?;
        return parse_v6(inner).map(|a| Some(IpAddr::V6(a))).ok_or_else(|| invalid("not an IPv6 address"));
    }
    if host.contains(':') {
        return parse_v6(host).map(|a| Some(IpAddr::V6(a))).ok_or_else(|| invalid("not an IPv6 address"));
    }
    parse_v4(host).map(|a| a.map(IpAddr::V4)).map_err(invalid)
}

/// An IPv6 address, without its `%zone`.
fn parse_v6(s: &str) -> Option<Ipv6Addr> {
    let addr = s.split_once('%').map_or(s, |(a, _)| a);
    addr.parse().ok()
}

/// The WHATWG URL IPv4 parser: `Ok(None)` when the host does not end in a number (a name),
/// else one to four parts, each decimal, octal (leading `0`) or hex (`0x`), the last filling
/// the bytes the others leave.
fn parse_v4(host: &str) -> Result<Option<Ipv4Addr>, &'static str> {
    let trimmed = match host.strip_suffix('.') {
        Some(rest) if !rest.is_empty() => rest,
        _ => host,
    };
    let last = trimmed.rsplit('.').next().unwrap_or_default();
    if !ends_in_number(last) {
        return Ok(None);
    }
    let parts: Vec<&str> = trimmed.split('.').collect();
    if parts.len() > 4 {
        return Err("more than four parts");
    }
    let mut numbers = Vec::with_capacity(parts.len());
    for part in &parts {
        numbers.push(number(part).ok_or("a part is not a number")?);
    }
    let (last, init) = numbers.split_last().ok_or("empty")?;
    if init.iter().any(|&n| n > 255) {
        return Err("a part is over 255");
    }
    // The last part fills the bytes the others leave: 4 with one part, 1 with four.
    let room = 8 * (5 - numbers.len() as u32);
    if *last >> room != 0 {
        return Err("the last part is too large");
    }
    let mut addr = *last;
    for (i, n) in init.iter().enumerate() {
        addr |= n << (8 * (3 - i as u32));
    }
    Ok(Some(Ipv4Addr::from(u32::try_from(addr).map_err(|_| "out of range")?)))
}

/// WHATWG's "ends in a number": all decimal digits, or a valid `0x` hex number.
fn ends_in_number(last: &str) -> bool {
    if !last.is_empty() && last.bytes().all(|b| b.is_ascii_digit()) {
        return true;
    }
    let hex = last.strip_prefix("0x").or_else(|| last.strip_prefix("0X"));
    hex.is_some_and(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// One IPv4 part: `0x` hex (`0x` alone is 0), leading-`0` octal, else decimal; `None` when it
/// is empty, has a digit its base lacks, or overflows.
fn number(part: &str) -> Option<u64> {
    let (digits, radix) = if let Some(h) = part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
        (h, 16)
    } else if let Some(octal) = part.strip_prefix('0').filter(|rest| !rest.is_empty()) {
        (octal, 8)
    } else {
        (part, 10)
    };
    if digits.is_empty() {
        return (radix != 10).then_some(0);
    }
    digits.bytes().try_fold(0u64, |acc, b| {
        let d = char::from(b).to_digit(radix)?;
        acc.checked_mul(u64::from(radix))?.checked_add(u64::from(d)).filter(|&n| n <= u64::from(u32::MAX))
    })
}

/// The blockable range `addr` falls in, if any. IPv6 forms that carry an IPv4 address
/// (mapped `::ffff:a.b.c.d`, compatible `::a.b.c.d`, NAT64 `64:ff9b::a.b.c.d`) are judged by
/// that address: they reach it.
pub fn classify(addr: IpAddr) -> Option<Rule> {
    match addr {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => match embedded_v4(v6) {
            Some(v4) => classify_v4(v4),
            None => classify_v6(v6),
        },
    }
}

fn classify_v4(a: Ipv4Addr) -> Option<Rule> {
    let [x, y, _, _] = a.octets();
    match (x, y) {
        (169, 254) => Some(Rule::LinkLocal),
        (127, _) | (0, _) => Some(Rule::Loopback),
        (10, _) | (192, 168) => Some(Rule::Private),
        (172, 16..=31) | (100, 64..=127) => Some(Rule::Private),
        _ => None,
    }
}

/// AWS's instance metadata service over IPv6 (it sits in the private range fc00::/7).
const AWS_METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254);

fn classify_v6(a: Ipv6Addr) -> Option<Rule> {
    let first = a.segments()[0];
    if first & 0xffc0 == 0xfe80 || a == AWS_METADATA_V6 {
        Some(Rule::LinkLocal)
    } else if a.is_loopback() || a.is_unspecified() {
        Some(Rule::Loopback)
    } else if first & 0xfe00 == 0xfc00 {
        Some(Rule::Private)
    } else {
        None
    }
}

/// The IPv4 address an IPv6 address carries and reaches: IPv4-mapped, IPv4-compatible (not
/// `::` or `::1`) or the NAT64 well-known prefix 64:ff9b::/96.
fn embedded_v4(a: Ipv6Addr) -> Option<Ipv4Addr> {
    if let Some(v4) = a.to_ipv4_mapped() {
        return Some(v4);
    }
    let s = a.segments();
    let tail = Ipv4Addr::from((u32::from(s[6]) << 16) | u32::from(s[7]));
    let compatible = s[..6].iter().all(|&x| x == 0) && !a.is_loopback() && !a.is_unspecified();
    let nat64 = s[..6] == [0x64, 0xff9b, 0, 0, 0, 0];
    (compatible || nat64).then_some(tail)
}

#[cfg(test)]
#[path = "egress_tests.rs"]
mod tests;
