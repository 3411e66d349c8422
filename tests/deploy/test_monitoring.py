"""The alert rules and dashboards (k8s/monitoring): committed as generated, valid for promtool, each alert
firing on its condition and quiet otherwise (promtool's unit tests), every query naming real metrics and
labels, and the manifests and compose services that ship them pointing at what exists."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from k8s.monitoring.__main__ import outputs
from k8s.monitoring.alerts import ALERTS, prometheus_rule, rule_file
from tests.deploy.manifests import compose_config, load_docs
from tests.deploy.monitoring import (
    MONITORING,
    PROMTOOL_TESTS,
    REPO,
    RULE_FILE,
    STANDARD,
    defined_metrics,
    panels,
    unknown_names,
    variable_queries,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

PROMTOOL = shutil.which("promtool")


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    """Debian's promtool (a missing one fails the test: tests/run.sh installs the prometheus package)."""
    assert PROMTOOL is not None, "promtool missing: apt-get install prometheus (tests/run.sh installs it)"
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=60, check=False, cwd=REPO)


def test_the_committed_files_are_what_the_code_generates() -> None:
    stale = [str(path.relative_to(REPO)) for path, content in outputs().items()
             if not path.exists() or path.read_text() != content]
    assert stale == [], f"run `.venv/bin/python -m k8s.monitoring` and commit: {stale} differ from the code"


def test_every_rule_file_passes_promtool_check() -> None:
    done = promtool("check", "rules", str(RULE_FILE))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in done.stdout


def test_each_alert_fires_on_its_condition_and_stays_quiet_otherwise() -> None:
    done = promtool("test", "rules", str(PROMTOOL_TESTS))
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    cases = yaml.safe_load(PROMTOOL_TESTS.read_text())["tests"]
    fired = {t["alertname"] for c in cases for t in c["alert_rule_test"] if t["exp_alerts"]}
    quiet = {t["alertname"] for c in cases for t in c["alert_rule_test"] if not t["exp_alerts"]}
    names = {a.name for a in ALERTS}
    assert fired == names, f"no firing case for {names - fired}"
    assert quiet == names, f"no quiet case for {names - quiet}"


def test_every_alert_tells_the_operator_what_to_look_at() -> None:
    for alert in ALERTS:
        assert alert.signal in alert.expr, alert.name
        assert alert.summary and len(alert.description) > 150, f"{alert.name}: say what to look at"
        assert alert.severity in ("critical", "warning", "info")


def test_every_query_names_real_metrics_and_labels() -> None:
    """A typo'd metric or label returns nothing rather than an error, so a query must name only what paiq
    exports: each metric a module defines, each label one of its metric's (or the scrape's instance/job)."""
    known = {**defined_metrics(), **STANDARD}
    queries = [str(p) for p in panels()] + [f"{a.name}: {a.expr}" for a in ALERTS] + variable_queries()
    assert len(queries) > 40
    problems = {q: found for q in queries if (found := unknown_names(q.split(": ", 1)[-1], known))}
    assert problems == {}


def test_a_typo_is_caught() -> None:
    known = defined_metrics()
    assert unknown_names("max(paiq_queue_lenght)", known) == ["no metric paiq_queue_lenght"]
    assert unknown_names('paiq_vc_quota{resouce="gpus"}', known) == ["paiq_vc_quota has no label resouce"]
    assert unknown_names("sum by (node) (paiq_vc_gpus_allocated)", known) == [
        "grouped by node, which none of its metrics has"]


# --- what ships them ---------------------------------------------------------------------------------


def _monitoring_docs() -> list[dict[str, Any]]:
    docs = []
    for name in yaml.safe_load((MONITORING / "kustomization.yaml").read_text())["resources"]:
        docs.extend(d for d in yaml.safe_load_all((MONITORING / name).read_text()) if d)
    return docs


def test_the_prometheus_rule_holds_the_rule_files_groups() -> None:
    rule = next(d for d in _monitoring_docs() if d["kind"] == "PrometheusRule")
    assert rule == prometheus_rule()
    assert rule["spec"]["groups"] == rule_file()["groups"] == yaml.safe_load(RULE_FILE.read_text())["groups"]


def test_the_monitors_select_paiq_pods_and_ports_that_exist() -> None:
    """The ServiceMonitor's Service and port, the PodMonitor's pods and their port named ops, in k8s/."""
    docs = _monitoring_docs()
    for doc in docs:
        assert doc["apiVersion"] == "monitoring.coreos.com/v1" and doc["metadata"]["name"], doc
    k8s = load_docs()
    service_monitor = next(d for d in docs if d["kind"] == "ServiceMonitor")
    wanted = service_monitor["spec"]["selector"]["matchLabels"]
    services = [d.body for d in k8s if d.kind == "Service" and wanted.items() <= d.body["metadata"]["labels"].items()]
    assert [s["metadata"]["name"] for s in services] == ["paiq-submit"]
    ports = {p["name"] for p in services[0]["spec"]["ports"]}
    assert {e["port"] for e in service_monitor["spec"]["endpoints"]} <= ports

    pod_monitor = next(d for d in docs if d["kind"] == "PodMonitor")
    rules = {e["key"]: set(e["values"]) for e in pod_monitor["spec"]["selector"]["matchExpressions"]}
    endpoint_ports = {e["port"] for e in pod_monitor["spec"]["podMetricsEndpoints"]}
    selected = []
    for doc in (d for d in k8s if d.kind in ("Deployment", "DaemonSet")):
        labels = doc.body["spec"]["template"]["metadata"]["labels"]
        if all(labels.get(key) in values for key, values in rules.items()):
            selected.append(labels["app.kubernetes.io/component"])
            names = {p["name"] for c in doc.body["spec"]["template"]["spec"]["containers"] for p in c.get("ports", ())}
            assert endpoint_ports <= names, f"{doc}: no port {endpoint_ports - names}"
    assert sorted(set(selected)) == ["launcher", "notify", "scheduler", "status"]


