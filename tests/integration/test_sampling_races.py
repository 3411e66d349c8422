"""The sampler against the real Docker engine while task containers exit and are removed under it.

A stats request in flight while its container is force-removed (as the launcher removes a task's
container once its exit is reported) is answered 200 with an empty body, which the SDK fails to decode
(``JSONDecodeError: Expecting value``); one that waits while its container exits gets a reading of year
1; one just after gets a 404. Each costs that container's sample only: every round succeeds, the
sampling loop stays ``ok`` (the launcher's /healthz), and the other tasks are sampled.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import docker
import pytest
import requests
from prometheus_client import REGISTRY

from services.launcher.deps import LauncherDeps
from services.launcher.engine.docker_driver import DockerDriver
from services.launcher.engine.tasklabels import TaskLabels
from services.launcher.profiling.sampling import Sampler
from services.launcher.service import start_launcher
from shared.db.profiles import ProfileStore
from shared.events import TaskExited
from shared.ops.vitals import Vitals
from shared.taskref import TaskRef
from tests.integration.launcher_harness import Harness, harness

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

IMAGE = "local/busybox:latest"
JOB = "tester~races~00000000"


@pytest.fixture
async def h(tmp_path: Path, mongo_uri: str, docker_client: docker.DockerClient) -> AsyncIterator[Harness]:
    async with harness(tmp_path, mongo_uri, docker_client, PAIQ_PROFILE_SECONDS="1", PAIQ_GPU_DEVICES="none") as h:
        yield h


def _spy_on_stats(driver: DockerDriver) -> list[BaseException]:
    """What the engine's stats answers made the SDK raise (recorded, then raised on as before)."""
    raised: list[BaseException] = []
    api: Any = driver._client.api
    original = api.stats

    def stats(*args: Any, **kwargs: Any) -> Any:
        try:
            return original(*args, **kwargs)
        except Exception as e:
            raised.append(e)
            raise

    api.stats = stats
    return raised


def _rounds() -> float:
    """Sampling rounds this process has run (the launcher's own count)."""
    return REGISTRY.get_sample_value("paiq_launcher_sampling_seconds_count") or 0.0


async def rounds_after(count: Callable[[], float], rounds: int = 2, limit_s: float = 30) -> None:
    """Until ``rounds`` more sampling rounds have ended."""
    start, deadline = count(), time.monotonic() + limit_s
    while count() < start + rounds:
        assert time.monotonic() < deadline, f"fewer than {rounds} sampling rounds in {limit_s} s"
        await asyncio.sleep(0.05)


def _skipped(node: str) -> float:
    return REGISTRY.get_sample_value("paiq_launcher_samples_skipped_total", {"node": node}) or 0.0


async def test_containers_removed_while_sampled_cost_their_samples_never_a_round(
        h: Harness, docker_client: docker.DockerClient) -> None:
    """Rounds back to back over a steady task and tasks force-removed in the middle of rounds, until the
    engine has answered a removed container's stats with an empty body: no round fails, the loop stays
    ok, the steady task keeps being sampled."""
    driver = DockerDriver.from_url(None)
    raised = _spy_on_stats(driver)
    deps = LauncherDeps(settings=h.settings, store=h.store, bus=h.bus, driver=driver, logs=h.logs)
    sampler = Sampler(deps, None, h.store.profiles)
    failures: list[BaseException] = []

    rounds = [0]

    async def sampling_round() -> None:
        try:
            await sampler.round()
        except Exception as e:
            failures.append(e)
            raise
        finally:
            rounds[0] += 1

    def start(role: str) -> str:
        labels = TaskLabels(job=JOB, attempt=0, role=role, index=0, node=h.node_id,
                            user="tester", vc="default", memory_mb=64, cpus=1).to_labels()
        return str(docker_client.containers.run(IMAGE, ["sleep", "60"], detach=True, labels=labels).id)

    vitals, loop_name = Vitals(), f"sampling-{h.node_id}"
    before = _skipped(h.node_id)
    async with AsyncExitStack() as stack:
        stack.push_async_callback(driver.close)
        await asyncio.to_thread(start, "steady")
        vitals.periodic(stack, loop_name, 0.02, sampling_round)
        removed, unhealthy = 0, []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (removed < 8 or not any(isinstance(e, ValueError) for e in raised)):
            victim = await asyncio.to_thread(start, f"doomed{removed}")
            await asyncio.sleep(0.25)  # a round or two sample it, and one is waiting on its stats...
            await asyncio.to_thread(docker_client.api.remove_container, victim, force=True)  # ...now
            removed += 1
            report = await vitals.report()
            if report.loops[loop_name] != "ok":
                unhealthy.append(report.loops[loop_name])
        await rounds_after(lambda: rounds[0])  # the last removal's rounds are over
        last = await vitals.report()
    kinds = sorted({type(e).__name__ for e in raised})
    assert any(isinstance(e, requests.exceptions.JSONDecodeError) for e in raised), \
        f"the engine never answered a removed container's stats with an empty body in {removed} removals: {kinds}"
    assert failures == [] and unhealthy == [] and last.loops[loop_name] == "ok", (failures, unhealthy, last)
    steady = await ProfileStore(h.store.jobs.database).get(TaskRef(job_id=JOB, attempt=0, role="steady", index=0))
    assert steady is not None and steady.totals.samples >= 2, steady
    assert _skipped(h.node_id) - before >= 1, "the lost samples are counted"


async def test_a_launcher_whose_tasks_exit_and_are_removed_while_sampled_stays_healthy(h: Harness) -> None:
    """The launcher as it runs (sampling every second), a job whose tasks exit one after another and are
    removed by the launcher as their exits are reported: its sampling loop is ok throughout."""
    vitals = Vitals()
    async with AsyncExitStack() as stack:
        driver = DockerDriver.from_url(None)
        stack.push_async_callback(driver.close)
        deps = LauncherDeps(settings=h.settings, store=h.store, bus=h.bus, driver=driver, logs=h.logs)
        await start_launcher(stack, deps, vitals, None)
        h.deps = deps
        job, specs = await h.job("exits", roles=[
            {"name": "main", "taskNumber": 8, "memoryMB": 128,
             "command": "sleep $(( PAI_TASK_INDEX % 4 + 1 )).$(( PAI_TASK_INDEX * 13 % 10 ))"}])
        await h.launch(job, specs)
        loop_name = f"launcher-sampling-{h.node_id}"
        seen: set[str] = set()
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and len({e.data.index for e in h.of(TaskExited, job.id)}) < 8:
            report = await vitals.report()
            seen.add(report.loops.get(loop_name, "absent"))
            await asyncio.sleep(0.05)
        await rounds_after(_rounds)  # rounds after the last removal
        seen.add((await vitals.report()).loops.get(loop_name, "absent"))
        assert {(e.data.index, e.data.exit_code) for e in h.of(TaskExited, job.id)} == {(i, 0) for i in range(8)}
        assert seen == {"ok"}, seen
