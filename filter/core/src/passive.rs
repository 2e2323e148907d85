//! Passive health: targets judged by their real answers. Failures in a row (connect failures,
//! timeouts, 429, 5xx: [`crate::failover::Outcome::is_failure`]) park an endpoint for a
//! cooldown; a target that fails again right after its cooldown is parked again at once, for
//! twice as long (up to a cap); a success forgets it.
//!
//! A 429 or 503 whose `Retry-After` gives a delay in seconds parks its endpoint at once, until
//! then (up to the same cap): the upstream said when it will take work again, so there is
//! nothing to count. Answers arriving while an endpoint is parked were requested before it was
//! (parked endpoints are not picked), so they neither count nor lift the parking.
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

/// How long an answer asks its endpoint to be left alone: the `Retry-After` delay-seconds of a
/// 429 or 503, capped at [`COOLDOWN_CAP_MS`]. `None` without one, for a zero delay (retry at
/// once), an HTTP-date (no clock here) and any other status.
pub fn requested_pause_ms(status: u16, retry_after: Option<&[u8]>) -> Option<u64> {
    if status != 429 && status != 503 {
        return None;
    }
    let ms = crate::failover::retry_after_ms(retry_after?)?;
    (ms > 0).then(|| ms.min(COOLDOWN_CAP_MS))
}

