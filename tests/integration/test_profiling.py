"""Job profiling against the real Docker engine and MongoDB-wire server: the launcher's sampler.

A task burning a core shows about one core, a task holding 200 MB shows it, the series outlives the
container, an OOM kill's diagnostics carry the memory curve before it, and a task holding GPUs that stay
idle is flagged (its GPU readings recorded NVML values: this machine has no GPU).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path

import docker
import pytest
from prometheus_client import REGISTRY

from services.launcher.engine.enginestats import GpuReading
from services.launcher.stopping import stop_job_containers
from shared.bus.base import Router
from shared.db.profiles import ProfileStore, TaskProfile
from shared.events import TaskExited, TaskGpuIdle
from shared.records import JobRecord
from tests.integration.launcher_harness import Harness, harness, running_launcher

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

MIB = 1024 * 1024


class RecordedGpus:
    """GPU readings as NVML gave them on a node whose task left its GPU idle (recorded values): the
    sampler's only source of GPU figures on a machine without one."""

    def __init__(self, utilization: float) -> None:
        self.utilization = utilization

    def read(self) -> dict[int, GpuReading]:
        return {0: GpuReading(index=0, utilization_percent=self.utilization, memory_used_bytes=1_048_576_000),
                1: GpuReading(index=1, utilization_percent=97.0, memory_used_bytes=30_000_000_000)}


@pytest.fixture
async def h(tmp_path: Path, mongo_uri: str, docker_client: docker.DockerClient) -> AsyncIterator[Harness]:
    async with harness(tmp_path, mongo_uri, docker_client, PAIQ_PROFILE_SECONDS="1", PAIQ_GPU_DEVICES="none",
                       PAIQ_NODE_GPUS="0:V100,1:V100", PAIQ_GPU_IDLE_SECONDS="3", PAIQ_GPU_IDLE_PERCENT="5") as h, \
            running_launcher(h.settings, h.store, h.bus, gpu_reader=RecordedGpus(0.5)) as deps:
        h.deps = deps
        router = Router()
        router.on(TaskGpuIdle, h.record)
        await h.bus.subscribe("idle-observer", ["task.gpu_idle"], router)
        yield h


async def rounds_after(rounds: int = 2, limit_s: float = 30) -> None:
    """Until ``rounds`` more sampling rounds of the launcher have ended."""
    def count() -> float:
        return REGISTRY.get_sample_value("paiq_launcher_sampling_seconds_count") or 0.0

    start, deadline = count(), asyncio.get_running_loop().time() + limit_s
    while count() < start + rounds:
        assert asyncio.get_running_loop().time() < deadline, f"fewer than {rounds} sampling rounds in {limit_s} s"
        await asyncio.sleep(0.05)


async def profile_with(h: Harness, job: JobRecord, role: str, points: int, limit_s: float = 40) -> TaskProfile:
    profiles = ProfileStore(h.store.jobs.database)
    for _ in range(int(limit_s * 4)):
        found = await profiles.get(h.key(job, role))
        if found is not None and found.totals.samples >= points:
            return found
        await asyncio.sleep(0.25)
    raise AssertionError(f"{role}: fewer than {points} samples after {limit_s} s: {found}")


