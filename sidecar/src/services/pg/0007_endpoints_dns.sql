-- ferrogate configuration, version 7: a pool provider's endpoints from DNS (endpoints_dns,
-- `host:port`; the sidecar resolves it and serves the answer as the provider's endpoints).
ALTER TABLE fg_providers ADD COLUMN endpoints_dns text;