/// Whether an answer can change a table with no entries (a failure, or a requested pause):
/// a success only ever clears its endpoint's entry, so with none there is nothing to do — and
/// nothing to read. [`PassiveTable::record_answer`] on an empty table changes it exactly then.
pub fn answer_changes_empty_table(status: u16, retry_after: Option<&[u8]>) -> bool {
    requested_pause_ms(status, retry_after).is_some() || crate::failover::Outcome::Status(status).is_failure()
}

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

    /// Records one answer's head: a 429/503 with `Retry-After` parks its endpoint for that long
    /// ([`requested_pause_ms`]), anything else counts as [`PassiveTable::record`] says. True when
    /// the table changed (and must be written back).
    pub fn record_answer(
        &mut self,
        provider: &str,
        endpoint: &str,
        status: u16,
        retry_after: Option<&[u8]>,
        now_ms: u64,
    ) -> bool {
        match requested_pause_ms(status, retry_after) {
            Some(pause_ms) => self.park_for(provider, endpoint, pause_ms, now_ms),
            None => {
                let failure = crate::failover::Outcome::Status(status).is_failure();
                self.record(provider, endpoint, failure, now_ms)
            }
        }
    }

    /// Records one answer; true when the table changed (and must be written back).
    pub fn record(&mut self, provider: &str, endpoint: &str, failure: bool, now_ms: u64) -> bool {
        let at = self.position(provider, endpoint);
        match (at, failure) {
            (None, false) => false,
            (Some(i), false) => {
                if self.entries.get(i).is_some_and(|e| now_ms < e.parked_until_ms) {
                    // Requested before the parking: says nothing about the endpoint now.
                    return false;
                }
                self.entries.swap_remove(i);
                true
            }
            (None, true) => self.insert(provider, endpoint).is_some_and(|e| fail(e, now_ms)),
            (Some(i), true) => self.entries.get_mut(i).is_some_and(|e| fail(e, now_ms)),
        }
    }

    /// Parks `endpoint` of `provider` at once until `now_ms + pause_ms` (at most
    /// [`COOLDOWN_CAP_MS`] ahead), unless it is already parked longer. Failures counted so far
    /// are dropped, as at any parking; the strikes that double the counted cooldown are kept
    /// (the upstream asked for a pause, it did not fail again). True when the table changed.
    pub fn park_for(&mut self, provider: &str, endpoint: &str, pause_ms: u64, now_ms: u64) -> bool {
        let until = now_ms.saturating_add(pause_ms.min(COOLDOWN_CAP_MS));
        let entry = match self.position(provider, endpoint) {
            Some(i) => self.entries.get_mut(i),
            None => self.insert(provider, endpoint),
        };
        match entry {
            Some(e) if until > e.parked_until_ms => {
                e.parked_until_ms = until;
                e.failures = 0;
                true
            }
            _ => false,
        }
    }

    fn position(&self, provider: &str, endpoint: &str) -> Option<usize> {
        self.entries.iter().position(|e| e.provider == provider && e.endpoint == endpoint)
    }

    /// A new, clean entry; `None` when the table is full.
    fn insert(&mut self, provider: &str, endpoint: &str) -> Option<&mut Entry> {
        if self.entries.len() >= MAX_ENTRIES {
            return None;
        }
        self.entries.push(Entry { provider: provider.into(), endpoint: endpoint.into(), ..Entry::default() });
        self.entries.last_mut()
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
    fn the_empty_table_shortcut_agrees_with_record_answer() {
        for status in [200, 201, 400, 404, 408, 429, 500, 502, 503, 504] {
            for retry_after in [None, Some(&b"20"[..]), Some(b"0"), Some(b"soon")] {
                let changed = PassiveTable::default().record_answer("p", "h:1", status, retry_after, 1_000);
                assert_eq!(answer_changes_empty_table(status, retry_after), changed, "{status} {retry_after:?}");
            }
        }
    }

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
    fn retry_after_parks_at_once_for_its_delay() {
        let mut t = PassiveTable::default();
        assert!(t.record_answer("p", "h:1", 429, Some(b"20"), 1_000));
        assert_eq!(t.parked_until("p", "h:1"), 21_000, "one answer is enough");
        assert!(t.record_answer("p", "h:2", 503, Some(b" 7 "), 1_000));
        assert_eq!(t.parked_until("p", "h:2"), 8_000);
        assert!(t.record_answer("p", "h:3", 429, Some(b"86400"), 1_000));
        assert_eq!(t.parked_until("p", "h:3"), 1_000 + COOLDOWN_CAP_MS, "capped at the longest cooldown");
        // A shorter pause does not cut a longer parking short; a longer one extends it.
        assert!(!t.record_answer("p", "h:1", 429, Some(b"5"), 2_000));
        assert_eq!(t.parked_until("p", "h:1"), 21_000);
        assert!(t.record_answer("p", "h:1", 429, Some(b"30"), 2_000));
        assert_eq!(t.parked_until("p", "h:1"), 32_000);
    }

    #[test]
    fn without_a_usable_retry_after_the_answer_is_counted() {
        let date = b"Wed, 21 Oct 2015 07:28:00 GMT";
        for (status, retry_after) in
            [(429, None), (429, Some(&b"0"[..])), (503, Some(&date[..])), (500, Some(&b"20"[..])), (429, Some(b"-3"))]
        {
            let mut t = PassiveTable::default();
            assert!(t.record_answer("p", "h:1", status, retry_after, 1_000));
            assert_eq!(t.parked_until("p", "h:1"), 0, "{status} {retry_after:?}");
            assert_eq!(t.entries[0].failures, 1, "{status} {retry_after:?}");
        }
        assert_eq!(requested_pause_ms(200, Some(b"20")), None);
        assert_eq!(requested_pause_ms(503, Some(b"2")), Some(2_000));
        let mut t = PassiveTable::default();
        assert!(!t.record_answer("p", "h:1", 200, Some(b"20"), 1_000), "a success writes nothing");
    }

    #[test]
    fn answers_while_parked_neither_count_nor_unpark() {
        let mut t = PassiveTable::default();
        t.record("p", "h:1", true, 0);
        t.record_answer("p", "h:1", 429, Some(b"20"), 1_000);
        assert_eq!(t.entries[0].failures, 0, "the parking drops the count");
        // Requests sent before the 429 still finish: a success does not lift the pause.
        assert!(!t.record_answer("p", "h:1", 200, None, 2_000));
        t.record_answer("p", "h:1", 500, None, 3_000);
        assert_eq!((t.parked_until("p", "h:1"), t.entries[0].failures), (21_000, 0));
        // After it, the counting rule as usual: no strike was added, so one failure does not
        // park again, and a success forgets the endpoint.
        t.record_answer("p", "h:1", 500, None, 21_000);
        assert_eq!((t.parked_until("p", "h:1"), t.entries[0].failures, t.entries[0].strikes), (21_000, 1, 0));
        assert!(t.record_answer("p", "h:1", 200, None, 21_001));
        assert!(t.entries.is_empty());
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