async def test_a_burner_shows_a_core_and_an_allocator_its_200_mb_and_both_outlive_their_containers(
        h: Harness) -> None:
    job, specs = await h.job("usage", roles=[
        {"name": "burn", "cpuNumber": 1, "memoryMB": 128, "command": "while :; do :; done"},
        {"name": "alloc", "cpuNumber": 1, "memoryMB": 512, "command": "(head -c 200m /dev/zero; sleep 120) | tail"},
    ])
    await h.launch(job, specs)
    burn = await profile_with(h, job, "burn", 4)
    alloc = await profile_with(h, job, "alloc", 4)
    cpu = [p.cpu for p in burn.series.points()[1:]]
    # A core at most (its limit), and most of one: less what a busy 2-core machine takes from it (0.56-0.79
    # seen while other work ran); the allocator, asleep once it holds its 200 MB, next to none.
    assert cpu and 0.5 <= sum(cpu) / len(cpu) <= 1.1 and max(cpu) <= 1.1, cpu
    idle = [p.cpu for p in alloc.series.points()[2:]]
    assert idle and max(idle) < 0.2, idle
    assert burn.mem_limit == 128 * MIB and burn.cpus == 1 and burn.gpus == ()
    assert 200 * MIB <= alloc.series.points()[-1].mem <= 512 * MIB, alloc.last
    assert alloc.totals.mem_peak >= 200 * MIB and alloc.mem_limit == 512 * MIB
    # On the task network a task has a network of its own: its counters are its own, measured.
    assert alloc.last is not None and alloc.last.net_rx is not None and alloc.last.net_rx >= 0
    assert alloc.last.gpu_util is None and alloc.totals.gpu_held_seconds == 0

    assert h.deps is not None
    await stop_job_containers(h.deps, job.id, by_user=True, attempt=job.attempt)
    for role in ("burn", "alloc"):
        def ended(e: TaskExited, r: str = role) -> bool:
            return e.subject == job.id and e.data.role == r
        await h.wait_for(TaskExited, ended)
    await rounds_after()  # rounds after the removal: nothing more is written, nothing is removed
    after = await ProfileStore(h.store.jobs.database).get(h.key(job, "burn"))
    assert after is not None and after.totals.samples >= burn.totals.samples
    assert len(after.series.points()) == after.totals.samples
    assert after.totals.cpu_seconds >= 0.8 * (after.totals.samples - 1)
    assert await h.store.delete_job(job.id), "deleting the job (a user's delete, or retention) removes its profiles"
    assert await ProfileStore(h.store.jobs.database).of_job(job.id, job.attempt) == []


async def test_an_oom_kill_says_the_memory_curve_before_it(h: Harness) -> None:
    job, specs = await h.job("oomcurve", roles=[{
        "name": "main", "memoryMB": 128,
        "command": "(head -c 60m /dev/zero; sleep 4; head -c 200m /dev/zero) | tail"}])
    await h.launch(job, specs)
    exited = await h.exited(job, limit_s=40)
    assert exited.data.exit_code == -1200
    first = exited.data.diagnostics.splitlines()[0]
    # The interval said is the samples' measured one: 1 s as asked on a quiet machine, more when a loaded engine
    # answers its stats slowly (seen once in a full run).
    assert re.match(r"memory before the OOM kill \(MB, a sample every [123] s, oldest first\): ", first), first
    curve = [int(v) for v in first.split(": ")[1].split(";")[0].split(", ")]
    assert max(curve) >= 55 and first.endswith("limit 128 MB"), first


async def test_a_task_holding_an_idle_gpu_is_flagged_once_and_a_busy_one_never(h: Harness) -> None:
    job, specs = await h.job("idlegpu", roles=[{"name": "train", "taskNumber": 2, "gpuNumber": 1, "memoryMB": 128,
                                                "command": "sleep 60"}])
    specs = [s.model_copy(update={"gpus": (s.index,)}) for s in specs]  # GPU 0 idle, GPU 1 busy (recorded)
    await h.launch(job, specs)
    event = await h.wait_for(TaskGpuIdle, lambda e: e.subject == job.id, limit_s=30)
    assert (event.data.role, event.data.index, event.data.gpus) == ("train", 0, (0,))
    assert event.data.idle_seconds >= 3 and event.data.below_percent == 5 and event.data.peak_percent == 0.5
    assert event.data.user == "tester" and event.data.virtual_cluster == "default"
    idle = await profile_with(h, job, "train", 6)
    assert idle.idle.flagged and idle.gpus == (0,)
    assert idle.last is not None and idle.last.gpu_util == 0.5 and idle.last.gpu_mem == 1_048_576_000
    profiles = await ProfileStore(h.store.jobs.database).of_job(job.id, job.attempt)
    busy = next(p for p in profiles if p.index == 1)
    assert not busy.idle.flagged and busy.last is not None and busy.last.gpu_util == 97.0
    assert busy.totals.gpu_used_seconds == pytest.approx(0.97 * busy.totals.gpu_held_seconds, rel=0.01)
    # idle for another whole PAIQ_GPU_IDLE_SECONDS (3) since it was flagged: still one event
    await profile_with(h, job, "train", idle.totals.samples + 4)
    assert [e.data.index for e in h.of(TaskGpuIdle, job.id)] == [0], "one event per idle stretch"
