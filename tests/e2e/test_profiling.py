"""Job profiling on the whole platform, both shapes: a running task's usage through the REST API, the job
detail's summary, ``paiq top`` and the launcher's metrics (e2e platforms sample every second)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from services.cli.client import PaiqClient
from tests.e2e.conftest import job_config, logged_in
from tests.e2e.test_cli import paiq
from tests.infra import Platform, unique, wait_final

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(150)]

MIB = 1024 * 1024


async def sampled(client: PaiqClient, user: str, name: str, samples: int, limit_s: float = 60) -> dict[str, Any]:
    """The job's profile once every task has ``samples`` samples."""
    profile: dict[str, Any] = {}
    for _ in range(int(limit_s * 2)):
        profile = await client.profile(user, name)
        if profile["tasks"] and all(t["samples"] >= samples for t in profile["tasks"]):
            return profile
        await asyncio.sleep(0.5)
    raise AssertionError(f"not sampled {samples} times in {limit_s} s: {profile}")


async def busiest(client: PaiqClient, user: str, name: str, limit_s: float = 30) -> float:
    """The most CPU a sampled point of task main[0] shows, once one shows 0.7 cores or ``limit_s`` has passed: on
    a machine the rest of the suite loads, a busy loop may get only a third of a core for seconds (a full run
    once saw 0.32 in its last sample), but not for half a minute."""
    most = 0.0
    for _ in range(int(limit_s * 2)):
        points = (await client.task_profile(user, name, "main", 0))["points"]
        most = max([most, *(float(p["cpuCores"]) for p in points)])
        if most >= 0.7:
            break
        await asyncio.sleep(0.5)
    return most


async def metrics_text(platform: Platform) -> str:
    base = platform.ops.get("launcher", platform.api)
    async with aiohttp.ClientSession() as session, session.get(f"{base}/metrics") as resp:
        return await resp.text()


async def test_a_running_jobs_usage_is_seen_through_the_api_paiq_top_and_metrics(
        platform: Platform, admin: PaiqClient, tmp_path: Path) -> None:
    user = unique("prof")
    client = await logged_in(admin, user)
    name = unique("usage")
    config = job_config(name, command="(head -c 120m /dev/zero; sleep 300) | tail & while :; do :; done")
    config["taskRoles"][0].update({"cpuNumber": 1, "memoryMB": 512})
    await client.submit(user, json.dumps(config).encode())
    profile = await sampled(client, user, name, 3)

    [task] = profile["tasks"]
    assert (task["taskRoleName"], task["taskIndex"], task["nodeId"]) == ("main", 0, platform.node_id)
    assert task["cpuNumber"] == 1 and task["memoryLimitBytes"] == 512 * MIB and task["gpus"] == []
    assert task["last"]["cpuCores"] > 0, task
    assert await busiest(client, user, name) >= 0.7, "a burner is seen using a core whenever it gets one"
    assert task["memoryPeakBytes"] >= 110 * MIB, task
    assert task["last"]["networkReceiveBytesPerSecond"] >= 0, "on the task network a task's own counters are measured"
    assert profile["intervalSeconds"] == 1 and profile["usage"]["memoryPeakTask"] == "main[0]"
    assert profile["usage"]["gpuHoursHeld"] == 0 and profile["usage"]["gpuHoursUsed"] is None

    detail = await client.job(user, name)
    assert detail["jobStatus"]["usage"]["tasksSampled"] == 1
    assert detail["jobStatus"]["usage"]["cpuCoreHours"] > 0

    series = await client.task_profile(user, name, "main", 0)
    times = [p["time"] for p in series["points"]]
    assert len(times) >= 3 and times == sorted(times) and series["task"]["samples"] >= 3
    later = await client.task_profile(user, name, "main", 0, since_ms=times[-2])
    assert [p["time"] for p in later["points"]][:1] == times[-1:]

    home = tmp_path / "home"
    home.mkdir()
    login = await paiq(platform, home, "--user", user, "login", "--password-stdin", stdin="secret-pass\n")
    assert login.returncode == 0, login.stderr
    top = await paiq(platform, home, "top", name, "--once")
    assert top.returncode == 0, top.stderr
    lines = top.stdout.splitlines()
    assert lines[0].startswith(f"job {user}~{name}  RUNNING  attempt 0  sampled every 1 s"), lines
    row = next(line for line in lines if line.startswith("main[0]"))
    assert platform.node_id in row and "/ 512 MiB" in row, row
    assert any("closest to its memory limit: main[0]" in line for line in lines), lines

    text = await metrics_text(platform)
    assert f'paiq_node_tasks_sampled{{node="{platform.node_id}"}}' in text
    assert "paiq_node_cpu_used_cores" in text and "paiq_launcher_sampling_seconds_count" in text

    await client.stop(user, name)
    await wait_final(client, user, name)
    kept = await client.task_profile(user, name, "main", 0)
    assert len(kept["points"]) >= len(times), "the series outlives the container"
    missing = await paiq(platform, home, "top", unique("nosuch"), "--once")
    assert missing.returncode == 2 and "NoJobError" in missing.stderr
