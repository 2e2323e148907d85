//! One limit counter and its window rule.
//!
//! - **Minute and day windows slide.** Each counter keeps the current fixed bucket (60 s or
//!   86,400 s, aligned to the Unix epoch) and the previous one, and counts
//!   `current + previous × (time left of the previous bucket's share)`: the usual sliding-window
//!   counter, which assumes the previous bucket's traffic was spread evenly. It never lets more
//!   than the limit through in any window aligned to a bucket, and at most twice the limit in the
//!   worst-placed 60 s (a burst at the end of one bucket and another at the start of the next),
//!   against 2× for plain fixed windows at every boundary.
//! - **Month windows are UTC calendar months** (billing months): the count resets on the 1st
//!   at 00:00 UTC.
//!
//! A counter is 88 bytes (bucket number, current, previous, for this proxy and then for the
//! other replicas; then the leases held for this bucket and the next, and when one was last
//! asked for; little-endian words), the form it has in proxy-wasm shared data, so every worker
//! VM of a proxy shares it through CAS. Everything here
//! is arithmetic on integers: no allocation, no clock (time is passed in, in milliseconds).

/// The span a limit is counted over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Window {
    /// Sliding 60 s.
    Minute,
    /// Sliding 24 h.
    Day,
    /// The UTC calendar month.
    Month,
}

impl Window {
    /// Short name used in counter keys and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Window::Minute => "minute",
            Window::Day => "day",
            Window::Month => "month",
        }
    }

    /// The window named `name` (its [`Window::as_str`]).
    pub fn parse(name: &str) -> Option<Window> {
        match name {
            "minute" => Some(Window::Minute),
            "day" => Some(Window::Day),
            "month" => Some(Window::Month),
            _ => None,
        }
    }

    /// How long a bucket's amount still matters after the bucket began: until the end of the
    /// next bucket (it is `previous` there), with a month's worth of slack for months.
    pub fn retention_ms(self) -> u64 {
        match self {
            Window::Month => 63 * 86_400_000,
            w => 2 * w.bucket_ms(),
        }
    }

    /// The bucket's length in milliseconds; 0 for months (they do not slide).
    pub fn bucket_ms(self) -> u64 {
        match self {
            Window::Minute => 60_000,
            Window::Day => 86_400_000,
            Window::Month => 0,
        }
    }

    /// Milliseconds from `now_ms` to the start of the next bucket.
    pub fn ms_to_bucket_end(self, now_ms: u64) -> u64 {
        match self {
            Window::Month => ms_to_next_month(now_ms),
            w => w.bucket_ms() - now_ms % w.bucket_ms(),
        }
    }

    /// The bucket `now_ms` falls in: a bucket count, or for months `year × 12 + month`.
    pub fn bucket(self, now_ms: u64) -> u64 {
        match self {
            Window::Month => month_index(now_ms / 86_400_000),
            w => now_ms / w.bucket_ms(),
        }
    }
}

/// Months since year 0 of the UTC day `days` after the epoch (civil calendar).
fn month_index(days: u64) -> u64 {
    // Howard Hinnant's civil_from_days, for days >= 0.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    year * 12 + (month - 1)
}

/// Milliseconds from `now_ms` to the start of the next UTC month.
fn ms_to_next_month(now_ms: u64) -> u64 {
    let this = month_index(now_ms / 86_400_000);
    // Months are 28-31 days: step a day at a time from 28 days ahead at most 4 times.
    let mut day = now_ms / 86_400_000 + 1;
    while month_index(day) == this {
        day += 1;
    }
    (day * 86_400_000).saturating_sub(now_ms)
}

/// Amounts counted in one bucket and the one before it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// The bucket `current` belongs to.
    pub bucket: u64,
    /// Amount counted in that bucket.
    pub current: u64,
    /// Amount counted in the bucket before it.
    pub previous: u64,
}

impl Tally {
    /// Moves the tally to the bucket of `now_ms`.
    pub(crate) fn roll(&mut self, window: Window, now_ms: u64) {
        let bucket = window.bucket(now_ms);
        if bucket == self.bucket {
            return;
        }
        self.previous = if bucket == self.bucket + 1 { self.current } else { 0 };
        self.current = 0;
        self.bucket = bucket;
    }

    /// The tally moved to the bucket of `now_ms`.
    pub fn rolled(mut self, window: Window, now_ms: u64) -> Tally {
        self.roll(window, now_ms);
        self
    }

    /// The amount counted in the window ending at `now_ms`.
    pub fn used(&self, window: Window, now_ms: u64) -> u64 {
        let c = self.rolled(window, now_ms);
        c.current.saturating_add(previous_share(&c, window, now_ms))
    }

    /// Adds `amount` at `now_ms` (a record folded into a ledger).
    pub fn add(&mut self, window: Window, now_ms: u64, amount: u64) {
        self.roll(window, now_ms);
        self.current = self.current.saturating_add(amount);
    }
}

/// Capacity of one bucket granted to this proxy from the shared store (see
/// [`super::lease`]): its requests may take up to `granted` in that bucket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lease {
    /// The bucket the grant is for.
    pub bucket: u64,
    /// The amount granted so far.
    pub granted: u64,
}

