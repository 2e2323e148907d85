//! [`Backoff`]: retrying a peer that fails, in ticks, without flooding it or the log.
//!
//! A caller that retries on every tick (the filter posting usage to its sidecar, every 250 ms)
//! would hammer a sidecar whose database is down and log a line per try. After `n` failures in
//! a row the next try waits `2^(n-1)` ticks (at most [`MAX_WAIT_TICKS`]); only the first failure
//! and the recovery are worth a log line, and the state says which is which.

/// Longest wait between two tries, in ticks (16 × 250 ms = 4 s).
pub const MAX_WAIT_TICKS: u32 = 16;

/// Failures in a row and the ticks left before the next try.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    failures: u32,
    wait: u32,
}

impl Backoff {
    /// One tick passed; true when a try may go out now.
    pub fn tick(&mut self) -> bool {
        self.wait = self.wait.saturating_sub(1);
        self.ready()
    }

    /// Whether a try may go out now (without a tick passing).
    pub fn ready(&self) -> bool {
        self.wait == 0
    }

    /// A try failed; true for the first failure of a run (log it), false for the others.
    pub fn failed(&mut self) -> bool {
        self.failures = self.failures.saturating_add(1);
        let exp = self.failures.saturating_sub(1).min(MAX_WAIT_TICKS.trailing_zeros());
        self.wait = (1u32 << exp).min(MAX_WAIT_TICKS);
        self.failures == 1
    }

    /// A try succeeded; `Some(failures)` when it ends a run of failures (log the recovery).
    pub fn succeeded(&mut self) -> Option<u32> {
        let failures = std::mem::take(&mut self.failures);
        self.wait = 0;
        (failures > 0).then_some(failures)
    }

    /// Failures in a row so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ticks until the next try is allowed.
    fn waits(b: &mut Backoff) -> u32 {
        let mut n = 0;
        while !b.tick() {
            n += 1;
        }
        n + 1
    }

    #[test]
    fn waits_double_up_to_the_cap_and_only_edges_are_reported() {
        let mut b = Backoff::default();
        assert!(b.ready() && b.tick());
        assert!(b.failed(), "the first failure is reported");
        let mut seen = vec![waits(&mut b)];
        for _ in 0..7 {
            assert!(!b.failed(), "later failures are quiet");
            seen.push(waits(&mut b));
        }
        assert_eq!(seen, [1, 2, 4, 8, 16, 16, 16, 16]);
        assert_eq!(b.failures(), 8);
        assert_eq!(b.succeeded(), Some(8), "the recovery is reported once");
        assert!(b.ready());
        assert_eq!(b.succeeded(), None);
        assert!(b.failed(), "a new run starts over");
        assert_eq!(waits(&mut b), 1);
    }
}
