//! Where a chunk of LMCache's in-process connector (`LMCacheConnectorV1`) continues when its
//! event does not say.
//!
//! The connector names `None` as the parent of a prompt's first chunk, the real parent within
//! one store call, and `0` for the first chunk of every later store call: the next prefill step
//! of a long prompt, or the new part of a conversation whose start LMCache already held. The
//! chunk before it was announced by an earlier event of the same endpoint, either as the last
//! chunk of a store (its token ids stop at the chunk's end, as a prefill step's store is cut at
//! a chunk boundary) or with the next chunk's first token id (the connector's ids run one
//! past a chunk that is followed by another). Each endpoint remembers its last
//! [`RECENT_MAX`] chunks with that token, and a parent-`0` chunk continues the newest one that
//! fits; one whose continuation the endpoint already holds (from the engine's own GPU
//! events) is preferred, as it cannot be a coincidence of token ids.

use ferrogate_core::kv::events::Stored;
use ferrogate_core::kv::keys::block_key;

use super::{bit, EngineMap, ProviderIndex};

/// Chunks remembered per endpoint as places a later store may continue from.
pub const RECENT_MAX: usize = 256;

/// A chunk an endpoint stored lately.
#[derive(Debug, Clone, Copy)]
pub(super) struct Recent {
    /// The key of its last block.
    key: u64,
    /// The token id after it, when its event named one; `None` when the store ended with it.
    next: Option<u32>,
}

impl EngineMap {
    /// Remembers a chunk whose last block is `key`, followed by token `next` if known.
    pub(super) fn remember(&mut self, key: u64, next: Option<u32>) {
        if self.recent.len() >= RECENT_MAX {
            self.recent.pop_front();
        }
        self.recent.push_back(Recent { key, next });
    }
}

impl ProviderIndex {
    /// The key a chunk of endpoint `ep` whose event names parent `0` continues: the newest
    /// remembered chunk that ended its store or was followed by this chunk's first token,
    /// preferring one whose continuation `ep` already holds; `None` when none fits.
    pub(super) fn continued(&self, ep: u8, s: &Stored) -> Option<u64> {
        let size = usize::try_from(self.block_size).ok()?;
        let first = s.tokens.get(..size)?;
        let start = *first.first()?;
        let engine = self.engines.get(usize::from(ep))?;
        let mut fitting = engine.recent.iter().rev().filter(|r| r.next.is_none_or(|t| t == start));
        let newest = fitting.clone().next()?;
        let held = |r: &&Recent| self.blocks.peek(block_key(r.key, first)).is_some_and(|h| h.all() & bit(ep) != 0);
        Some(fitting.find(held).unwrap_or(newest).key)
    }
}
