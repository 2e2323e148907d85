-- ferrogate configuration and usage, version 6: flow control. A provider's max_concurrency
-- (requests in flight per endpoint), a model's flow_control (JSON: max_queue, queue_ttl_ms,
-- max_waiting, max_kv_usage, bands), keys' and groups' priority, and each usage record's time
-- in a flow-control queue (ferrogate_core::usage::Record::queued_ms; older rows waited none).
ALTER TABLE fg_providers ADD COLUMN max_concurrency integer;
ALTER TABLE fg_models ADD COLUMN flow_control jsonb;
ALTER TABLE fg_groups ADD COLUMN priority integer;
ALTER TABLE fg_keys ADD COLUMN priority integer;
ALTER TABLE fg_usage ADD COLUMN queued_ms bigint NOT NULL DEFAULT 0;
