-- ferrogate configuration, version 11: MCP servers and A2A agents (the registry behind
-- /mcp/{server} and /a2a/{agent}), and the mcp / a2a grants of groups and keys.
-- spec holds the entry as the config file writes it, without its credential; api_key_sealed
-- the credential sealed under FERROGATE_MASTER_KEY (services::secrets) as for providers,
-- never plaintext. An entry that names api_key_env keeps the variable's name in spec only.
CREATE TABLE fg_mcp_servers (
    name           text PRIMARY KEY,
    spec           jsonb NOT NULL,
    api_key_sealed text
);

CREATE TABLE fg_a2a_agents (
    name           text PRIMARY KEY,
    spec           jsonb NOT NULL,
    api_key_sealed text
);

ALTER TABLE fg_groups ADD COLUMN mcp text[] NOT NULL DEFAULT '{}';
ALTER TABLE fg_groups ADD COLUMN a2a text[] NOT NULL DEFAULT '{}';
ALTER TABLE fg_keys ADD COLUMN mcp text[] NOT NULL DEFAULT '{}';
ALTER TABLE fg_keys ADD COLUMN a2a text[] NOT NULL DEFAULT '{}';
