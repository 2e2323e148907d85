//! KV-cache events from the engines (vLLM's ZMQ publisher), turned into the block index the
//! filter's `precise_cache_aware` routes on.

pub mod decode;
pub mod index;
