"""docs, Containers and Configuration: "Stopping sends SIGTERM, then SIGKILL after PAIQ_STOP_GRACE_SECONDS"
(10 by default).

The launcher stops a task's container with the configured grace (recorded), and the Docker driver against
the real engine: a task that ignores SIGTERM is killed (137) once the grace has passed, not before; a task
that honours SIGTERM ends at once with it (143).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any, cast

import docker
import pytest

from services.launcher.deps import LauncherDeps
from services.launcher.engine.docker_driver import DockerDriver
from services.launcher.engine.driver import ContainerSpec
from services.launcher.stopping import stop_container
from shared.bus.memory import MemoryBus
from shared.db.logs import LogStore
from shared.db.store import Store
from shared.settings.model import Settings
from tests.infra import unique

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

README_GRACE_SECONDS = 10
GRACE = 2  # the engine's tests: short, the behaviour is the same


class RecordingDriver:
    def __init__(self) -> None:
        self.stops: list[tuple[str, int]] = []

    async def stop(self, container_id: str, grace_seconds: int) -> None:
        self.stops.append((container_id, grace_seconds))


@pytest.mark.parametrize(("env", "grace"), [({}, README_GRACE_SECONDS), ({"PAIQ_STOP_GRACE_SECONDS": "3"}, 3)])
async def test_the_launcher_stops_a_task_with_the_configured_grace(tmp_path: Path, env: dict[str, str],
                                                                   grace: int) -> None:
    driver = RecordingDriver()
    settings = Settings.from_env({"PAIQ_DATA_DIR": str(tmp_path), **env})
    deps = LauncherDeps(settings=settings, store=cast(Store, None), bus=MemoryBus(), driver=cast(Any, driver),
                        logs=cast(LogStore, None))
    await stop_container(deps, "c1", by_user=True)
    assert driver.stops == [("c1", grace)]



async def started(driver: DockerDriver, docker_client: docker.DockerClient, node_id: str, command: str) -> str:
    """A task container running ``command``, once it printed ``ready`` (its trap is set by then)."""
    spec = ContainerSpec.model_validate({
        "name": unique("paiq-grace-"), "image": "local/busybox:latest", "command": command, "env": {},
        "labels": {"paiq.job": "u~j", "paiq.node": node_id, "paiq.role": "r", "paiq.index": "0"},
        "cpus": 1, "memory_mb": 64, "shm_mb": 16})
    cid = await driver.run(spec)
    deadline = time.monotonic() + 30
    while "ready" not in await driver.logs_tail(cid, 5):
        assert time.monotonic() < deadline, "the task did not start"
        await asyncio.sleep(0.1)
    return cid


async def stop_and_wait(driver: DockerDriver, docker_client: docker.DockerClient, cid: str) -> tuple[float, int]:
    begun = time.monotonic()
    await driver.stop(cid, GRACE)
    result = await asyncio.to_thread(docker_client.api.wait, cid, timeout=30)
    return time.monotonic() - begun, int(result["StatusCode"])


async def test_a_task_that_ignores_sigterm_is_killed_after_the_grace(
        driver: DockerDriver, docker_client: docker.DockerClient, node_id: str) -> None:
    cid = await started(driver, docker_client, node_id, "trap '' TERM; echo ready; while :; do sleep 1; done")
    took, code = await stop_and_wait(driver, docker_client, cid)
    assert code == 137, "SIGKILL"
    assert GRACE - 0.2 <= took <= GRACE + 5, f"killed {took:.1f} s after SIGTERM"


async def test_a_task_that_honours_sigterm_ends_with_it_at_once(
        driver: DockerDriver, docker_client: docker.DockerClient, node_id: str) -> None:
    cid = await started(driver, docker_client, node_id, "trap 'exit 143' TERM; echo ready; while :; do sleep 0.1; done")
    took, code = await stop_and_wait(driver, docker_client, cid)
    assert code == 143, "SIGTERM"
    assert took < GRACE, f"it took {took:.1f} s: the grace was waited out"
