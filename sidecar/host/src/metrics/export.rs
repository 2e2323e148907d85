//! What the registry exports: its stats grouped into Prometheus families after Envoy's tag
//! extraction, and the text Envoy's `/stats/prometheus` makes of them.
//!
//! Envoy extracts tags when a stat is created, from its full name (`wasmcustom.<name>` for a
//! Wasm's metrics): each `stats_config.stats_tags` specifier searches the name with its regex;
//! the first capture group is cut out of the name and the second (or the first, when there is
//! only one) is the tag's value; a tag name already taken by an earlier specifier is skipped.
//! What is left of the name, without `wasmcustom.`, names the family (Envoy's
//! `TagProducerImpl::produceTags`, `TagExtractorStdRegexImpl::extractTag`,
//! `PrometheusStatsFormatter::metricName`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::Ordering::Relaxed;

use super::{Kind, Stat, Value, DEFAULT_BUCKETS};

/// The namespace Envoy files a Wasm's metrics under (`stats_handler.h`).
const CUSTOM_NAMESPACE: &str = "wasmcustom.";

/// One tag specifier of Envoy's bootstrap `stats_config.stats_tags` (the `regex` form).
#[derive(Debug, Clone)]
pub struct TagSpecifier {
    name: String,
    regex: regex::Regex,
}

impl TagSpecifier {
    /// A specifier for tag `name` with `regex` (ECMAScript in Envoy; the patterns ferrogate
    /// ships read the same in Rust's syntax).
    ///
    /// # Errors
    /// The regex does not compile.
    pub fn new(name: &str, regex: &str) -> Result<Self, regex::Error> {
        Ok(Self { name: name.to_string(), regex: regex::Regex::new(regex)? })
    }
}

/// A Prometheus family: the stats whose names are equal once their tags are taken out.
#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    /// The name left after tag extraction, without `wasmcustom.` (`ferrogate.requests_total`).
    pub stat_name: String,
    /// The Prometheus name: `stat_name` with every character but `[a-zA-Z0-9]` as `_`.
    pub name: String,
    /// The kind of its stats.
    pub kind: Kind,
    /// Its series, ordered by labels.
    pub series: Vec<Series>,
}

/// One series of a family.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Tag names and values, in specifier order.
    pub labels: Vec<(String, String)>,
    /// Its value.
    pub value: SeriesValue,
}

/// A series' value at export time.
#[derive(Debug, Clone, PartialEq)]
pub enum SeriesValue {
    /// A counter.
    Counter(u64),
    /// A gauge.
    Gauge(i64),
    /// Cumulative counts per upper bound (Envoy's default buckets), the count and the sum.
    Histogram {
        /// (upper bound, observations at or below it).
        buckets: Vec<(f64, u64)>,
        /// All observations.
        count: u64,
        /// Their sum.
        sum: f64,
    },
}

/// The families of `stats` (name → stat), after tag extraction with `tags`.
pub(super) fn families<'a>(stats: impl Iterator<Item = (&'a str, &'a Stat)>, tags: &[TagSpecifier]) -> Vec<Family> {
    let mut by_name: BTreeMap<String, Family> = BTreeMap::new();
    for (name, stat) in stats {
        let full = format!("{CUSTOM_NAMESPACE}{name}");
        let (rest, labels) = extract(&full, tags);
        let stat_name = rest.strip_prefix(CUSTOM_NAMESPACE).unwrap_or(&rest).to_string();
        let prom: String = stat_name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
        // Envoy drops a name that would start with a digit.
        if prom.is_empty() || prom.starts_with(|c: char| c.is_ascii_digit()) {
            continue;
        }
        let kind = kind_of(&stat.0);
        let family =
            by_name.entry(prom.clone()).or_insert_with(|| Family { stat_name, name: prom, kind, series: vec![] });
        if family.kind == kind {
            family.series.push(Series { labels, value: value_of(&stat.0) });
        }
    }
    let mut out: Vec<Family> = by_name.into_values().collect();
    for f in &mut out {
        f.series.sort_by(|a, b| a.labels.cmp(&b.labels));
    }
    out
}

/// `name` without the first capture group of each matching specifier, and the tags found.
fn extract(name: &str, tags: &[TagSpecifier]) -> (String, Vec<(String, String)>) {
    let mut labels: Vec<(String, String)> = Vec::new();
    let mut cut: Vec<std::ops::Range<usize>> = Vec::new();
    for tag in tags {
        if labels.iter().any(|(n, _)| *n == tag.name) {
            continue;
        }
        let Some(caps) = tag.regex.captures(name) else { continue };
        let Some(remove) = caps.get(1) else { continue };
        let value = caps.get(2).unwrap_or(remove);
        labels.push((tag.name.clone(), value.as_str().to_string()));
        cut.push(remove.range());
    }
    let rest = name.char_indices().filter(|(i, _)| !cut.iter().any(|r| r.contains(i))).map(|(_, c)| c).collect();
    (rest, labels)
}

