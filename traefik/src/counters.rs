//! Limit counters in the guest's own memory.
//!
//! Traefik gives http-wasm guests no shared state: each pooled instance counts only the
//! requests it handled, and Traefik may drop an instance (and its counts) at any garbage
//! collection. So a limit here is per instance, which the documentation says.

use std::collections::HashMap;

use ferrogate_core::limits::{Counter, CounterStore};

/// Counters by key, in their encoded form.
#[derive(Debug, Default)]
pub(crate) struct MemoryCounters(HashMap<String, Vec<u8>>);

impl CounterStore for MemoryCounters {
    fn update<E>(&mut self, key: &str, f: &mut dyn FnMut(&mut Counter) -> Result<(), E>) -> Result<(), E> {
        let mut counter = Counter::decode(self.0.get(key).map(Vec::as_slice).unwrap_or_default());
        f(&mut counter)?;
        self.0.insert(key.to_string(), counter.encode().to_vec());
        Ok(())
    }
}
