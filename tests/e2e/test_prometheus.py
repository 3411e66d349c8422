"""A real Prometheus (Debian's) scraping a running paiq, in both shapes, with the committed alert rules:
every dashboard panel's query and every alert's signal return data (no typo'd metric or label), every alert
expression evaluates; in the separate shape, killing the scheduler makes PaiqNoSchedulerLeading pending."""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import docker
import pytest
import yaml

from k8s.monitoring.alerts import ALERTS
from services.cli.client import paiq_client
from tests.deploy.monitoring import RULE_FILE, evaluable, panels, variable_queries
from tests.e2e.conftest import job_config
from tests.infra import ADMIN_PASSWORD, ADMIN_USER, Platform, free_port, start_platform, stop_platform, unique

PROMETHEUS = shutil.which("prometheus")
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(150)]

# Metrics that have no sample here, each for a reason the test cannot change: a query made only of these may
# return nothing (every other query must return data).
NO_SAMPLE_HERE = {
    "paiq_node_gpu_utilization_percent": "NVML: no GPU on this machine",
    "paiq_vc_gpu_seconds_used_total": "NVML: no GPU utilisation measured",
    "paiq_task_gpu_utilization_percent_bucket": "NVML: no GPU utilisation measured",
    "paiq_notifications_total": "no notification sent (and no notify service in the separate shape)",
    "paiq_embedded_db_stored_bytes": "the test platforms share a database, not paiq up's own (tests/e2e/test_ops.py)",
    "paiq_embedded_db_cache_bytes": "the same",
}


@pytest.fixture(scope="module", params=["all-in-one", "separate"])
def platform(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, mongo_uri: str,
             amqp_url: str, docker_client: docker.DockerClient) -> Iterator[Platform]:
    """Two declared GPUs (placed and counted; nothing passed to containers)."""
    shape = str(request.param)
    p = start_platform(shape, tmp_path_factory.mktemp(f"prom-{shape}"), mongo_uri=mongo_uri, amqp_url=amqp_url,
                       PAIQ_NODE_GPUS="2xV100", PAIQ_GPU_DEVICES="none", PAIQ_RECONCILE_SECONDS="1")
    try:
        yield p
    finally:
        stop_platform(p, docker_client)


