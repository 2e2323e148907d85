"""The modules of scripts/validate-k8s, one role each.

  venv             the script's own venv (.cache/validate-k8s-venv); standard library only, as it
                   runs before the venv exists
  documents        where things are, and the YAML documents read from files and directories
  envoy_api        what is taken from scripts/lib/validate_envoy (validate-envoy's checks), and the
                   Envoy types the simulation patches
  schemas          Kubernetes' OpenAPI schemas and the vendored CRD schemas, as validators
  ferrogate_config ferrogate's config document in a ConfigMap (validate_envoy runs `ferrogate check`
                   on it, and on every plugin configuration)
  kinds            one document: its schema, then the checks of its kind's contents
  jsonpatch        the JSONPath subset and the JSON Patch operations of Envoy Gateway
  envoy_gateway    the xDS Envoy Gateway generates for a Gateway, patched and checked
  cli              a whole run (documents plus simulations), its report, and the entry point
  selftest         broken copies of the shipped manifests, each of which must be rejected
  vendor           --vendor-crd: (re)writes testdata/k8s-schemas/ from a CRD file
"""
