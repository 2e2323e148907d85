//! The health of one probed endpoint: consecutive-result thresholds against flapping, and
//! the cooldown of an unhealthy endpoint.

use serde::Serialize;

/// Consecutive failed probes after which a healthy endpoint turns unhealthy (one or two
/// lost probes — a restart of the pod's network, a GC pause — change nothing).
pub const FAILURES_TO_UNHEALTHY: u32 = 3;
/// Consecutive successful probes after which an unhealthy endpoint is healthy again (an
/// engine that answers once while crash-looping is not trusted yet).
pub const SUCCESSES_TO_HEALTHY: u32 = 2;

/// What the probes of one endpoint found so far.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Health {
    /// The verdict: true until [`FAILURES_TO_UNHEALTHY`] consecutive failures, then false
    /// until [`SUCCESSES_TO_HEALTHY`] consecutive successes.
    pub healthy: bool,
    /// Failed probes in a row (0 after a success).
    pub consecutive_failures: u32,
    /// Successful probes in a row (0 after a failure).
    pub consecutive_successes: u32,
    /// While unhealthy: Unix ms until which the endpoint should not be picked, pushed forward
    /// by every further failure; cleared when it is healthy again.
    pub cooldown_until_ms: Option<u64>,
    /// Probes made.
    pub probes: u64,
    /// When the last probe ended (Unix ms).
    pub last_probe_ms: Option<u64>,
    /// Why the last failed probe failed.
    pub last_error: Option<String>,
}

impl Default for Health {
    /// Not probed yet: healthy (an endpoint is trusted until probes say otherwise).
    fn default() -> Self {
        Health {
            healthy: true,
            consecutive_failures: 0,
            consecutive_successes: 0,
            cooldown_until_ms: None,
            probes: 0,
            last_probe_ms: None,
            last_error: None,
        }
    }
}

impl Health {
    /// Records a probe that ended at `now_ms`: `Err` carries why it failed. An unhealthy
    /// endpoint's cooldown becomes `now_ms + cooldown_ms` on every failure.
    pub fn observe(&mut self, result: Result<(), String>, now_ms: u64, cooldown_ms: u64) {
        self.probes += 1;
        self.last_probe_ms = Some(now_ms);
        match result {
            Ok(()) => {
                self.consecutive_failures = 0;
                self.consecutive_successes = self.consecutive_successes.saturating_add(1);
                if !self.healthy && self.consecutive_successes >= SUCCESSES_TO_HEALTHY {
                    self.healthy = true;
                    self.cooldown_until_ms = None;
                }
            }
            Err(why) => {
                self.consecutive_successes = 0;
                self.consecutive_failures = self.consecutive_failures.saturating_add(1);
                self.last_error = Some(why);
                if self.consecutive_failures >= FAILURES_TO_UNHEALTHY {
                    self.healthy = false;
                }
                if !self.healthy {
                    self.cooldown_until_ms = Some(now_ms.saturating_add(cooldown_ms));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fail() -> Result<(), String> {
        Err("connection refused".into())
    }

    #[test]
    fn three_failures_in_a_row_make_it_unhealthy_with_a_cooldown() {
        let mut h = Health::default();
        h.observe(fail(), 1_000, 30_000);
        h.observe(fail(), 2_000, 30_000);
        assert!(h.healthy && h.cooldown_until_ms.is_none(), "{h:?}");
        h.observe(Ok(()), 3_000, 30_000);
        h.observe(fail(), 4_000, 30_000);
        h.observe(fail(), 5_000, 30_000);
        assert!(h.healthy, "a success in between resets the count: {h:?}");
        h.observe(fail(), 6_000, 30_000);
        assert_eq!((h.healthy, h.cooldown_until_ms), (false, Some(36_000)));
        h.observe(fail(), 11_000, 30_000);
        assert_eq!(h.cooldown_until_ms, Some(41_000), "extended while it keeps failing");
        assert_eq!((h.probes, h.last_error.as_deref()), (7, Some("connection refused")));
    }

    #[test]
    fn two_successes_in_a_row_make_it_healthy_again() {
        let mut h = Health::default();
        for t in 0..3 {
            h.observe(fail(), t, 10);
        }
        assert!(!h.healthy);
        h.observe(Ok(()), 10, 10);
        assert!(!h.healthy, "one success is not enough");
        h.observe(fail(), 11, 10);
        h.observe(Ok(()), 12, 10);
        assert!(!h.healthy, "the failure in between restarted the count");
        h.observe(Ok(()), 13, 10);
        assert_eq!((h.healthy, h.cooldown_until_ms, h.consecutive_successes), (true, None, 2));
        h.observe(fail(), 14, 10);
        assert!(h.healthy && h.cooldown_until_ms.is_none(), "back to needing three failures");
    }
}
