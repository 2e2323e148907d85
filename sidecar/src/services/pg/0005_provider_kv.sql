-- ferrogate configuration, version 5: a pool's KV-cache settings (precise_cache_aware). `kv`
-- holds, when any is set, {"endpoints": [...], "kv_block_size": ..., "kv_topic": ...,
-- "kv_max_blocks": ..., "kv_tokenize": ...} with the endpoints in their object form
-- (address, kv_events, kv_replay); `endpoints` keeps the addresses alone.
ALTER TABLE fg_providers ADD COLUMN kv jsonb;
