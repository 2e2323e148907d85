//! [`Choose`]: who picks a model's target and a provider's pool endpoint for [`super::route`].
//! The filter's implementation runs the model's [`crate::balance::Balancer`] with load and
//! health; [`Rotation`] is the stateless counter-driven fallback used by tests and tools.

use crate::balance::StrategyKind;
use crate::config::{Config, Model, Target};

/// Makes the two choices of a routing decision.
pub trait Choose {
    /// The target of `config.models[model]` (index into its `targets`), and the pool endpoint
    /// of that target's provider when the choice already includes one (index into its
    /// `endpoints`). `None` when nothing can be picked.
    fn target(&mut self, config: &Config, model: usize) -> Option<(usize, Option<usize>)>;

    /// An endpoint of `config.providers[provider]`'s pool (index into `endpoints`); `None`
    /// when it has no pool.
    fn endpoint(&mut self, config: &Config, provider: usize) -> Option<usize>;
}

/// Counter-driven choices: `priority` takes the first target, `weighted` rotates in
/// proportion to weights, every other strategy rotates; the pool rotates independently.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rotation(pub u64);

impl Choose for Rotation {
    fn target(&mut self, config: &Config, model: usize) -> Option<(usize, Option<usize>)> {
        let model = config.models.get(model)?;
        let target = pick_target(model, self.0)?;
        let index = model.targets.iter().position(|t| std::ptr::eq(t, target))?;
        // Spread the pool independently of the target choice.
        self.0 /= model.targets.len().max(1) as u64;
        Some((index, None))
    }

    fn endpoint(&mut self, config: &Config, provider: usize) -> Option<usize> {
        let n = config.providers.get(provider)?.endpoints.len() as u64;
        (n > 0).then(|| usize::try_from(self.0 % n).unwrap_or(0))
    }
}

/// Picks a target of `model` from `counter` alone (see [`Rotation`]).
pub fn pick_target(model: &Model, counter: u64) -> Option<&Target> {
    let n = model.targets.len() as u64;
    if n == 0 {
        return None;
    }
    match model.strategy {
        StrategyKind::Priority => model.targets.first(),
        StrategyKind::Weighted => {
            let total: u64 = model.targets.iter().map(|t| u64::from(t.weight)).sum();
            let mut r = counter % total.max(1);
            model.targets.iter().find(|t| {
                let hit = r < u64::from(t.weight);
                r = r.saturating_sub(u64::from(t.weight));
                hit
            })
        }
        _ => model.targets.get(usize::try_from(counter % n).unwrap_or(0)),
    }
}
