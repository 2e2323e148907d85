-- ferrogate usage records, version 21: the pool endpoint (`ip:port`) that served
-- (ferrogate_core::usage::Record::endpoint): the pick, or the endpoint an endpoint-picker
-- gateway said served when its retry walked past the pick. NULL for a target without a pool,
-- as for every older row.
ALTER TABLE fg_usage ADD COLUMN endpoint text;
