-- ferrogate usage records, version 4: whether a streamed answer stopped before its end (the
-- client went away, the upstream failed, or it was cut): its tokens are what was delivered
-- (ferrogate_core::usage::Record::partial). Older rows were complete.
ALTER TABLE fg_usage ADD COLUMN partial boolean NOT NULL DEFAULT false;
