-- ferrogate usage records, version 8: the request log. Each record's failover retries (attempts
-- abandoned before the one recorded; ferrogate_core::usage::Record::retries; older rows had
-- none), and an index for `GET /api/v1/requests/{request_id}`. Keyset paging of
-- `GET /api/v1/requests` (newest first by (started_at, id)) uses fg_usage_time (0002).
ALTER TABLE fg_usage ADD COLUMN retries bigint NOT NULL DEFAULT 0;
CREATE INDEX fg_usage_request_id ON fg_usage (request_id);