def test_the_kustomization_lists_files_that_exist() -> None:
    kustomization = yaml.safe_load((MONITORING / "kustomization.yaml").read_text())
    files = [*kustomization["resources"], *kustomization["configMapGenerator"][0]["files"]]
    assert all((MONITORING / f).is_file() for f in files)
    assert sorted(Path(f).name for f in kustomization["configMapGenerator"][0]["files"]) == sorted(
        p.name for p in (MONITORING / "dashboards").glob("*.json"))


def _monitoring_profile() -> dict[str, Any]:
    """docker-compose.yml's services as `docker-compose config` renders them with the monitoring profile on."""
    env = {"RABBITMQ_DEFAULT_USER": "u", "RABBITMQ_DEFAULT_PASS": "p", "MONGO_INITDB_ROOT_USERNAME": "u",
           "MONGO_INITDB_ROOT_PASSWORD": "p", "PAIQ_ADMIN_USER": "a", "PAIQ_ADMIN_PASSWORD": "p",
           "PAIQ_SECRETS_KEY": "k", "COMPOSE_PROFILES": "monitoring"}
    done = compose_config(env)
    assert done.returncode == 0, done.stderr
    services: dict[str, Any] = yaml.safe_load(done.stdout)["services"]
    return services


def test_compose_provisions_the_rules_and_dashboards() -> None:
    """docker-compose's monitoring profile: its mounts exist, Prometheus scrapes the ports compose publishes."""
    services = _monitoring_profile()
    assert {"prometheus", "grafana"} <= services.keys()
    mounts = dict(_bind(v) for name in ("prometheus", "grafana") for v in services[name]["volumes"])
    mounts.pop("", None)
    assert mounts["/etc/prometheus/rules"] == MONITORING / "rules"
    assert mounts["/var/lib/grafana/dashboards/paiq"] == MONITORING / "dashboards"
    assert all(source.exists() for source in mounts.values()), mounts

    config = yaml.safe_load(mounts["/etc/prometheus/prometheus.yml"].read_text())
    targets = {t for c in config["scrape_configs"] for s in c["static_configs"] for t in s["targets"]}
    published = {f"127.0.0.1:{p['published'] if isinstance(p, dict) else p.split(':')[-2]}"  # 1.29: "ip:host:port"
                 for name in ("submit", "scheduler", "status", "notify") for p in services[name]["ports"]}
    published.add(f"127.0.0.1:{services['launcher']['environment']['PAIQ_OPS_PORT']}")
    assert targets == published
    assert all(c["job_name"].find("paiq") >= 0 for c in config["scrape_configs"])  # the alerts' job=~".*paiq.*"
    rules_glob = config["rule_files"][0]
    assert Path(rules_glob).parent == Path("/etc/prometheus/rules") and RULE_FILE.match(Path(rules_glob).name)


def test_compose_serves_prometheus_grafana_and_every_ops_port_on_127_0_0_1_only() -> None:
    """The docs' promise (Monitoring): Prometheus and Grafana listen on 127.0.0.1 only (host networking, so
    their listen addresses are what counts, and they publish nothing), and every port compose publishes is bound
    to 127.0.0.1 but the REST API's."""
    services = _monitoring_profile()
    prometheus, grafana = services["prometheus"], services["grafana"]
    assert prometheus["network_mode"] == grafana["network_mode"] == "host"
    assert "ports" not in prometheus and "ports" not in grafana
    listen = [a.split("=", 1)[1] for a in prometheus["command"] if a.startswith("--web.listen-address=")]
    assert listen == ["127.0.0.1:9090"], prometheus["command"]
    assert grafana["environment"]["GF_SERVER_HTTP_ADDR"] == "127.0.0.1"
    for name, service in services.items():
        for port in service.get("ports", []):
            host_ip = port.get("host_ip", "") if isinstance(port, dict) else (port.split(":")[0]
                                                                             if port.count(":") == 2 else "")
            assert host_ip == "127.0.0.1" or name == "submit", f"{name} publishes {port} beyond this host"


def _bind(volume: str | dict[str, str]) -> tuple[str, Path]:
    """(target, host path) of a bind mount in `docker-compose config`'s output (1.29: "source:target:mode";
    v2: a mapping); ("", ...) for a named volume."""
    if isinstance(volume, dict):
        return (volume["target"], Path(volume["source"])) if volume["type"] == "bind" else ("", Path())
    source, target = volume.split(":")[:2]
    return (target, Path(source)) if source.startswith("/") else ("", Path())


def test_composes_prometheus_config_passes_promtool(tmp_path: Path) -> None:
    config = yaml.safe_load((REPO / "examples" / "monitoring" / "prometheus.yml").read_text())
    config["rule_files"] = [str(RULE_FILE.parent / Path(config["rule_files"][0]).name)]  # where compose mounts it
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    done = promtool("check", "config", str(tmp_path / "prometheus.yml"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in done.stdout
