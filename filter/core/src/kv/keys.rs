//! ferrogate's KV block keys: block `i` of a token sequence has key
//! `H(key(i-1), tokens[i*B .. (i+1)*B])`, with key(-1) the chain's seed. Only full blocks have
//! keys, as engines cache only full blocks. `H` is [`crate::balance::hash64`]'s mixing applied
//! to the token ids as 32-bit little-endian words, two per step.
//!
//! The seed names the provider, so two pools never share keys, and the LoRA adapter, so an
//! adapter's blocks never match the base model's (vLLM puts the adapter in its block hashes).
//! Blocks an engine hashed with extra keys (multimodal items, a cache salt) get
//! [`extra_seed`]: a key space no plain-text request reaches.

use crate::balance::hash::{mix64, step};
use crate::balance::hash64;

const SEED: u64 = 0x6b76_2d62_6c6f_636b; // "kv-block"

/// The seed of a chain: `provider`'s key space, or its adapter `lora`'s.
pub fn chain_seed(provider: &str, lora: Option<&str>) -> u64 {
    let base = hash64(SEED, provider.as_bytes());
    match lora {
        Some(name) if !name.is_empty() => hash64(base ^ 0x6c6f_7261, name.as_bytes()),
        _ => base,
    }
}

/// The key of a block whose engine hash also covered `extra` (its encoded extra keys): moved
/// out of every plain-text chain.
pub fn extra_seed(key: u64, extra: &[u8]) -> u64 {
    hash64(key ^ 0x0065_7874_7261, extra)
}

/// The key of the block `tokens` following the block keyed `parent` (or a chain's seed).
pub fn block_key(parent: u64, tokens: &[u32]) -> u64 {
    let mut h = parent ^ 0x9e37_79b9_7f4a_7c15;
    let mut pairs = tokens.chunks_exact(2);
    for pair in &mut pairs {
        let (a, b) = (pair.first().copied().unwrap_or(0), pair.get(1).copied().unwrap_or(0));
        h = step(h, u64::from(a) | (u64::from(b) << 32));
    }
    if let Some(&last) = pairs.remainder().first() {
        h = step(h, u64::from(last));
    }
    mix64(h ^ (tokens.len() as u64).wrapping_mul(4))
}

/// The keys of every full block of `tokens`, first to last, chained from `seed`.
pub fn block_keys(seed: u64, tokens: &[u32], block_size: u32) -> impl Iterator<Item = u64> + '_ {
    let size = usize::try_from(block_size.max(1)).unwrap_or(1);
    tokens.chunks_exact(size).scan(seed, |parent, block| {
        *parent = block_key(*parent, block);
        Some(*parent)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_chain_and_cover_full_blocks_only() {
        let tokens: Vec<u32> = (1000..1058).collect();
        let seed = chain_seed("pool", None);
        let keys: Vec<u64> = block_keys(seed, &tokens, 16).collect();
        assert_eq!(keys.len(), 3, "58 tokens are three full blocks; the tail is not hashed");
        assert_eq!(keys[0], block_key(seed, &tokens[..16]));
        assert_eq!(keys[1], block_key(keys[0], &tokens[16..32]));
        // The same block after another prefix is another key.
        let other: Vec<u32> = (0..16).chain(1016..1032).collect();
        assert_ne!(block_keys(seed, &other, 16).nth(1), Some(keys[1]));
    }

    #[test]
    fn seeds_separate_providers_adapters_and_extra_keys() {
        let tokens: Vec<u32> = (0..16).collect();
        let a = block_key(chain_seed("a", None), &tokens);
        assert_ne!(a, block_key(chain_seed("b", None), &tokens));
        assert_ne!(a, block_key(chain_seed("a", Some("sql")), &tokens));
        assert_eq!(chain_seed("a", Some("")), chain_seed("a", None));
        assert_ne!(extra_seed(a, b"salt"), a);
    }

    #[test]
    fn the_token_count_is_part_of_the_key() {
        // [0] and [0, 0] pack to the same word; the length tells them apart.
        assert_ne!(block_key(1, &[0]), block_key(1, &[0, 0]));
    }
}
