-- ferrogate usage records, version 2: one row per request the filters reported on
-- `POST /v1/usage` (ferrogate_core::usage::Record, field for field), written by
-- services::pg::usage and read by the admin API's `GET /api/v1/usage`.
CREATE TABLE fg_usage (
    -- Arrival order: breaks ties between records that started in the same millisecond.
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- First 16 bytes of the SHA-256 of the record's JSON line as the filter sent it: a batch
    -- delivered twice (its acknowledgement lost, then retried) is stored once.
    digest            bytea       NOT NULL UNIQUE,
    request_id        text        NOT NULL,
    key               text,
    groups            text[]      NOT NULL DEFAULT '{}',
    model_requested   text        NOT NULL,
    provider          text        NOT NULL,
    upstream_model    text        NOT NULL,
    status            integer     NOT NULL,
    prompt_tokens     bigint      NOT NULL,
    completion_tokens bigint      NOT NULL,
    cached_tokens     bigint      NOT NULL,
    cost_micro_usd    bigint,
    latency_ms        bigint      NOT NULL,
    ttft_ms           bigint,
    started_at        timestamptz NOT NULL,
    streamed          boolean     NOT NULL
);

-- The admin queries: by key, by model, or by time alone, each newest first.
CREATE INDEX fg_usage_key_time ON fg_usage (key, started_at DESC, id DESC);
CREATE INDEX fg_usage_model_time ON fg_usage (model_requested, started_at DESC, id DESC);
CREATE INDEX fg_usage_time ON fg_usage (started_at DESC, id DESC);
