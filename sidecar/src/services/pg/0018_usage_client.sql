-- ferrogate usage records, version 18: the client's User-Agent as it sent it, bounded
-- (ferrogate_core::usage::Record::user_agent: at most 256 bytes, control characters
-- replaced). NULL when the client sent none, as for every older row. The analytics API groups
-- by the client named in it (`by=client`, services::analytics::sql::CLIENT) computed per row:
-- no index, since the range aggregates read every row of their range anyway (0017).
ALTER TABLE fg_usage ADD COLUMN user_agent text;
