"""What the monitoring tests read: every PromQL query the dashboards and alert rules hold, the metrics paiq
defines (with their label names), and the metric selectors and grouping labels a query uses."""

from __future__ import annotations

import importlib
import json
import pkgutil
import re
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.metrics import MetricWrapperBase

import services
import shared
from k8s.monitoring.alerts import ALERTS

REPO = Path(__file__).resolve().parents[2]
MONITORING = REPO / "k8s" / "monitoring"
RULE_FILE = MONITORING / "rules" / "paiq-alerts.rules.yaml"
PROMTOOL_TESTS = REPO / "tests" / "deploy" / "promtool" / "paiq-alerts.test.yaml"
# Labels Prometheus adds to every scraped series (and histograms' buckets have).
TARGET_LABELS = {"instance", "job"}
# Metrics of Prometheus itself and of prometheus_client's default collectors, with their labels.
STANDARD = {"up": set(), "process_resident_memory_bytes": set(), "process_cpu_seconds_total": set()}
# Grafana's variables, as the tests substitute them.
VARIABLES = {"$__rate_interval": "1m", "$__range": "5m", "$vc": ".*"}

_SELECTOR = re.compile(r"\b((?:paiq_|process_)[a-z0-9_]+|up)\b(\{[^}]*\})?(?!\s*\()")
_MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")
_GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")


@dataclass(frozen=True)
class Panel:
    dashboard: str
    title: str
    expr: str

    def __str__(self) -> str:
        return f"{self.dashboard} / {self.title}: {self.expr}"


def panels() -> list[Panel]:
    """Every query of every committed dashboard."""
    found = []
    for path in sorted((MONITORING / "dashboards").glob("*.json")):
        board = json.loads(path.read_text())
        for panel in board["panels"]:
            found.extend(Panel(path.stem, panel["title"], t["expr"]) for t in panel.get("targets") or ())
    return found


def variable_queries() -> list[str]:
    """The metrics the dashboards' query variables list values of (``label_values(metric, label)``)."""
    found = []
    for path in sorted((MONITORING / "dashboards").glob("*.json")):
        for variable in json.loads(path.read_text())["templating"]["list"]:
            if variable["type"] == "query":
                found.append(variable["query"])
    return found


def evaluable(expr: str) -> str:
    """The query as Prometheus's API takes it: Grafana's variables substituted."""
    for name, value in VARIABLES.items():
        expr = expr.replace(name, value)
    return expr


def alert_signals() -> dict[str, str]:
    return {alert.name: alert.signal for alert in ALERTS}


def defined_metrics() -> dict[str, set[str]]:
    """Every series name paiq's modules export (a counter's ``_total``, a histogram's ``_bucket``, ``_sum``,
    ``_count``), with its label names."""
    found: dict[str, set[str]] = {}
    for package in (shared, services):
        for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            if info.name.endswith("__main__"):
                continue
            for value in vars(importlib.import_module(info.name)).values():
                if not isinstance(value, MetricWrapperBase):
                    continue
                name, labels = value._name, set(value._labelnames)
                kind = value._type
                if kind == "counter":
                    found[f"{name}_total"] = labels
                elif kind == "histogram":
                    found.update({f"{name}_bucket": labels | {"le"}, f"{name}_sum": labels, f"{name}_count": labels})
                else:
                    found[name] = labels
    return found


def unknown_names(expr: str, known: dict[str, set[str]]) -> list[str]:
    """What in ``expr`` names no exported metric or a label its metrics lack (empty when all is known)."""
    problems = []
    query_labels = set(TARGET_LABELS)
    selectors = _SELECTOR.findall(expr)
    if not selectors:
        return [f"no metric in {expr!r}"]
    for metric, matchers in selectors:
        if metric not in known:
            problems.append(f"no metric {metric}")
            continue
        labels = known[metric] | TARGET_LABELS
        query_labels |= labels
        problems += [f"{metric} has no label {label}" for label in _MATCHER.findall(matchers) if label not in labels]
    for grouping in _GROUPING.findall(expr):
        problems += [f"grouped by {label.strip()}, which none of its metrics has"
                     for label in grouping.split(",") if label.strip() and label.strip() not in query_labels]
    return problems