/// A limit counter: what this proxy counted itself (exact, updated by every request), what
/// the other replicas of the gateway used, as last fed by the sidecar (see the crate's
/// limits feed), and the leases this proxy holds when limits are shared through Redis. A
/// request fits when its lease has room for it (shared limits) or when own and others'
/// consumption together leave room for it (this proxy alone, or the shared store away).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counter {
    /// This proxy's own count.
    pub own: Tally,
    /// Other replicas' consumption, as of the last feed.
    pub others: Tally,
    /// The lease for the current bucket.
    pub lease: Lease,
    /// A lease taken ahead for the bucket after it.
    pub next: Lease,
    /// When a top-up was last asked for (Unix ms), so one VM asks, not all.
    pub asked_ms: u64,
}

/// Bytes of an encoded [`Counter`].
pub const COUNTER_BYTES: usize = 88;

impl Counter {
    /// Decodes shared-data bytes; anything that is not a counter reads as empty.
    pub fn decode(bytes: &[u8]) -> Counter {
        let word = |i: usize| bytes.get(i * 8..i * 8 + 8).and_then(|b| b.try_into().ok()).map_or(0, u64::from_le_bytes);
        if bytes.len() != COUNTER_BYTES {
            return Counter::default();
        }
        Counter {
            own: Tally { bucket: word(0), current: word(1), previous: word(2) },
            others: Tally { bucket: word(3), current: word(4), previous: word(5) },
            lease: Lease { bucket: word(6), granted: word(7) },
            next: Lease { bucket: word(8), granted: word(9) },
            asked_ms: word(10),
        }
    }

    /// The shared-data form.
    pub fn encode(&self) -> [u8; COUNTER_BYTES] {
        let mut out = [0u8; COUNTER_BYTES];
        let (o, t, l, n) = (self.own, self.others, self.lease, self.next);
        let words = [
            o.bucket,
            o.current,
            o.previous,
            t.bucket,
            t.current,
            t.previous,
            l.bucket,
            l.granted,
            n.bucket,
            n.granted,
            self.asked_ms,
        ];
        for (i, w) in words.into_iter().enumerate() {
            out[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        out
    }

    /// Own and others' amounts together, at the bucket of `now_ms`.
    fn combined(&mut self, window: Window, now_ms: u64) -> Tally {
        self.own.roll(window, now_ms);
        let others = self.others.rolled(window, now_ms);
        Tally {
            bucket: self.own.bucket,
            current: self.own.current.saturating_add(others.current),
            previous: self.own.previous.saturating_add(others.previous),
        }
    }

    /// The amount counted in the window ending at `now_ms`, by every replica.
    pub fn used(&self, window: Window, now_ms: u64) -> u64 {
        let mut c = *self;
        let all = c.combined(window, now_ms);
        all.current.saturating_add(previous_share(&all, window, now_ms))
    }

    /// Counts `amount` if the window then holds at most `limit`; otherwise the wait, in
    /// milliseconds, until it would fit (`None`: it never fits, `amount > limit`).
    pub fn try_add(&mut self, window: Window, now_ms: u64, amount: u64, limit: u64) -> Result<(), Option<u64>> {
        let all = self.combined(window, now_ms);
        let used = all.current.saturating_add(previous_share(&all, window, now_ms));
        if used.saturating_add(amount) <= limit {
            self.own.current = self.own.current.saturating_add(amount);
            return Ok(());
        }
        Err((amount <= limit).then(|| wait_ms(&all, window, now_ms, amount, limit)))
    }

    /// How long until `amount` fits under `limit` by own and others' counts, in milliseconds
    /// (at least 1; `None`: it never fits, `amount > limit`). Used for `Retry-After`.
    pub fn wait_for(&self, window: Window, now_ms: u64, amount: u64, limit: u64) -> Option<u64> {
        // On a copy: only the answer is wanted.
        let mut c = *self;
        c.try_add(window, now_ms, amount, limit).map_or_else(|wait| wait, |()| Some(1))
    }

    /// Corrects this proxy's current bucket by `delta` (a reservation replaced by what was
    /// used); a counter that has moved on to a later bucket keeps the correction in `current`.
    pub fn adjust(&mut self, window: Window, now_ms: u64, delta: i64) {
        self.own.roll(window, now_ms);
        self.own.current = self.own.current.saturating_add_signed(delta);
    }
}

/// The previous bucket's weight at `now_ms`: its count times the share of it still inside the
/// sliding window (months do not slide).
fn previous_share(c: &Tally, window: Window, now_ms: u64) -> u64 {
    let len = window.bucket_ms();
    if len == 0 || c.previous == 0 {
        return 0;
    }
    let left = len - now_ms % len;
    // Rounded up: the share counts against the caller, never for it.
    u64::try_from((u128::from(c.previous) * u128::from(left)).div_ceil(u128::from(len))).unwrap_or(u64::MAX)
}

/// How long until `amount` fits under `limit`, given the counter at `now_ms` (already rolled).
fn wait_ms(c: &Tally, window: Window, now_ms: u64, amount: u64, limit: u64) -> u64 {
    let len = window.bucket_ms();
    if len == 0 {
        return ms_to_next_month(now_ms);
    }
    let elapsed = now_ms % len;
    let room = limit - amount;
    if c.current <= room {
        // The previous bucket's share must shrink to `room - current`.
        let allowed = u128::from(room - c.current);
        let prev = u128::from(c.previous.max(1));
        let left_needed = allowed * u128::from(len) / prev;
        let left_now = u128::from(len - elapsed);
        return u64::try_from(left_now.saturating_sub(left_needed)).unwrap_or(len).max(1);
    }
    // The current bucket must become the previous one and then decay to `room`.
    let cur = u128::from(c.current);
    let left_needed = u128::from(room) * u128::from(len) / cur;
    (len - elapsed).saturating_add(u64::try_from(u128::from(len) - left_needed).unwrap_or(len)).max(1)
}
