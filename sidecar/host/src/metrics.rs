//! Guest-defined metrics (Envoy `wasmcustom.<name>` stats): one process-wide registry per
//! [`crate::Runtime`] so worker VMs aggregate into the same stat, per-VM metric ids with the
//! type in the low two bits, and Prometheus exposition the way Envoy's admin renders it.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicI64, AtomicU64};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

mod export;

pub use export::{escape_label, render_series, Family, Series, SeriesValue, TagSpecifier};

/// Envoy's default histogram bucket bounds (`Stats::HistogramSettingsImpl::defaultBuckets`).
const DEFAULT_BUCKETS: [f64; 19] = [
    0.5, 1.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0, 30000.0, 60000.0, 300000.0,
    600000.0, 1800000.0, 3600000.0,
];

/// Metric kinds, numbered as in the ABI (`MetricType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up.
    Counter = 0,
    /// Set or moved either way.
    Gauge = 1,
    /// Distribution over Envoy's default buckets.
    Histogram = 2,
}

impl Kind {
    pub(crate) fn from_abi(kind: i32) -> Option<Self> {
        match kind {
            0 => Some(Self::Counter),
            1 => Some(Self::Gauge),
            2 => Some(Self::Histogram),
            _ => None,
        }
    }
}

/// A stat's value. Atomics rather than a lock: every worker records into the same stats on
/// every request, and Envoy's own counters and gauges are shared atomics too.
#[derive(Debug)]
enum Value {
    Counter(AtomicU64),
    Gauge(AtomicI64),
    Histogram(Box<Histogram>),
}

/// Histogram counts per bucket (not cumulative: a record touches one bucket; rendering adds
/// them up), the count, and the sum as `f64` bits.
#[derive(Debug, Default)]
struct Histogram {
    buckets: [AtomicU64; DEFAULT_BUCKETS.len()],
    count: AtomicU64,
    sum: AtomicU64,
}

/// Outcome of a metric operation in ABI terms.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum MetricError {
    BadArgument,
}

/// One stat, shared by every VM that defined it. Recording touches no other stat and no name
/// lookup (VMs resolve ids to stats once, at define time).
#[derive(Debug)]
pub(crate) struct Stat(Value);

impl Stat {
    fn new(kind: Kind) -> Self {
        Stat(match kind {
            Kind::Counter => Value::Counter(AtomicU64::new(0)),
            Kind::Gauge => Value::Gauge(AtomicI64::new(0)),
            Kind::Histogram => Value::Histogram(Box::default()),
        })
    }

    /// `proxy_increment_metric`: counters need a positive offset, gauges add.
    pub(crate) fn increment(&self, offset: i64) -> Result<(), MetricError> {
        match &self.0 {
            Value::Counter(v) if offset > 0 => saturating_add(v, offset.unsigned_abs()),
            Value::Gauge(v) => {
                v.fetch_add(offset, Relaxed);
            }
            _ => return Err(MetricError::BadArgument),
        }
        Ok(())
    }

    /// `proxy_record_metric`: counter add, gauge set, histogram record.
    pub(crate) fn record(&self, value: u64) -> Result<(), MetricError> {
        match &self.0 {
            Value::Counter(v) => saturating_add(v, value),
            Value::Gauge(v) => v.store(i64::try_from(value).unwrap_or(i64::MAX), Relaxed),
            Value::Histogram(h) => {
                let x = value as f64;
                // The first bucket whose bound holds `x`; above the last bound only the count.
                if let Some(slot) = h.buckets.get(DEFAULT_BUCKETS.partition_point(|&bound| bound < x)) {
                    slot.fetch_add(1, Relaxed);
                }
                h.count.fetch_add(1, Relaxed);
                let _ = h.sum.fetch_update(Relaxed, Relaxed, |bits| Some((f64::from_bits(bits) + x).to_bits()));
            }
        }
        Ok(())
    }

    /// `proxy_get_metric`: counter/gauge value; histograms have none.
    pub(crate) fn get(&self) -> Result<u64, MetricError> {
        match &self.0 {
            Value::Counter(v) => Ok(v.load(Relaxed)),
            Value::Gauge(v) => Ok(v.load(Relaxed) as u64),
            Value::Histogram(_) => Err(MetricError::BadArgument),
        }
    }
}

/// Adds without wrapping past `u64::MAX`.
fn saturating_add(v: &AtomicU64, n: u64) {
    let _ = v.fetch_update(Relaxed, Relaxed, |old| Some(old.saturating_add(n)));
}

/// Process-wide metric values by stat name, and the tag extraction applied on export.
#[derive(Default)]
pub(crate) struct Registry {
    stats: Mutex<BTreeMap<String, Arc<Stat>>>,
    tags: RwLock<Arc<Vec<TagSpecifier>>>,
}

impl Registry {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Arc<Stat>>> {
        self.stats.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Creates the stat if needed; defining a name again reuses the same stat.
    pub(crate) fn define(&self, kind: Kind, name: &str) -> Arc<Stat> {
        let mut stats = self.lock();
        let stat = stats.entry(name.to_string()).or_insert_with(|| Arc::new(Stat::new(kind)));
        stat.clone()
    }

