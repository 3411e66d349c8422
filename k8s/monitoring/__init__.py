"""paiq's Prometheus alert rules and Grafana dashboards, as code.

``python -m k8s.monitoring`` (from the repository root) writes what this package declares:

- ``k8s/monitoring/rules/paiq-alerts.rules.yaml``: the alert rules as a Prometheus rule file
  (docker-compose's Prometheus loads it; ``promtool check rules`` and ``promtool test rules`` read it);
- ``k8s/monitoring/prometheusrule.yaml``: the same rules as a PrometheusRule object, for the Prometheus
  operator;
- ``k8s/monitoring/dashboards/*.json``: the Grafana dashboards (built with Grafana Labs'
  grafana-foundation-sdk), which docker-compose's Grafana provisions and the kustomization in
  ``k8s/monitoring`` turns into ConfigMaps for Grafana's dashboard sidecar.

They are committed; ``tests/deploy/test_monitoring.py`` fails when they differ from what the code writes,
so change the code, run the module, and commit both. Nothing here is imported by the services.
"""