fn kind_of(value: &Value) -> Kind {
    match value {
        Value::Counter(_) => Kind::Counter,
        Value::Gauge(_) => Kind::Gauge,
        Value::Histogram(_) => Kind::Histogram,
    }
}

fn value_of(value: &Value) -> SeriesValue {
    match value {
        Value::Counter(v) => SeriesValue::Counter(v.load(Relaxed)),
        Value::Gauge(v) => SeriesValue::Gauge(v.load(Relaxed)),
        Value::Histogram(h) => {
            // Count first: concurrent records can only make the buckets read after it larger,
            // so each is capped at it and `+Inf` is never below a finite bucket.
            let count = h.count.load(Relaxed);
            let mut cumulative = 0;
            let buckets = h
                .buckets
                .iter()
                .zip(DEFAULT_BUCKETS)
                .map(|(n, bound)| {
                    cumulative += n.load(Relaxed);
                    (bound, cumulative.min(count))
                })
                .collect();
            SeriesValue::Histogram { buckets, count, sum: f64::from_bits(h.sum.load(Relaxed)) }
        }
    }
}

/// A label value escaped for the text format (`\`, `"` and newline).
pub fn escape_label(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// `{a="x",b="y"` plus `extra` (e.g. `le="5"`), closed; empty when there is nothing.
pub(crate) fn label_set(labels: &[(String, String)], extra: Option<(&str, &str)>) -> String {
    let mut parts: Vec<String> = labels
        .iter()
        .map(|(n, v)| {
            let n: String = n.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
            format!("{n}=\"{}\"", escape_label(v))
        })
        .collect();
    parts.extend(extra.map(|(n, v)| format!("{n}=\"{v}\"")));
    if parts.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", parts.join(","))
    }
}

/// Envoy's `/stats/prometheus` text of `families`: one `# TYPE` per family, no `# HELP`.
pub(super) fn envoy_text(families: &[Family]) -> String {
    let mut out = String::new();
    for f in families {
        let kind = match f.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        };
        let _ = writeln!(out, "# TYPE {} {kind}", f.name);
        for s in &f.series {
            render_series(&mut out, &f.name, s, 1.0);
        }
    }
    out
}

/// Appends one series; histogram bounds and sums are multiplied by `scale` (1 in Envoy's
/// form; a unit conversion in `ferrogate serve`'s).
pub fn render_series(out: &mut String, name: &str, s: &Series, scale: f64) {
    let plain = label_set(&s.labels, None);
    // Writing to a String cannot fail.
    let _ = match &s.value {
        SeriesValue::Counter(v) if scale == 1.0 => writeln!(out, "{name}{plain} {v}"),
        SeriesValue::Counter(v) => writeln!(out, "{name}{plain} {}", *v as f64 * scale),
        SeriesValue::Gauge(v) => writeln!(out, "{name}{plain} {v}"),
        SeriesValue::Histogram { buckets, count, sum } => {
            for (bound, n) in buckets {
                let le = (bound * scale).to_string();
                let _ = writeln!(out, "{name}_bucket{} {n}", label_set(&s.labels, Some(("le", &le))));
            }
            let inf = label_set(&s.labels, Some(("le", "+Inf")));
            writeln!(out, "{name}_bucket{inf} {count}\n{name}_sum{plain} {}\n{name}_count{plain} {count}", sum * scale)
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags() -> Vec<TagSpecifier> {
        ["model", "status"].iter().map(|l| TagSpecifier::new(l, &format!("(;{l}=([^;]*))")).unwrap()).collect()
    }

    #[test]
    fn extraction_cuts_the_first_group_and_keeps_the_second() {
        let (rest, labels) = extract("wasmcustom.fg.requests_total;model=gpt-4.1;status=200", &tags());
        assert_eq!(rest, "wasmcustom.fg.requests_total");
        assert_eq!(labels, vec![("model".into(), "gpt-4.1".into()), ("status".into(), "200".into())]);
        // No specifier matches: the name stays whole.
        assert_eq!(extract("wasmcustom.x.y", &tags()), ("wasmcustom.x.y".to_string(), vec![]));
        // One group only: it is both what is cut and the value.
        let only = [TagSpecifier::new("t", r"\.(v\d)").unwrap()];
        assert_eq!(extract("a.v1.b", &only), ("a..b".to_string(), vec![("t".into(), "v1".into())]));
    }

    #[test]
    fn a_tag_name_is_taken_once() {
        let twice = [TagSpecifier::new("m", "(;a=([^;]*))").unwrap(), TagSpecifier::new("m", "(;b=([^;]*))").unwrap()];
        let (rest, labels) = extract("n;a=1;b=2", &twice);
        assert_eq!((rest.as_str(), labels), ("n;b=2", vec![("m".to_string(), "1".to_string())]));
    }

    #[test]
    fn label_values_are_escaped() {
        let labels = vec![("model".to_string(), "a\"b\\c\nd".to_string())];
        assert_eq!(label_set(&labels, None), "{model=\"a\\\"b\\\\c\\nd\"}");
        assert_eq!(label_set(&[], None), "");
    }
}
