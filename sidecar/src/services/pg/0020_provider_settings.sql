-- ferrogate configuration, version 20: a provider's cloud and pool settings (preset, region,
-- project, api_version, credentials, api_keys_env, key_cooldown_secs) as one JSON object.
-- Keys themselves are never in it: pools name their variables, clouds their credential source.
ALTER TABLE fg_providers ADD COLUMN settings jsonb;
