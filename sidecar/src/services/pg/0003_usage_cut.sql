-- ferrogate usage records, version 3: whether a stream was cut for overrunning its limits
-- (`overrun: cut`; ferrogate_core::usage::Record::cut). Older rows were never cut.
ALTER TABLE fg_usage ADD COLUMN cut boolean NOT NULL DEFAULT false;
