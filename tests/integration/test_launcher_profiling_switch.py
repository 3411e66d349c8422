"""docs, Job profiling and Configuration: "Each launcher samples every running task of its node every
PAIQ_PROFILE_SECONDS (10; 0 turns it off)".

The launcher service's own start (against the MongoDB-wire server, with an engine that has no containers),
its loops as it asks for them: a sampling loop every 10 s by default, every N s when set, none at 0, while
its other loops (heartbeat, reconcile, the engine's exits) are there in every case.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, cast

import pytest

from services.launcher.deps import LauncherDeps
from services.launcher.engine.driver import ContainerExit, ContainerInfo
from services.launcher.service import start_launcher
from shared.bus.memory import MemoryBus
from shared.db.logs import LogStore
from shared.db.store import Store, open_store
from shared.settings.model import Settings
from tests.infra import unique
from tests.integration.recordingvitals import RecordingVitals

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

README_PROFILE_SECONDS = 10



class EmptyEngine:
    """An engine without containers."""

    async def list_managed(self, node_id: str) -> list[ContainerInfo]:
        return []

    async def list_running(self, node_id: str) -> list[ContainerInfo]:
        return []

    async def ensure_network(self, name: str) -> str:
        return "172.31.0.1"

    async def written(self, node_id: str) -> dict[str, int]:
        return {}

    async def exits(self) -> AsyncIterator[ContainerExit]:
        await asyncio.Event().wait()
        yield  # type: ignore[misc]

    async def close(self) -> None:
        return None


@pytest.fixture
async def store(mongo_uri: str) -> AsyncIterator[Store]:
    async with open_store(mongo_uri, unique("profswitch_")) as s:
        yield s


async def loops_of(store: Store, tmp: Path, **env: str) -> dict[str, float | None]:
    node = unique("prof-")
    settings = Settings.from_env({"PAIQ_NODE_ID": node, "PAIQ_DATA_DIR": str(tmp), "PAIQ_QUEUE_PREFIX": unique("q"),
                                  "PAIQ_GPU_DEVICES": "none", **env})
    vitals = RecordingVitals()
    async with AsyncExitStack() as stack:
        deps = LauncherDeps(settings=settings, store=store, bus=MemoryBus(), driver=cast(Any, EmptyEngine()),
                            logs=LogStore(store.jobs.database))
        await start_launcher(stack, deps, vitals)
    return {name.replace(node, "NODE"): period for name, period in vitals.loops.items()}


@pytest.mark.parametrize(("env", "sampling"), [
    ({}, README_PROFILE_SECONDS),
    ({"PAIQ_PROFILE_SECONDS": "3"}, 3),
    ({"PAIQ_PROFILE_SECONDS": "0"}, None),
])
async def test_the_sampling_loop_runs_at_its_setting_and_not_at_all_at_0(
        store: Store, tmp_path: Path, env: dict[str, str], sampling: int | None) -> None:
    loops = await loops_of(store, tmp_path, **env)
    assert loops.get("launcher-sampling-NODE") == sampling, loops
    assert {"launcher-heartbeat-NODE", "launcher-reconcile-NODE", "launcher-exits-NODE"} <= loops.keys(), loops
    if sampling is None:
        assert not [name for name in loops if "sampl" in name or "profil" in name], loops


@pytest.mark.parametrize(("env", "period"), [
    ({}, 30),
    ({"PAIQ_TASK_DISK_CHECK_SECONDS": "2"}, 2),
    ({"PAIQ_TASK_DISK_MB": "0"}, None),
])
async def test_the_disk_check_runs_at_its_setting_and_not_at_all_without_a_limit(
        store: Store, tmp_path: Path, env: dict[str, str], period: int | None) -> None:
    loops = await loops_of(store, tmp_path, **env)
    assert loops.get("launcher-disks-NODE") == period, loops