    /// The stat called `name`.
    #[cfg(test)]
    fn stat(&self, name: &str) -> Option<Arc<Stat>> {
        self.lock().get(name).cloned()
    }

    /// Sets the tag extraction of exports (Envoy's bootstrap `stats_config.stats_tags`).
    pub(crate) fn set_tags(&self, tags: Vec<TagSpecifier>) {
        *self.tags.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(tags);
    }

    /// Every stat, grouped into Prometheus families after tag extraction.
    pub(crate) fn families(&self) -> Vec<Family> {
        let tags = self.tags.read().unwrap_or_else(PoisonError::into_inner).clone();
        let stats: Vec<(String, Arc<Stat>)> = self.lock().iter().map(|(n, s)| (n.clone(), s.clone())).collect();
        export::families(stats.iter().map(|(n, s)| (n.as_str(), &**s)), &tags)
    }

    /// Prometheus text as Envoy's `/stats/prometheus` renders these stats.
    pub(crate) fn prometheus_text(&self) -> String {
        export::envoy_text(&self.families())
    }
}

/// Per-VM metric ids: `4n + kind`, separate sequences per kind (cpp-host `wasm.h`), so an
/// id indexes its kind's table directly.
#[derive(Default)]
pub(crate) struct MetricIds {
    stats: [Vec<Arc<Stat>>; 3],
}

impl MetricIds {
    /// Allocates the next id of `kind` for `stat`.
    pub(crate) fn allocate(&mut self, kind: Kind, stat: Arc<Stat>) -> u32 {
        let table = &mut self.stats[kind as usize];
        table.push(stat);
        u32::try_from(table.len()).unwrap_or(u32::MAX) * 4 + kind as u32
    }

    /// The stat behind an id.
    pub(crate) fn stat(&self, id: u32) -> Option<&Stat> {
        let n = usize::try_from(id / 4).ok()?.checked_sub(1)?;
        self.stats.get(id as usize % 4)?.get(n).map(|s| &**s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_carry_type() {
        let mut ids = MetricIds::default();
        let r = Registry::default();
        assert_eq!(ids.allocate(Kind::Counter, r.define(Kind::Counter, "a")), 4);
        assert_eq!(ids.allocate(Kind::Gauge, r.define(Kind::Gauge, "b")), 5);
        assert_eq!(ids.allocate(Kind::Histogram, r.define(Kind::Histogram, "c")), 6);
        assert_eq!(ids.allocate(Kind::Counter, r.define(Kind::Counter, "d")), 8);
    }

    #[test]
    fn unknown_ids_have_no_stat() {
        let mut ids = MetricIds::default();
        let id = ids.allocate(Kind::Gauge, Registry::default().define(Kind::Gauge, "g"));
        assert!(ids.stat(id).is_some());
        for other in [0, 1, 3, id - 4, id + 4, id + 2, 7, u32::MAX] {
            assert!(ids.stat(other).is_none(), "{other}");
        }
    }

    #[test]
    fn histogram_buckets_are_cumulative_when_rendered() {
        let r = Registry::default();
        let h = r.define(Kind::Histogram, "h");
        for v in [0, 1, 3, 5, 6, 4_000_000] {
            h.record(v).unwrap();
        }
        let text = r.prometheus_text();
        for line in ["h_bucket{le=\"0.5\"} 1\n", "h_bucket{le=\"1\"} 2\n", "h_bucket{le=\"5\"} 4\n"] {
            assert!(text.contains(line), "{line} in {text}");
        }
        assert!(text.contains("h_bucket{le=\"10\"} 5\n"), "{text}");
        assert!(text.contains("h_bucket{le=\"3600000\"} 5\n"), "{text}");
        assert!(text.contains("h_bucket{le=\"+Inf\"} 6\nh_sum 4000015\nh_count 6\n"), "{text}");
    }

    #[test]
    fn semantics_and_text() {
        let r = Registry::default();
        r.define(Kind::Counter, "x.total");
        r.define(Kind::Gauge, "g");
        r.define(Kind::Histogram, "h");
        let stat = |name| r.stat(name).unwrap();
        assert_eq!(stat("x.total").increment(0), Err(MetricError::BadArgument));
        assert!(r.stat("nope").is_none());
        stat("x.total").increment(2).unwrap();
        stat("g").record(9).unwrap();
        stat("g").increment(-2).unwrap();
        stat("h").record(3).unwrap();
        assert_eq!(stat("g").get(), Ok(7));
        assert_eq!(stat("h").get(), Err(MetricError::BadArgument));
        // Defining again (another VM) shares the stat.
        r.define(Kind::Counter, "x.total").increment(1).unwrap();
        assert_eq!(stat("x.total").get(), Ok(3));
        let text = r.prometheus_text();
        assert!(text.contains("# TYPE x_total counter\nx_total 3\n"), "{text}");
        assert!(text.contains("g 7\n"));
        assert!(text.contains("h_bucket{le=\"5\"} 1\n"), "{text}");
        assert!(text.contains("h_bucket{le=\"1\"} 0\n"));
        assert!(text.contains("h_count 1\n"));
    }
}
