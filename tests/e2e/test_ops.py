"""What operators scrape and probe: /healthz and Prometheus /metrics of every service."""

from __future__ import annotations

import json
import os
import signal
import urllib.request
from pathlib import Path

import aiohttp
import docker
import pytest

from services.cli.client import PaiqClient
from tests.e2e.conftest import job_config
from tests.infra import Platform, secantus_processes, start_platform, stop_platform, wait_final

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

# Which service owns which metric (in `paiq up` they all show on the API port).
OWNED = {
    "status": ['paiq_jobs{state="SUCCEEDED",vc="default"}'],
    "scheduler": ["paiq_scheduler_decision_seconds_count", 'paiq_queue_wait_seconds_count{vc="default"}',
                  'paiq_node_gpus{kind="free",node='],
    "launcher": ["paiq_launch_seconds_count", "paiq_events_handled_total{"],
}


async def get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as s, s.get(url) as resp:
        return resp.status, await resp.text()


async def test_every_service_answers_health_and_metrics(platform: Platform, api: PaiqClient, user: str) -> None:
    await api.submit(user, json.dumps(job_config("measured", command="true")).encode())
    await wait_final(api, user, "measured")
    await _wait_for_gauges(platform)
    bases = platform.ops if platform.shape == "separate" else dict.fromkeys(OWNED, platform.api)
    assert set(bases) == set(OWNED)
    for service, base in bases.items():
        status, body = await get(base + "/healthz")
        health = json.loads(body)
        assert status == 200 and health["status"] == "ok", (service, health)
        assert health["checks"] == {"database": "ok", "broker": "ok"}, (service, health)
        assert health["loops"] and set(health["loops"].values()) == {"ok"}, (service, health)
        if service == "scheduler":
            assert health["roles"] == {"scheduler": "leader"}, health
        status, body = await get(base + "/livez")
        assert status == 200 and json.loads(body)["status"] == "ok", (service, body)
        status, text = await get(base + "/metrics")
        assert status == 200
        for metric in OWNED[service]:
            assert metric in text, f"{service} does not expose {metric}"
    status, text = await get(platform.api + "/metrics")
    assert status == 200 and "paiq_events_handled_total" in text


async def _wait_for_gauges(platform: Platform) -> None:
    """The job gauges are refreshed by the status service's periodic pass (every 2 s in tests)."""
    import asyncio

    base = platform.ops.get("status", platform.api)
    for _ in range(50):
        _, text = await get(base + "/metrics")
        if 'paiq_jobs{state="SUCCEEDED",vc="default"}' in text:
            return
        await asyncio.sleep(0.2)


def _embedded_database_pids(platform: Platform) -> list[int]:
    """The SecantusDB that this ``paiq up`` started (its storage lies under the platform's data dir)."""
    data_dir = platform.env["PAIQ_DATA_DIR"].encode()
    return [pid for pid, args in secantus_processes().items() if any(data_dir in a for a in args)]


def test_paiq_up_stops_non_zero_when_its_embedded_database_dies(tmp_path: Path,
                                                                docker_client: docker.DockerClient) -> None:
    platform = start_platform("all-in-one", tmp_path / "up")
    try:
        [db] = _embedded_database_pids(platform)
        os.kill(db, signal.SIGKILL)
        [up] = platform.procs
        assert up.wait(30) == 1, "paiq up exits 1 when its database is gone"
        log = (platform.workdir / "paiq-up.log").read_text()
        # its own shutdown, not the 10 s bound's forced exit: it calls the gone database no more on its way out
        # (handing its leases over waited out each call's deadline, and loaded, the whole took over 10 s)
        assert "paiq up: stopped: the embedded MongoDB-wire server exited with code -9" in log, log[-2000:]
        assert "could not release" not in log and "did not answer while closing" not in log, log[-2000:]
    finally:
        stop_platform(platform, docker_client)


def test_ctrl_c_stops_paiq_up_and_its_database_cleanly(tmp_path: Path, docker_client: docker.DockerClient) -> None:
    """A terminal's Ctrl-C signals the whole foreground process group: the database, in a session of its
    own, is not hit by it, and paiq up stops it last, exiting 0 without reporting it as a failure."""
    platform = start_platform("all-in-one", tmp_path / "up", new_session=True)
    try:
        [db] = _embedded_database_pids(platform)
        [up] = platform.procs
        os.killpg(up.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
        assert up.wait(30) == 0
        log = (platform.workdir / "paiq-up.log").read_text()
        assert "fatal" not in log and "exited with code" not in log, log[-2000:]
        assert not Path(f"/proc/{db}").exists() or "zombie" in Path(f"/proc/{db}/status").read_text().lower()
    finally:
        stop_platform(platform, docker_client)


def test_paiq_up_says_what_its_database_holds_against_its_cache(tmp_path: Path,
                                                                docker_client: docker.DockerClient) -> None:
    """A cache smaller than what is stored: paiq up says so at start, with the remedy; both figures are exported."""
    platform = start_platform("all-in-one", tmp_path / "up", PAIQ_EMBEDDED_DB_CACHE="8M")
    try:
        log = (platform.workdir / "paiq-up.log").read_text()
        assert "of its 8 MB cache" in log and "PAIQ_EMBEDDED_DB_CACHE" in log, log[-3000:]
        scraped = urllib.request.urlopen(f"{platform.api}/metrics", timeout=10).read().decode()
        storage = str(platform.workdir / "data" / "db")
        samples = {line.split("{")[0]: float(line.rsplit(" ", 1)[1]) for line in scraped.splitlines()
                   if line.startswith("paiq_embedded_db_") and storage in line}
        assert samples["paiq_embedded_db_cache_bytes"] == 8 * 1024 * 1024
        assert samples["paiq_embedded_db_stored_bytes"] > 0.7 * 8 * 1024 * 1024
    finally:
        stop_platform(platform, docker_client)
