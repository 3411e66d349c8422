"""The metrics the alert rules read (k8s/monitoring/alerts.py): the health report as gauges at each scrape,
and launch failures by why."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from shared.lifecycle import exitcodes
from shared.ops.metrics import count_launch_failure, count_launch_failures_from_zero, record_health
from shared.ops.vitals import HealthReport

pytestmark = pytest.mark.unit


def sample(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


@pytest.mark.parametrize(("report", "healthy", "database", "broker", "leading"), [
    (HealthReport(status="ok", checks={"database": "ok", "broker": "ok"}, loops={},
                  roles={"scheduler": "leader"}), 1, 1, 1, 1),
    (HealthReport(status="unhealthy", reason="database: no answer within 2 s", roles={"scheduler": "standby"},
                  checks={"database": "no answer within 2 s", "broker": "ok"}, loops={}), 0, 0, 1, 0),
    (HealthReport(status="unhealthy", reason="status-reconcile: failing", checks={"database": "ok", "broker": "ok"},
                  loops={"status-reconcile": "failing for 12 s: X"}), 0, 1, 1, None),
])
def test_the_health_report_becomes_gauges(report: HealthReport, healthy: int, database: int, broker: int,
                                          leading: int | None) -> None:
    record_health(report)
    assert sample("paiq_healthy") == healthy
    assert sample("paiq_health_check_ok", check="database") == database
    assert sample("paiq_health_check_ok", check="broker") == broker
    if leading is not None:
        assert sample("paiq_leading", service="scheduler") == leading


@pytest.mark.parametrize(("code", "reason"), [
    (exitcodes.IMAGE_PULL_FAILED, "image_pull"), (exitcodes.CONFIG_ERROR, "config"),
    (exitcodes.ENGINE_FAILURE, "engine"),
])
def test_a_launch_failure_is_counted_by_why(code: int, reason: str) -> None:
    count_launch_failures_from_zero("n-metrics")
    before = sample("paiq_launch_failures_total", node="n-metrics", reason=reason)
    assert before is not None  # exported from 0
    count_launch_failure("n-metrics", code)
    assert sample("paiq_launch_failures_total", node="n-metrics", reason=reason) == before + 1
