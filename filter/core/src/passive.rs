//! Passive health: targets judged by their real answers. Failures in a row (connect failures,
//! timeouts, 429, 5xx: [`crate::failover::Outcome::is_failure`]) park an endpoint for a
//! cooldown; a target that fails again right after its cooldown is parked again at once, for
//! twice as long (up to a cap); any success forgets it.
//!
//! The table is shared by every VM of the proxy (the filter keeps its [`PassiveTable::encode`]d
//! form in one shared-data entry, CAS-updated), so a failure seen by one worker parks the
//! endpoint for all. Only troubled endpoints have an entry, so the table is usually empty and
//! a success on a healthy endpoint writes nothing.

/// Failures in a row that park an endpoint.
pub const FAILURE_THRESHOLD: u32 = 3;
/// The first cooldown.
pub const COOLDOWN_MS: u64 = 30_000;
/// The longest cooldown, reached by doubling while failures continue.
pub const COOLDOWN_CAP_MS: u64 = 300_000;
/// Most entries kept: a bound on the shared entry's size whatever the upstreams do.
const MAX_ENTRIES: usize = 1_024;

/// One troubled endpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Entry {
    /// Provider name.
    pub provider: String,
    /// `host:port` of a pool member, or the provider's authority.
    pub endpoint: String,
    /// Failures since the last success or parking.
    pub failures: u32,
    /// Times parked since the last success (the cooldown doubles with each).
    pub strikes: u32,
    /// Unix ms until which it is parked (0: not parked).
    pub parked_until_ms: u64,
}

/// Every troubled endpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PassiveTable {
    /// The entries, in no particular order.
    pub entries: Vec<Entry>,
}

impl PassiveTable {
    /// Reads the shared form (lines `provider endpoint failures strikes parked_until_ms`);
    /// unreadable lines are skipped.
    pub fn parse(bytes: &[u8]) -> PassiveTable {
        let text = std::str::from_utf8(bytes).unwrap_or_default();
        let entries = text.lines().filter_map(parse_line).collect();
        PassiveTable { entries }
    }

    /// The shared form.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = String::new();
        for e in &self.entries {
            out.push_str(&format!(
                "{} {} {} {} {}\n",
                e.provider, e.endpoint, e.failures, e.strikes, e.parked_until_ms
            ));
        }
        out.into_bytes()
    }

    /// Until when `endpoint` of `provider` is parked (0 when it is not in the table).
    pub fn parked_until(&self, provider: &str, endpoint: &str) -> u64 {
        self.entries.iter().find(|e| e.provider == provider && e.endpoint == endpoint).map_or(0, |e| e.parked_until_ms)
    }

    /// Records one answer; true when the table changed (and must be written back).
    pub fn record(&mut self, provider: &str, endpoint: &str, failure: bool, now_ms: u64) -> bool {
        let at = self.entries.iter().position(|e| e.provider == provider && e.endpoint == endpoint);
        match (at, failure) {
            (None, false) => false,
            (Some(i), false) => {
                self.entries.swap_remove(i);
                true
            }
            (None, true) => {
                if self.entries.len() >= MAX_ENTRIES {
                    return false;
                }
                let entry = Entry { provider: provider.into(), endpoint: endpoint.into(), ..Entry::default() };
                self.entries.push(entry);
                let last = self.entries.len() - 1;
                self.entries.get_mut(last).is_some_and(|e| fail(e, now_ms))
            }
            (Some(i), true) => self.entries.get_mut(i).is_some_and(|e| fail(e, now_ms)),
        }
    }
}

/// One more failure; parks at the threshold, or at once when it was parked before and has not
/// succeeded since (the cooldown ended and the first request found it still failing).
fn fail(e: &mut Entry, now_ms: u64) -> bool {
    if now_ms < e.parked_until_ms {
        // Answers to requests sent before it was parked: already counted in.
        return true;
    }
    e.failures = e.failures.saturating_add(1);
    if e.failures >= FAILURE_THRESHOLD || e.strikes > 0 {
        let shift = e.strikes.min(16);
        e.strikes = e.strikes.saturating_add(1);
        e.failures = 0;
        e.parked_until_ms = now_ms.saturating_add(COOLDOWN_MS.saturating_mul(1 << shift).min(COOLDOWN_CAP_MS));
    }
    true
}

fn parse_line(line: &str) -> Option<Entry> {
    let mut it = line.split(' ');
    let entry = Entry {
        provider: it.next()?.to_string(),
        endpoint: it.next()?.to_string(),
        failures: it.next()?.parse().ok()?,
        strikes: it.next()?.parse().ok()?,
        parked_until_ms: it.next()?.parse().ok()?,
    };
    Some(entry)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parks_after_the_threshold_and_doubles() {
        let mut t = PassiveTable::default();
        for _ in 1..FAILURE_THRESHOLD {
            assert!(t.record("p", "h:1", true, 1_000));
            assert_eq!(t.parked_until("p", "h:1"), 0);
        }
        assert!(t.record("p", "h:1", true, 1_000));
        assert_eq!(t.parked_until("p", "h:1"), 1_000 + COOLDOWN_MS);
        // After the cooldown, one more failure parks it again, twice as long.
        let later = 1_000 + COOLDOWN_MS;
        t.record("p", "h:1", true, later);
        assert_eq!(t.parked_until("p", "h:1"), later + 2 * COOLDOWN_MS);
        for _ in 0..10 {
            let now = t.parked_until("p", "h:1");
            t.record("p", "h:1", true, now);
        }
        let now = t.parked_until("p", "h:1");
        t.record("p", "h:1", true, now);
        assert_eq!(t.parked_until("p", "h:1"), now + COOLDOWN_CAP_MS);
    }

    #[test]
    fn success_forgets_and_healthy_writes_nothing() {
        let mut t = PassiveTable::default();
        assert!(!t.record("p", "h:1", false, 0));
        t.record("p", "h:1", true, 0);
        t.record("p", "h:1", true, 0);
        assert!(t.record("p", "h:1", false, 0));
        assert!(t.entries.is_empty());
        t.record("p", "h:1", true, 0);
        t.record("p", "h:1", true, 0);
        assert_eq!(t.parked_until("p", "h:1"), 0, "the count started again");
    }

    #[test]
    fn shared_form_round_trips() {
        let mut t = PassiveTable::default();
        for _ in 0..FAILURE_THRESHOLD {
            t.record("p", "10.0.0.1:80", true, 5);
        }
        t.record("q", "[::1]:80", true, 5);
        assert_eq!(PassiveTable::parse(&t.encode()), t);
        assert_eq!(PassiveTable::parse(b"junk\n").entries, []);
    }
}
