-- ferrogate configuration, version 14: guardrail policies (the `guardrails:` block,
-- ferrogate_core::config::guardrails) and the guardrails lists of models, groups and keys.
-- spec holds the policy as the config file writes it, without its name (the name column), as
-- JSONB so a field added to a policy or a rule needs no migration; a policy holds no
-- credential. Written to be harmless if run twice (IF NOT EXISTS).
CREATE TABLE IF NOT EXISTS fg_guardrails (
    name text PRIMARY KEY,
    spec jsonb NOT NULL
);

ALTER TABLE fg_models ADD COLUMN IF NOT EXISTS guardrails text[] NOT NULL DEFAULT '{}';
ALTER TABLE fg_groups ADD COLUMN IF NOT EXISTS guardrails text[] NOT NULL DEFAULT '{}';
ALTER TABLE fg_keys ADD COLUMN IF NOT EXISTS guardrails text[] NOT NULL DEFAULT '{}';
