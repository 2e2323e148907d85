//! Flow control's reading of a model's slots: how many more requests each takes now
//! ([`crate::flow`]).

use super::Routing;
use crate::config::Config;

impl Routing {
    /// Flow control's view of model `model` ([`crate::flow`]): per slot, how many more requests
    /// it takes now into `room` (0: saturated, excluded or parked; `u32::MAX`: no bound), and
    /// their sum. A slot is saturated when `in_flight` reached its provider's `max_concurrency`
    /// or its engine figures cross the model's thresholds (unknown figures count as crossed).
    #[allow(clippy::too_many_arguments)]
    pub fn room(
        &mut self,
        config: &Config,
        model: usize,
        in_flight: &[u32],
        now_ms: u64,
        excluded: &[usize],
        fc: &crate::flow::FlowControl,
        room: &mut Vec<u32>,
    ) -> u64 {
        room.clear();
        let Some(m) = self.models.get(model).and_then(Option::as_ref) else { return 0 };
        room.resize(m.slots.len(), 0);
        if self.eligible_slots(config, model, in_flight, now_ms, excluded).is_none() {
            return 0;
        }
        let mut total: u64 = 0;
        for &i in &self.eligible {
            let (Some(load), Some(r)) = (self.loads.get(i), room.get_mut(i)) else { continue };
            *r = if fc.engine_saturated(load) {
                0
            } else {
                self.slot_cap(config, model, i).map_or(u32::MAX, |c| c.saturating_sub(load.in_flight))
            };
            total = total.saturating_add(u64::from(*r));
        }
        total
    }

    /// The `max_concurrency` of slot `slot`'s provider in model `model`.
    pub fn slot_cap(&self, config: &Config, model: usize, slot: usize) -> Option<u32> {
        let s = self.models.get(model)?.as_ref()?.slots.get(slot)?;
        let provider = config.models.get(model)?.targets.get(s.target)?.provider;
        config.providers.get(provider)?.max_concurrency
    }
}
