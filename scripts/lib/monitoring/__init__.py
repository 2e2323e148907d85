"""ferrogate's Grafana dashboards and Prometheus alert rules (monitoring/): the Envoy variants'
generator (scripts/dashboards) and their check (scripts/check-monitoring).

Standard library only (what scripts/dashboards uses):
  catalog    every metric family and series ferrogate exports, from the code and the manual
  variants   the Envoy variants and the Helm chart's copies, written from the serve files

Run inside scripts/check-monitoring's venv (scripts/requirements-monitoring.txt):
  venv       the venv itself (standard library; runs before it exists)
  tools      promtool and prometheus (Debian's package), helm (scripts/k8s-tools)
  promql     parsing (promql-parser) and the label sets an expression's parts carry
  grafana    the dashboards against Grafana's schemas (testdata/grafana-schemas)
  rules      the alert rules: promtool check rules, the PrometheusRule schema, conventions
  live       ferrogate sim + serve with traffic, a scrape, and a real Prometheus evaluating
             every query
  helm       the chart's dashboard ConfigMap and PrometheusRule
  selftest   broken copies that must be rejected
  cli        the checks in order, `N passed, M failed`
"""