@pytest.fixture(scope="module")
def prometheus(platform: Platform, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Prometheus on a port of its own, scraping every paiq process each second, the rules evaluated each second."""
    assert PROMETHEUS is not None, "prometheus missing: apt-get install prometheus (tests/run.sh installs it)"
    workdir = tmp_path_factory.mktemp("prometheus")
    targets = [urlsplit(url).netloc for url in (platform.api, *platform.ops.values())]
    config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
              "rule_files": [str(RULE_FILE)],
              "scrape_configs": [{"job_name": "paiq", "static_configs": [{"targets": targets}]}]}
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    with (workdir / "prometheus.log").open("wb") as log:
        proc = subprocess.Popen([PROMETHEUS, f"--config.file={workdir / 'prometheus.yml'}",
                                 f"--storage.tsdb.path={workdir / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=log, stderr=log)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def api(http: aiohttp.ClientSession, base: str, path: str, **params: str) -> Any:
    async with http.get(f"{base}/api/v1/{path}", params=params) as resp:
        body = await resp.json()
        assert body["status"] == "success", (path, params, body)
        return body["data"]


async def query(http: aiohttp.ClientSession, base: str, expr: str) -> list[dict[str, Any]]:
    data = await api(http, base, "query", query=evaluable(expr))
    return list(data["result"])


async def until(what: str, check: Any, limit_s: float = 30) -> Any:
    deadline = time.monotonic() + limit_s
    while True:
        found = await check()
        if found:
            return found
        assert time.monotonic() < deadline, f"not within {limit_s} s: {what}"
        await asyncio.sleep(0.5)


def may_be_empty(expr: str) -> bool:
    used = {m for m in NO_SAMPLE_HERE if m in expr}
    others = expr
    for metric in used:
        others = others.replace(metric, "")
    return bool(used) and "paiq_" not in others and "process_" not in others and "up{" not in others


async def test_every_panel_and_alert_query_returns_data(platform: Platform, prometheus: str) -> None:
    user = ADMIN_USER
    async with paiq_client(platform.api) as anonymous:
        admin = anonymous.with_token((await anonymous.login(ADMIN_USER, ADMIN_PASSWORD))["token"])
        gpu = job_config(unique("gpu"), command="sleep 60", roles=[
            {"name": "main", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 128, "gpuNumber": 1, "command": "sleep 60"}])
        never = job_config(unique("never"), command="true", roles=[
            {"name": "main", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 128, "gpuNumber": 8, "command": "true"}])
        for config in (gpu, never):
            await admin.submit(user, json.dumps(config).encode())
        await until("the GPU job runs", lambda: _running(admin, user, str(gpu["jobName"])), limit_s=60)

    async with aiohttp.ClientSession() as http:
        targets = len(platform.ops) + 1
        await until("every paiq target scraped", lambda: _all_up(http, prometheus, targets))
        # Rates need two samples of what the job's start counted, and the rules a few evaluations.
        await until("the launch counted", lambda: query(http, prometheus, "paiq_launch_seconds_count > 0"))
        await asyncio.sleep(3)
        empty: dict[str, str] = {}
        for expr in [p.expr for p in panels()] + [a.signal for a in ALERTS]:
            if not await query(http, prometheus, expr) and not may_be_empty(expr):
                empty[expr] = "no data"
        assert empty == {}, f"queries that returned nothing (a typo'd metric or label?):\n{json.dumps(empty, indent=1)}"
        for alert in ALERTS:  # every expression evaluates (its result may be empty: nothing is wrong)
            await query(http, prometheus, alert.expr)
        for variable in variable_queries():  # label_values(metric, label)
            metric, label = variable[len("label_values("):-1].split(", ")
            assert await api(http, prometheus, f"label/{label}/values", **{"match[]": metric})
        rules = await api(http, prometheus, "rules")
        loaded = {r["name"]: r for g in rules["groups"] for r in g["rules"]}
        assert set(loaded) == {a.name for a in ALERTS}
        assert all(r["health"] == "ok" for r in loaded.values()), loaded
        firing = {r["name"]: r["state"] for r in loaded.values() if r["state"] != "inactive"}
        assert "PaiqNoSchedulerLeading" not in firing and "PaiqServiceUnhealthy" not in firing, firing


async def test_killing_the_scheduler_makes_no_leader_pending(platform: Platform, prometheus: str) -> None:
    """Separate: the scheduler's process; paiq up: the whole process, its scheduler with it (the module's last
    test: the platform is not used after it)."""
    if platform.shape == "separate":
        scheduler = platform.procs[1]  # start_platform starts status, scheduler, launcher, submit
        assert "services.scheduler" in " ".join(map(str, scheduler.args))
        instance = urlsplit(platform.ops["scheduler"]).netloc
    else:
        scheduler = platform.procs[0]
        instance = urlsplit(platform.api).netloc
    async with aiohttp.ClientSession() as http:
        await until("a scheduler leads", lambda: query(http, prometheus, 'sum(paiq_leading{service="scheduler"}) == 1'))
        scheduler.send_signal(signal.SIGKILL)
        scheduler.wait()

        async def no_leader() -> list[dict[str, Any]]:
            alerts = (await api(http, prometheus, "alerts"))["alerts"]
            return [a for a in alerts if a["labels"]["alertname"] == "PaiqNoSchedulerLeading"
                    and a["state"] in ("pending", "firing")]

        found = await until("PaiqNoSchedulerLeading pending", no_leader, limit_s=20)
        assert found[0]["labels"]["severity"] == "critical"
        down = await query(http, prometheus, 'up{job="paiq"} == 0')
        assert [d["metric"]["instance"] for d in down] == [instance]


async def _running(admin: Any, user: str, name: str) -> bool:
    job = await admin.job(user, name)
    return bool(job["jobStatus"]["state"] == "RUNNING")


async def _all_up(http: aiohttp.ClientSession, base: str, count: int) -> bool:
    up = await query(http, base, 'up{job="paiq"} == 1')
    return len(up) == count


