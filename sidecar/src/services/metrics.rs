//! The filter's metrics as `ferrogate serve` exports them: Envoy's tag extraction with the
//! shipped `envoy/stats-tags.yaml` (so the labels are those an Envoy with that bootstrap
//! prints), then Prometheus' conventions where Envoy keeps its own: base units (seconds, USD)
//! instead of the recorded milliseconds, microseconds and micro-USD, and a `# HELP` line on
//! every family, from the catalog in `ferrogate_core::metrics`.

use std::fmt::Write as _;

use ferrogate_core::metrics::{family_of, Kind, Unit};
use ferrogate_host::{escape_label, render_series, MetricFamily, MetricKind, TagSpecifier};

use super::snapshot::Served;

/// The shipped bootstrap fragment, the single source of the tag regexes.
const STATS_TAGS_YAML: &str = include_str!("../../../envoy/stats-tags.yaml");

#[derive(serde::Deserialize)]
struct Fragment {
    stats_config: StatsConfig,
}

#[derive(serde::Deserialize)]
struct StatsConfig {
    stats_tags: Vec<Tag>,
}

#[derive(serde::Deserialize)]
struct Tag {
    tag_name: String,
    regex: String,
}

/// The tag specifiers of `envoy/stats-tags.yaml`, compiled.
///
/// # Errors
/// The embedded file does not parse or a regex does not compile (a build of a broken
/// repository; the unit tests catch it first).
pub fn stats_tags() -> Result<Vec<TagSpecifier>, String> {
    let fragment: Fragment = serde_saphyr::from_str(STATS_TAGS_YAML).map_err(|e| e.to_string())?;
    let tags = fragment.stats_config.stats_tags.iter();
    tags.map(|t| TagSpecifier::new(&t.tag_name, &t.regex).map_err(|e| format!("{}: {e}", t.tag_name))).collect()
}

/// Prometheus text of `families` in Prometheus' conventions (see the module docs).
pub fn render(families: &[MetricFamily]) -> String {
    let mut out = String::new();
    for f in families {
        let known = family_of(&f.stat_name).filter(|k| same_kind(k.kind, f.kind));
        let (name, scale) = match known.and_then(|k| k.unit.suffixes().map(|s| (k.unit, s))) {
            Some((unit, (from, to))) => (rename(&f.name, from, to), unit.to_base()),
            None => (f.name.clone(), Unit::None.to_base()),
        };
        let help = known.map_or("A metric the filter defined (not in ferrogate's catalog).", |k| k.help);
        let kind = match f.kind {
            MetricKind::Counter => "counter",
            MetricKind::Gauge => "gauge",
            MetricKind::Histogram => "histogram",
        };
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for s in &f.series {
            render_series(&mut out, &name, s, scale);
        }
    }
    out
}

/// The sidecar's snapshot series: `ferrogate_snapshot_served_version` (the number the
/// filters' `ferrogate_snapshot_version` gauge shows once they apply the same snapshot),
/// `ferrogate_snapshot_age_seconds`, and `ferrogate_key_info{key,group}` (1 per key and group,
/// to join per-key series with groups in PromQL).
pub fn snapshot_series(served: &Served, now_ms: u64, out: &mut String) {
    let number = ferrogate_core::snapshot::version_number(&served.version).unwrap_or(0);
    let age = now_ms.saturating_sub(served.published_unix_ms) as f64 / 1000.0;
    let _ = writeln!(
        out,
        "# HELP ferrogate_snapshot_served_version The snapshot the sidecar serves: the first 32 bits of its content version, as a number.\n\
         # TYPE ferrogate_snapshot_served_version gauge\nferrogate_snapshot_served_version {number}\n\
         # HELP ferrogate_snapshot_age_seconds Seconds since the served snapshot's content was first published.\n\
         # TYPE ferrogate_snapshot_age_seconds gauge\nferrogate_snapshot_age_seconds {age}"
    );
    if served.config.keys.is_empty() {
        return;
    }
    let _ = writeln!(out, "# HELP ferrogate_key_info Each virtual key and its groups (group empty for a key in none).\n# TYPE ferrogate_key_info gauge");
    for key in &served.config.keys {
        let groups: Vec<&str> =
            if key.group_names.is_empty() { vec![""] } else { key.group_names.iter().map(String::as_str).collect() };
        for group in groups {
            let _ = writeln!(
                out,
                "ferrogate_key_info{{key=\"{}\",group=\"{}\"}} 1",
                escape_label(&key.name),
                escape_label(group)
            );
        }
    }
}

fn same_kind(a: Kind, b: MetricKind) -> bool {
    matches!(
        (a, b),
        (Kind::Counter, MetricKind::Counter)
            | (Kind::Gauge, MetricKind::Gauge)
            | (Kind::Histogram, MetricKind::Histogram)
    )
}

/// `ferrogate_request_duration_ms` → `…_seconds`, `ferrogate_cost_microusd_total` →
/// `ferrogate_cost_usd_total`.
fn rename(name: &str, from: &str, to: &str) -> String {
    let (stem, total) = match name.strip_suffix("_total") {
        Some(stem) => (stem, "_total"),
        None => (name, ""),
    };
    match stem.strip_suffix(from) {
        Some(base) => format!("{base}{to}{total}"),
        None => name.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_tags_are_one_regex_per_label_of_the_catalog() {
        let fragment: Fragment = serde_saphyr::from_str(STATS_TAGS_YAML).unwrap();
        let got: Vec<(String, String)> =
            fragment.stats_config.stats_tags.into_iter().map(|t| (t.tag_name, t.regex)).collect();
        let want: Vec<(String, String)> = ferrogate_core::metrics::LABELS
            .iter()
            .map(|l| (l.to_string(), ferrogate_core::metrics::tag_regex(l)))
            .collect();
        assert_eq!(got, want);
        assert_eq!(stats_tags().unwrap().len(), want.len());
    }

    #[test]
    fn units_become_base_units() {
        assert_eq!(rename("ferrogate_request_duration_ms", "_ms", "_seconds"), "ferrogate_request_duration_seconds");
        assert_eq!(rename("ferrogate_cost_microusd_total", "_microusd", "_usd"), "ferrogate_cost_usd_total");
        assert_eq!(rename("ferrogate_other", "_ms", "_seconds"), "ferrogate_other");
    }
}
