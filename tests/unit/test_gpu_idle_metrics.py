"""docs, Job profiling (Idle GPUs and Metrics): "a task whose GPUs stay under PAIQ_GPU_IDLE_PERCENT (5)
utilisation for PAIQ_GPU_IDLE_SECONDS (1800) is flagged once per idle stretch: the launcher ... publishes
task.gpu_idle ..., counts it in paiq_gpu_idle_total{vc} ...; paiq_gpu_idle_tasks{node} is the number
flagged now", and the per-VC GPU-seconds held and used.

The launcher's real sampler, with the shipped settings (a sample every 10 s, 5%, 1,800 s), over a node
of two tasks: one holds GPU 0 at 0.5% (recorded NVML values), the other GPU 1 at 97%. The engine's
readings are 10 s apart, so half an hour of sampling takes no time.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from prometheus_client import REGISTRY

from services.launcher.deps import LauncherDeps
from services.launcher.engine.driver import ContainerInfo
from services.launcher.engine.enginestats import Counters, GpuReading
from services.launcher.engine.tasklabels import TaskLabels
from services.launcher.profiling.sampling import Sampler
from shared.bus.base import Bus
from shared.db.logs import LogStore
from shared.db.profiles import ProfileStore
from shared.db.store import Store
from shared.events import CloudEvent, TaskGpuIdle
from shared.settings.model import Settings
from tests.infra import unique
from tests.unit.test_sampling_bad_stats import MemoryProfiles

pytestmark = pytest.mark.unit

README_INTERVAL_S, README_IDLE_PERCENT, README_IDLE_S = 10, 5, 1800
T0_NS = 1_800_000_000 * 10**9


class SteppingEngine:
    """Two running task containers; each round's readings are README_INTERVAL_S after the last."""

    def __init__(self, node: str, vc: str) -> None:
        self.node, self.rounds = node, 0
        self.tasks = {f"c{gpu}": TaskLabels(job=f"alice~gpus~{gpu:08x}", attempt=0, role="train", index=0, node=node,
                                            user="alice", vc=vc, memory_mb=1024, cpus=1, gpus=(gpu,))
                      for gpu in (0, 1)}

    async def list_running(self, node_id: str) -> list[ContainerInfo]:
        self.rounds += 1
        return [ContainerInfo(id=cid, name=cid, running=True, labels=t.to_labels()) for cid, t in self.tasks.items()]

    async def counters(self, container_id: str) -> Counters:
        return Counters(t_ns=T0_NS + self.rounds * README_INTERVAL_S * 10**9, cpu_ns=self.rounds * 10**9,
                        mem=100 * 2**20, mem_limit=1024 * 2**20)


class RecordedGpus:
    def read(self) -> dict[int, GpuReading]:
        return {0: GpuReading(index=0, utilization_percent=0.5, memory_used_bytes=1_048_576_000),
                1: GpuReading(index=1, utilization_percent=97.0, memory_used_bytes=30_000_000_000)}


class Published:
    def __init__(self) -> None:
        self.events: list[CloudEvent] = []

    async def publish(self, events: Sequence[CloudEvent]) -> None:
        self.events.extend(events)


class RecordedJournal:
    def __init__(self) -> None:
        self.recorded: list[tuple[CloudEvent, bool]] = []

    async def record(self, events: Sequence[CloudEvent], *, version: int, session: object,
                     published: Sequence[bool]) -> None:
        self.recorded.extend(zip(events, published, strict=True))

    def touched(self) -> None:
        return None


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_an_idle_gpu_is_flagged_after_1800_s_under_5_percent_and_counted(tmp_path: Path) -> None:
    node, vc = unique("idle-node-"), unique("idlevc")
    settings = Settings.from_env({"PAIQ_NODE_ID": node, "PAIQ_DATA_DIR": str(tmp_path)})
    options = settings.launcher
    assert (options.profile_seconds, options.gpu_idle_percent, options.gpu_idle_seconds) == (
        README_INTERVAL_S, README_IDLE_PERCENT, README_IDLE_S), "the docs' defaults"
    engine, bus = SteppingEngine(node, vc), Published()
    journal = RecordedJournal()
    deps = LauncherDeps(settings=settings, store=cast(Store, SimpleNamespace(journal=journal)), bus=cast(Bus, bus),
                        driver=cast(Any, engine), logs=cast(LogStore, None))
    sampler = Sampler(deps, cast(Any, RecordedGpus()), cast(ProfileStore, MemoryProfiles()))

    # The first reading primes; each later one is a point of 10 s. After 1,790 s of points: not yet.
    for _ in range(1 + (README_IDLE_S - README_INTERVAL_S) // README_INTERVAL_S):
        await sampler.round()
    assert value("paiq_gpu_idle_total", vc=vc) == 0 and not bus.events
    assert value("paiq_gpu_idle_tasks", node=node) == 0
    await sampler.round()  # 1,800 s under 5%
    [flagged] = bus.events
    assert isinstance(flagged, TaskGpuIdle) and flagged.data.gpus == (0,), flagged
    assert flagged.data.idle_seconds == README_IDLE_S and flagged.data.below_percent == README_IDLE_PERCENT
    assert value("paiq_gpu_idle_total", vc=vc) == 1
    assert value("paiq_gpu_idle_tasks", node=node) == 1, "the one flagged now"
    for _ in range(5):
        await sampler.round()
    assert len(bus.events) == 1 and value("paiq_gpu_idle_total", vc=vc) == 1, "once per idle stretch"
    assert journal.recorded == [(flagged, True)], "journaled as published, for the stream's consumers that resume"

    points = engine.rounds - 1
    held = value("paiq_vc_gpu_seconds_held_total", vc=vc)
    assert held == pytest.approx(2 * points * README_INTERVAL_S), "two tasks holding one GPU each"
    assert value("paiq_vc_gpu_seconds_used_total", vc=vc) == pytest.approx(
        points * README_INTERVAL_S * (0.5 + 97.0) / 100)
    assert value("paiq_task_gpu_utilization_percent_count", vc=vc) == 2 * points
    assert value("paiq_node_gpu_utilization_percent", node=node, gpu="1") == 97.0
