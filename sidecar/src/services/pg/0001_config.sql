-- ferrogate configuration store, version 1: one table per section, one row per entry, and a
-- single version row bumped by every write in the same transaction (what sidecars poll and
-- what the Redis notification carries).
CREATE TABLE fg_config_version (
    id      boolean PRIMARY KEY DEFAULT true CHECK (id),
    version bigint  NOT NULL
);
INSERT INTO fg_config_version (id, version) VALUES (true, 0);

CREATE TABLE fg_providers (
    name           text PRIMARY KEY,
    kind           text NOT NULL,
    base_url       text NOT NULL,
    endpoints      text[] NOT NULL DEFAULT '{}',
    api_key_env    text,
    -- AES-256-GCM envelope under FERROGATE_MASTER_KEY (services::secrets); never plaintext.
    api_key_sealed text
);

CREATE TABLE fg_models (
    name      text PRIMARY KEY,
    strategy  text,
    fallbacks text[] NOT NULL DEFAULT '{}'
);

CREATE TABLE fg_model_targets (
    model          text NOT NULL REFERENCES fg_models (name) ON DELETE CASCADE,
    position       integer NOT NULL,
    provider       text NOT NULL,
    upstream_model text NOT NULL,
    weight         integer,
    PRIMARY KEY (model, position)
);

CREATE TABLE fg_aliases (
    name  text PRIMARY KEY,
    model text NOT NULL
);

CREATE TABLE fg_groups (
    name   text PRIMARY KEY,
    models text[] NOT NULL DEFAULT '{}',
    limits jsonb
);

CREATE TABLE fg_keys (
    name       text PRIMARY KEY,
    digest     text NOT NULL UNIQUE,
    groups     text[] NOT NULL DEFAULT '{}',
    models     text[] NOT NULL DEFAULT '{}',
    expires_at text,
    limits     jsonb
);

CREATE TABLE fg_pricing (
    model                 text PRIMARY KEY,
    input_per_mtok        double precision NOT NULL,
    output_per_mtok       double precision NOT NULL,
    cached_input_per_mtok double precision
);
