//! The limits feed: how the sidecar tells a proxy what the gateway's other replicas consumed.
//!
//! Every sidecar folds the usage records of its own proxy into Redis, per limit counter and
//! bucket, under its replica id. It answers its filter's `GET /v1/limits` with the sum of every
//! *other* replica's amounts for the current and previous bucket of each counter that has any
//! (a [`Tally`] per counter), and whether that view is current (`synced`: Redis answered the
//! last read). The filter writes each tally into the `others` half of its shared-data counter,
//! so admission checks `own + others` against the limit with no extra hostcall.
//!
//! The wire form is JSON: `{"replica": "...", "synced": true, "counters": [["<counter>",
//! bucket, current, previous], ...]}` — arrays, not objects, because a busy gateway has one
//! entry per active key and limit.

use serde::{Deserialize, Serialize};

use super::{Amounts, LimitSpec, Tally};

/// One answer of `GET /v1/limits`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Feed {
    /// The answering sidecar's replica id (its own consumption is not in `counters`).
    pub replica: String,
    /// False when the shared store could not be read: the tallies are the last ones known.
    pub synced: bool,
    /// Other replicas' consumption per counter: `(counter, bucket, current, previous)`.
    #[serde(default)]
    pub counters: Vec<(String, u64, u64, u64)>,
    /// Whether admission takes from leases granted by `POST /v1/limits/lease`
    /// ([`super::lease`]); false: the proxy counts own plus others against each limit.
    #[serde(default)]
    pub leases: bool,
}

impl Feed {
    /// Parses an answer.
    ///
    /// # Errors
    /// The body is not a feed.
    pub fn parse(body: &[u8]) -> Result<Feed, serde_json::Error> {
        serde_json::from_slice(body)
    }

    /// The entries as counter names and tallies.
    pub fn tallies(&self) -> impl Iterator<Item = (&str, Tally)> {
        self.counters.iter().map(|(name, bucket, current, previous)| {
            (name.as_str(), Tally { bucket: *bucket, current: *current, previous: *previous })
        })
    }
}

/// What a finished request adds to each counter of its plan: one request, its tokens, its
/// cost (skipped when the model has no price). Zero amounts are left out.
pub fn charges(specs: &[LimitSpec], used: Amounts) -> impl Iterator<Item = (&LimitSpec, u64)> {
    specs.iter().filter_map(move |s| used.of(s.metric).filter(|&a| a > 0).map(|a| (s, a)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::{Metric, Scope, Window};

    fn spec(metric: Metric) -> LimitSpec {
        LimitSpec {
            counter: format!("c.{}", metric.as_str()),
            scope: Scope::Key,
            name: "a".into(),
            metric,
            window: Window::Day,
            limit: 10,
            max_wait_ms: 250,
        }
    }

    #[test]
    fn a_feed_round_trips_and_yields_tallies() {
        let feed = Feed { replica: "r1".into(), synced: true, counters: vec![("c".into(), 5, 7, 2)], leases: true };
        let bytes = serde_json::to_vec(&feed).unwrap();
        let text = r#"{"replica":"r1","synced":true,"counters":[["c",5,7,2]],"leases":true}"#;
        assert_eq!(std::str::from_utf8(&bytes).unwrap(), text);
        let back = Feed::parse(&bytes).unwrap();
        assert_eq!(back.tallies().collect::<Vec<_>>(), [("c", Tally { bucket: 5, current: 7, previous: 2 })]);
        assert!(Feed::parse(b"{\"replica\": 1}").is_err());
    }

    #[test]
    fn charges_count_requests_tokens_and_priced_cost() {
        let specs = [spec(Metric::Requests), spec(Metric::Tokens), spec(Metric::MicroUsd)];
        let got: Vec<u64> = charges(&specs, Amounts::model(30, Some(4))).map(|(_, a)| a).collect();
        assert_eq!(got, [1, 30, 4]);
        let unpriced: Vec<&str> = charges(&specs, Amounts::model(0, None)).map(|(s, _)| s.counter.as_str()).collect();
        assert_eq!(unpriced, ["c.requests"], "no tokens, no price: only the request");
    }
}
