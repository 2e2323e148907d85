"""The modules of scripts/validate-envoy, one role each. scripts/lib/validate_k8s imports the
checks from here (from the modules below, not through a copy), scripts/check-helm the runner of
`ferrogate check`.

  venv            the script's venv (.venv at the repository root); standard library only, as it
                  runs before the venv exists
  common          where things are, the names ferrogate and Envoy agree on, the problem list
  protos          Envoy's generated messages (xds-protos), their type URLs, and parse_message
  ferrogate_bin   the ferrogate binary and the one runner of `ferrogate check` (standard library
                  only: scripts/check-helm uses it outside the venv)
  config_document a config document on its own: judged by `ferrogate check --config`; only what
                  the binary cannot know is checked here (no provider key written in clear)
  plugin          the Wasm filter's identity and flags, and its plugin configuration: judged by
                  `ferrogate check --plugin-config` (the filter's own parser, inline `config`
                  included); only Envoy's side of the contract is checked here
  clusters        a cluster per provider (TLS, pools, endpoints) and the sidecar's cluster
  hcm             the HTTP connection manager: filter order, timeouts, routes, buffer limit
  stats_tags      envoy/stats-tags.yaml (the stats_tags that make the metrics' labels) and the
                  rule that every bootstrap carries exactly its list
  bootstrap       an Envoy bootstrap file
  istio           Istio's EnvoyFilter (patch values parsed as Envoy messages), WasmPlugin and
                  other Istio kinds
  cli             a run over files, its report, and the entry point
  selftest        broken copies of the shipped files, each of which must be rejected
"""
