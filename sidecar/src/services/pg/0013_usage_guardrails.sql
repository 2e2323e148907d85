-- ferrogate usage records, version 13: what guardrails did to the request (the blocking rule,
-- matches per rule and direction, external checks; ferrogate_core::usage::Record::guardrails,
-- as its JSON). NULL when no policy applied, as for every older row.
ALTER TABLE fg_usage ADD COLUMN guardrails jsonb;
