//! Metric ids: defined with the host on first use and cached, so recording a request costs
//! no name formatting or hashing in the steady state.

use std::collections::HashMap;

use proxy_wasm::hostcalls;
use proxy_wasm::types::MetricType;

use super::labelled;

/// Histogram families recorded per (model, provider), in the order of [`LabelledHists::ids`].
const PER_TARGET: [&str; 3] =
    ["ferrogate.request_duration_ms", "ferrogate.time_to_first_token_ms", "ferrogate.inter_token_latency_us"];

/// (model, provider) combinations whose histogram ids a VM keeps; past this they are forgotten
/// and defined again as needed (defining a name again gives a new id for the same stat).
const MAX_TARGETS: usize = 256;

/// Ids by stat name, and the gauges set so far.
#[derive(Default)]
pub(super) struct Ids {
    by_name: HashMap<String, u32>,
    filter_us: Option<u32>,
    /// Queue-depth gauges set so far, by name, so an emptied band goes back to 0.
    depths: Vec<(String, u32)>,
}

impl Ids {
    /// Adds `value` to counter `name` (nothing for 0: Envoy refuses zero increments).
    pub(super) fn count(&mut self, name: &str, value: u64) {
        if value == 0 {
            return;
        }
        let Some(id) = self.define(MetricType::Counter, name) else { return };
        if let Err(e) = hostcalls::increment_metric(id, i64::try_from(value).unwrap_or(i64::MAX)) {
            log::debug!("metric {name}: {e:?}");
        }
    }

    /// The id of histogram `name`; the filter-time histogram's is kept in a field.
    pub(super) fn histogram(&mut self, name: &str) -> Option<u32> {
        if name == "ferrogate.filter_duration_us" {
            if self.filter_us.is_none() {
                self.filter_us = self.define(MetricType::Histogram, name);
            }
            return self.filter_us;
        }
        self.define(MetricType::Histogram, name)
    }

    /// Sets gauge `name`.
    pub(super) fn gauge(&mut self, name: &str, value: u64) {
        if let Some(id) = self.define(MetricType::Gauge, name) {
            record(Some(id), value);
        }
    }

    /// Sets `ferrogate.queue_depth;model=..;band=..` for each band of `model`, and 0 for its
    /// bands that emptied since.
    pub(super) fn depths(&mut self, model: &str, bands: &[(i32, usize)]) {
        let prefix = labelled("ferrogate.queue_depth", &[("model", model)]);
        let mut seen: Vec<String> = Vec::with_capacity(bands.len());
        for &(band, n) in bands {
            let name = labelled(&prefix, &[("band", &band.to_string())]);
            self.depth(&name, n as u64);
            seen.push(name);
        }
        let stale: Vec<String> = self
            .depths
            .iter()
            .filter(|(n, _)| n.starts_with(&prefix) && !seen.contains(n))
            .map(|(n, _)| n.clone())
            .collect();
        for name in stale {
            self.depth(&name, 0);
        }
    }

    fn depth(&mut self, name: &str, value: u64) {
        let id = match self.depths.iter().find(|(n, _)| n == name) {
            Some((_, id)) => *id,
            None => {
                let Ok(id) = hostcalls::define_metric(MetricType::Gauge, name) else { return };
                self.depths.push((name.to_string(), id));
                id
            }
        };
        record(Some(id), value);
    }

    fn define(&mut self, kind: MetricType, name: &str) -> Option<u32> {
        if let Some(id) = self.by_name.get(name) {
            return Some(*id);
        }
        match hostcalls::define_metric(kind, name) {
            Ok(id) => {
                self.by_name.insert(name.to_string(), id);
                Some(id)
            }
            Err(e) => {
                log::debug!("define_metric({name}): {e:?}");
                None
            }
        }
    }
}

/// Records `value` into histogram (or sets gauge) `id`.
pub(super) fn record(id: Option<u32>, value: u64) {
    if let Some(id) = id {
        if let Err(e) = hostcalls::record_metric(id, value) {
            log::debug!("metric {id}: {e:?}");
        }
    }
}

/// The per-(model, provider) histogram ids, found by comparing names (a VM sees few).
#[derive(Default)]
pub(super) struct LabelledHists {
    slots: Vec<(String, String, [Option<u32>; 3])>,
}

impl LabelledHists {
    /// Request duration, time to first token and inter-token latency ids of this pair.
    pub(super) fn ids(&mut self, ids: &mut Ids, model: &str, provider: &str) -> [Option<u32>; 3] {
        let eq = |a: &str, b: &str| ferrogate_core::bytes::eq(a.as_bytes(), b.as_bytes());
        if let Some((_, _, found)) = self.slots.iter().find(|(m, p, _)| eq(m, model) && eq(p, provider)) {
            return *found;
        }
        if self.slots.len() >= MAX_TARGETS {
            self.slots.clear();
        }
        let labels = [("model", model), ("provider", provider)];
        let defined = PER_TARGET.map(|family| ids.histogram(&labelled(family, &labels)));
        self.slots.push((model.to_string(), provider.to_string(), defined));
        defined
    }
}
