//! Guest-defined metrics (Envoy `wasmcustom.<name>` stats): one process-wide registry per
//! [`crate::Runtime`] so worker VMs aggregate into the same stat, per-VM metric ids with the
//! type in the low two bits, and Prometheus exposition the way Envoy's admin renders it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Envoy's default histogram bucket bounds (`Stats::HistogramSettingsImpl::defaultBuckets`).
const DEFAULT_BUCKETS: [f64; 19] = [
    0.5, 1.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0, 30000.0, 60000.0, 300000.0,
    600000.0, 1800000.0, 3600000.0,
];

/// Metric kinds, numbered as in the ABI (`MetricType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Counter = 0,
    Gauge = 1,
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

#[derive(Debug)]
enum Value {
    Counter(u64),
    Gauge(i64),
    Histogram { buckets: [u64; DEFAULT_BUCKETS.len()], count: u64, sum: f64 },
}

/// Outcome of a metric operation in ABI terms.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum MetricError {
    BadArgument,
}

/// One stat, shared by every VM that defined it. Its own lock: recording touches no other stat
/// and no name lookup (VMs resolve ids to stats once, at define time).
#[derive(Debug)]
pub(crate) struct Stat(Mutex<Value>);

impl Stat {
    fn lock(&self) -> MutexGuard<'_, Value> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `proxy_increment_metric`: counters need a positive offset, gauges add.
    pub(crate) fn increment(&self, offset: i64) -> Result<(), MetricError> {
        match &mut *self.lock() {
            Value::Counter(v) if offset > 0 => *v = v.saturating_add(offset.unsigned_abs()),
            Value::Gauge(v) => *v = v.wrapping_add(offset),
            _ => return Err(MetricError::BadArgument),
        }
        Ok(())
    }

    /// `proxy_record_metric`: counter add, gauge set, histogram record.
    pub(crate) fn record(&self, value: u64) -> Result<(), MetricError> {
        match &mut *self.lock() {
            Value::Counter(v) => *v = v.saturating_add(value),
            Value::Gauge(v) => *v = i64::try_from(value).unwrap_or(i64::MAX),
            Value::Histogram { buckets, count, sum } => {
                let x = value as f64;
                for (slot, bound) in buckets.iter_mut().zip(DEFAULT_BUCKETS) {
                    if x <= bound {
                        *slot += 1;
                    }
                }
                *count += 1;
                *sum += x;
            }
        }
        Ok(())
    }

    /// `proxy_get_metric`: counter/gauge value; histograms have none.
    pub(crate) fn get(&self) -> Result<u64, MetricError> {
        match &*self.lock() {
            Value::Counter(v) => Ok(*v),
            Value::Gauge(v) => Ok(*v as u64),
            Value::Histogram { .. } => Err(MetricError::BadArgument),
        }
    }
}

/// Process-wide metric values by stat name.
#[derive(Default)]
pub(crate) struct Registry {
    stats: Mutex<BTreeMap<String, Arc<Stat>>>,
}

impl Registry {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Arc<Stat>>> {
        self.stats.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Creates the stat if needed; defining a name again reuses the same stat.
    pub(crate) fn define(&self, kind: Kind, name: &str) -> Arc<Stat> {
        let mut stats = self.lock();
        let stat = stats.entry(name.to_string()).or_insert_with(|| {
            Arc::new(Stat(Mutex::new(match kind {
                Kind::Counter => Value::Counter(0),
                Kind::Gauge => Value::Gauge(0),
                Kind::Histogram => Value::Histogram { buckets: [0; DEFAULT_BUCKETS.len()], count: 0, sum: 0.0 },
            })))
        });
        stat.clone()
    }

    /// The stat called `name`.
    #[cfg(test)]
    fn stat(&self, name: &str) -> Option<Arc<Stat>> {
        self.lock().get(name).cloned()
    }

    /// Prometheus text: name sanitized to `[a-zA-Z0-9_]`, no `envoy_` prefix, names that
    /// would start with a digit dropped (Envoy's custom-namespace branch).
    pub(crate) fn prometheus_text(&self) -> String {
        let mut out = String::new();
        for (name, stat) in self.lock().iter() {
            let name: String = name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
            if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
                continue;
            }
            // Writing to a String cannot fail.
            let _ = render(&mut out, &name, &stat.lock());
        }
        out
    }
}

fn render(out: &mut String, name: &str, value: &Value) -> std::fmt::Result {
    match value {
        Value::Counter(v) => write!(out, "# TYPE {name} counter\n{name} {v}\n"),
        Value::Gauge(v) => write!(out, "# TYPE {name} gauge\n{name} {v}\n"),
        Value::Histogram { buckets, count, sum } => {
            writeln!(out, "# TYPE {name} histogram")?;
            for (n, bound) in buckets.iter().zip(DEFAULT_BUCKETS) {
                writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {n}")?;
            }
            writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}")?;
            write!(out, "{name}_sum {sum}\n{name}_count {count}\n")
        }
    }
}

/// Per-VM metric ids: `4n + kind`, separate sequences per kind (cpp-host `wasm.h`).
#[derive(Default)]
pub(crate) struct MetricIds {
    next: [u32; 3],
    stats: std::collections::HashMap<u32, Arc<Stat>, crate::state::ContextIds>,
}

impl MetricIds {
    /// Allocates the next id of `kind` for `stat`.
    pub(crate) fn allocate(&mut self, kind: Kind, stat: Arc<Stat>) -> u32 {
        let slot = &mut self.next[kind as usize];
        *slot += 1;
        let id = *slot * 4 + kind as u32;
        self.stats.insert(id, stat);
        id
    }

    /// The stat behind an id.
    pub(crate) fn stat(&self, id: u32) -> Option<&Stat> {
        self.stats.get(&id).map(|s| &**s)
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
