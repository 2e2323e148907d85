-- ferrogate configuration and usage, version 15: the response cache.
-- The `cache:` blocks of models, groups and keys (ferrogate_core::config::cache::RawCache) as
-- JSONB, as the config file writes them, so a field added to a block needs no migration; NULL
-- when the row has none. `cache_store:` is not stored: like `redis:` and the other top-level
-- blocks, the rows make the configuration alone (the in-proxy store, its defaults).
-- fg_cache_purges keeps the purges of `POST /api/v1/cache/purge` (the last 256, as the sidecar
-- does), so a restarted sidecar, and every other sidecar on the database, sends them to its
-- filters. fg_usage.cached: the answer came from the cache (no provider call; false for every
-- older row). Written to be harmless if run twice (IF NOT EXISTS).
ALTER TABLE fg_models ADD COLUMN IF NOT EXISTS cache jsonb;
ALTER TABLE fg_groups ADD COLUMN IF NOT EXISTS cache jsonb;
ALTER TABLE fg_keys ADD COLUMN IF NOT EXISTS cache jsonb;

CREATE TABLE IF NOT EXISTS fg_cache_purges (
    id     bigserial PRIMARY KEY,
    at_ms  bigint NOT NULL,
    scopes text[] NOT NULL DEFAULT '{}',
    model  text
);

ALTER TABLE fg_usage ADD COLUMN IF NOT EXISTS cached boolean NOT NULL DEFAULT false;
