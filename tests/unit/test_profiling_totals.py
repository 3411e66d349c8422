"""Idle GPUs (shared.profiling.idle), a task's running totals and a job's usage summed from its tasks'
(shared.profiling.totals), as tables."""

from __future__ import annotations

from typing import Any

import pytest

from shared.profiling.idle import GpuIdleFinding, GpuIdlePolicy, IdleState, idle_sentence, watch
from shared.profiling.totals import JobUsage, TaskTotals, TaskUse, job_usage
from shared.profiling.usage import Usage

pytestmark = pytest.mark.unit

MIN = 60_000
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z, ms
POLICY = GpuIdlePolicy(below_percent=5.0, after_ms=30 * MIN)


def point(t: int, span: int = 10 * MIN, cpu: float = 1.0, mem: int = 100, **fields: Any) -> Usage:
    """A point ending ``t`` ms after T0."""
    return Usage(t_ms=T0 + t, span_ms=span, cpu=cpu, mem=mem, mem_peak=fields.pop("mem_peak", mem), **fields)


# --- the idle watch ---------------------------------------------------------------------------


def run_watch(utils: list[float | None], gpus: int = 1, policy: GpuIdlePolicy = POLICY,
              ) -> tuple[IdleState, dict[int, GpuIdleFinding]]:
    """Feed 10-minute points with these GPU utilisations (None: not measured); the findings by index."""
    state, findings = IdleState(), {}
    for i, util in enumerate(utils):
        state, finding = watch(state, point((i + 1) * 10 * MIN, gpu_util=util), gpus, policy)
        if finding is not None:
            findings[i] = finding
    return state, findings


def found(since_min: int, idle_min: int, peak: float, below: float = 5.0) -> GpuIdleFinding:
    return GpuIdleFinding(since_ms=T0 + since_min * MIN, idle_ms=idle_min * MIN, peak_percent=peak, below_percent=below)


@pytest.mark.parametrize(("utils", "findings"), [
    ([1.0, 1.0], {}),  # 20 minutes: not long enough
    ([1.0, 1.0, 1.0], {2: found(0, 30, 1.0)}),  # exactly the policy's 30 minutes
    ([1.0, 1.0, 1.0, 1.0, 1.0], {2: found(0, 30, 1.0)}),  # one finding per stretch
    ([0.0, 4.0, 2.0], {2: found(0, 30, 4.0)}),  # the highest utilisation of the stretch
    ([4.999, 4.999, 4.999], {2: found(0, 30, 5.0)}),  # rounded to 2 digits in the finding
    ([5.0, 5.0, 5.0, 5.0], {}),  # at the threshold is not under it
    ([1.0, 1.0, None, 1.0], {3: found(0, 40, 1.0)}),  # an unmeasured point neither counts nor ends it
    ([1.0, 1.0, 50.0, 1.0, 1.0], {}),  # a busy point ends the stretch
    ([1.0, 1.0, 50.0, 1.0, 1.0, 1.0], {5: found(30, 30, 1.0)}),  # the next stretch starts after it
    ([1.0, 1.0, 1.0, 50.0, 1.0, 1.0, 1.0], {2: found(0, 30, 1.0), 6: found(40, 30, 1.0)}),  # each flagged
    ([None, None, None, None], {}),
    ([50.0, 50.0, 50.0], {}),
])
def test_idle_stretches(utils: list[float | None], findings: dict[int, GpuIdleFinding]) -> None:
    assert run_watch(utils)[1] == findings


@pytest.mark.parametrize(("utils", "state"), [
    ([], IdleState()),
    ([1.0], IdleState(since_ms=T0, peak_percent=1.0, below_percent=5.0)),
    ([1.0, 3.0, 2.0], IdleState(since_ms=T0, peak_percent=3.0, flagged=True, below_percent=5.0)),
    ([1.0, 3.0, 2.0, None], IdleState(since_ms=T0, peak_percent=3.0, flagged=True, below_percent=5.0)),
    ([1.0, 3.0, 2.0, 80.0], IdleState()),
    ([80.0, 2.0], IdleState(since_ms=T0 + 10 * MIN, peak_percent=2.0, below_percent=5.0)),
    ([None, 2.0], IdleState(since_ms=T0 + 10 * MIN, peak_percent=2.0, below_percent=5.0)),
])
def test_idle_state_after(utils: list[float | None], state: IdleState) -> None:
    assert run_watch(utils)[0] == state


@pytest.mark.parametrize("gpus", [0, -1])
def test_a_task_without_gpus_is_never_idle(gpus: int) -> None:
    assert run_watch([0.0] * 10, gpus=gpus) == (IdleState(), {})


@pytest.mark.parametrize(("policy", "utils", "findings"), [
    (GpuIdlePolicy(below_percent=50.0, after_ms=10 * MIN), [40.0], {0: found(0, 10, 40.0, below=50.0)}),
    (GpuIdlePolicy(below_percent=1.0, after_ms=10 * MIN), [2.0, 2.0], {}),
    (GpuIdlePolicy(below_percent=5.0, after_ms=0), [0.0, 0.0], {0: found(0, 10, 0.0)}),
    (GpuIdlePolicy(), [0.0] * 2, {}),  # the default: under 5% for 30 minutes
    (GpuIdlePolicy(), [0.0] * 3, {2: found(0, 30, 0.0)}),
])
def test_idle_policies(policy: GpuIdlePolicy, utils: list[float | None], findings: dict[int, GpuIdleFinding]) -> None:
    assert run_watch(utils, policy=policy)[1] == findings


@pytest.mark.parametrize(("since", "now", "ms"), [(None, 100, 0), (T0, T0 + 5, 5), (T0, T0 - 5, 0)])
def test_idle_ms(since: int | None, now: int, ms: int) -> None:
    assert IdleState(since_ms=since).idle_ms(now) == ms


def flagged(peak: float = 1.234, below: float = 5.0) -> IdleState:
    return IdleState(since_ms=T0, peak_percent=peak, flagged=True, below_percent=below)


@pytest.mark.parametrize(("gpus", "state", "until", "sentence"), [
    (2, flagged(), T0 + 42 * MIN, "task worker[0] held 2 GPUs used under 5% (at most 1.2%) for 42 min"),
    (1, flagged(), T0 + 42 * MIN, "task worker[0] held 1 GPU used under 5% (at most 1.2%) for 42 min"),
    (4, flagged(peak=0.0, below=2.5), T0 + 30_500,
     "task worker[0] held 4 GPUs used under 2.5% (at most 0.0%) for 30 s"),
    (1, flagged(), T0 + 119 * MIN + 59_999, "task worker[0] held 1 GPU used under 5% (at most 1.2%) for 119 min"),
    (1, flagged(), T0 + 120 * MIN, "task worker[0] held 1 GPU used under 5% (at most 1.2%) for 2.0 h"),
    (1, flagged(), T0 + 150 * MIN, "task worker[0] held 1 GPU used under 5% (at most 1.2%) for 2.5 h"),
    (1, flagged(), T0 - MIN, "task worker[0] held 1 GPU used under 5% (at most 1.2%) for 0 s"),
])
def test_idle_sentence(gpus: int, state: IdleState, until: int, sentence: str) -> None:
    assert idle_sentence("worker[0]", gpus, state, until) == sentence


# --- a task's totals ---------------------------------------------------------------------------


def totals(points: list[Usage], gpus: int = 0) -> TaskTotals:
    out = TaskTotals()
    for p in points:
        out = out.plus(p, gpus)
    return out


@pytest.mark.parametrize(("points", "gpus", "expected"), [
    ([], 0, TaskTotals()),
    ([point(10_000, span=10_000, cpu=2.0, mem=7)], 0,
     TaskTotals(samples=1, first_ms=T0, last_ms=T0 + 10_000, cpu_seconds=20.0, mem_peak=7)),
    ([point(10_000, span=10_000, cpu=0.5, gpu_util=50.0)], 2,
     TaskTotals(samples=1, first_ms=T0, last_ms=T0 + 10_000, cpu_seconds=5.0, mem_peak=100,
                gpu_held_seconds=20.0, gpu_used_seconds=10.0, gpu_measured_seconds=20.0)),
    # held but not measured (no NVML): held counts, used and measured do not
    ([point(10_000, span=10_000, cpu=0.5, gpu_util=None)], 2,
     TaskTotals(samples=1, first_ms=T0, last_ms=T0 + 10_000, cpu_seconds=5.0, mem_peak=100,
                gpu_held_seconds=20.0)),
    # a GPU reading on a task without GPUs weighs nothing
    ([point(10_000, span=10_000, gpu_util=80.0)], 0,
     TaskTotals(samples=1, first_ms=T0, last_ms=T0 + 10_000, cpu_seconds=10.0, mem_peak=100)),
    ([point(10_000, span=10_000, cpu=1.0, mem=5, mem_peak=50, gpu_util=100.0),
      point(20_000, span=10_000, cpu=3.0, mem=40, gpu_util=None),
      point(30_000, span=10_000, cpu=0.0, mem=30, mem_peak=30, gpu_util=0.0)], 1,
     TaskTotals(samples=3, first_ms=T0, last_ms=T0 + 30_000, cpu_seconds=40.0, mem_peak=50,
                gpu_held_seconds=30.0, gpu_used_seconds=10.0, gpu_measured_seconds=20.0)),
])
def test_task_totals(points: list[Usage], gpus: int, expected: TaskTotals) -> None:
    assert totals(points, gpus) == expected


# --- a job's usage ------------------------------------------------------------------------------

HOUR = 3_600_000


def task(role: str = "worker", index: int = 0, gpus: int = 0, mem_limit: int = 0, points: list[Usage] | None = None,
         idle: IdleState | None = None) -> TaskUse:
    ps = [point(HOUR, span=HOUR)] if points is None else points
    return TaskUse(role=role, index=index, gpus=gpus, mem_limit=mem_limit, totals=totals(ps, gpus),
                   idle=idle or IdleState(), last=ps[-1] if ps else None)


NO_USE = JobUsage(tasks_sampled=0, cpu_core_hours=0.0, gpu_hours_held=0.0, gpu_hours_used=None,
                  gpu_utilization=None, memory_peak_bytes=0, memory_limit_bytes=0, memory_peak_task=None,
                  idle_gpu_tasks=(), warnings=())


def use(**fields: Any) -> JobUsage:
    return NO_USE.model_copy(update=fields)


@pytest.mark.parametrize(("tasks", "expected"), [
    ([], NO_USE),
    ([task(points=[])], use(memory_peak_task=None)),  # not sampled yet
    ([task(mem_limit=1000, points=[])], use(memory_limit_bytes=1000)),
    ([task(points=[point(HOUR, span=HOUR, cpu=2.0, mem=10)])],
     use(tasks_sampled=1, cpu_core_hours=2.0, memory_peak_bytes=10, memory_peak_task="worker[0]")),
    # GPUs held and measured
    ([task(gpus=2, points=[point(HOUR, span=HOUR, gpu_util=25.0)])],
     use(tasks_sampled=1, cpu_core_hours=1.0, gpu_hours_held=2.0, gpu_hours_used=0.5, gpu_utilization=25.0,
         memory_peak_bytes=100, memory_peak_task="worker[0]")),
    # held but never measured (no NVML): no figure for use, not zero
    ([task(gpus=2, points=[point(HOUR, span=HOUR, gpu_util=None)])],
     use(tasks_sampled=1, cpu_core_hours=1.0, gpu_hours_held=2.0, memory_peak_bytes=100,
         memory_peak_task="worker[0]")),
    # utilisation over the time measured only: one task measured at 50%, one not measured
    ([task("a", gpus=1, points=[point(HOUR, span=HOUR, gpu_util=50.0)]),
      task("b", gpus=1, points=[point(HOUR, span=HOUR, gpu_util=None)])],
     use(tasks_sampled=2, cpu_core_hours=2.0, gpu_hours_held=2.0, gpu_hours_used=0.5, gpu_utilization=50.0,
         memory_peak_bytes=100, memory_peak_task="a[0]")),
])
def test_job_usage(tasks: list[TaskUse], expected: JobUsage) -> None:
    assert job_usage(tasks) == expected


@pytest.mark.parametrize(("tasks", "peak", "limit", "name"), [
    # the task closest to its limit, not the biggest
    ([task("ps", 0, mem_limit=1000, points=[point(HOUR, mem=900)]),
      task("worker", 0, mem_limit=10_000, points=[point(HOUR, mem=5000)])], 900, 1000, "ps[0]"),
    ([task("ps", 0, mem_limit=1000, points=[point(HOUR, mem=100)]),
      task("worker", 1, mem_limit=10_000, points=[point(HOUR, mem=5000)])], 5000, 10_000, "worker[1]"),
    # a task without a known limit is never closer than one with a limit
    ([task("ps", 0, mem_limit=1000, points=[point(HOUR, mem=1)]),
      task("worker", 0, points=[point(HOUR, mem=10**9)])], 1, 1000, "ps[0]"),
    # no limits known: the biggest peak
    ([task("ps", 0, points=[point(HOUR, mem=10)]), task("worker", 3, points=[point(HOUR, mem=20)])],
     20, 0, "worker[3]"),
])
def test_job_memory_peak(tasks: list[TaskUse], peak: int, limit: int, name: str) -> None:
    got = job_usage(tasks)
    assert (got.memory_peak_bytes, got.memory_limit_bytes, got.memory_peak_task) == (peak, limit, name)


def test_idle_gpu_tasks_warn_the_job() -> None:
    idle = IdleState(since_ms=T0, peak_percent=0.5, flagged=True, below_percent=5.0)
    tasks = [task("worker", 0, gpus=2, points=[point(HOUR, span=HOUR, gpu_util=0.5)], idle=idle),
             task("worker", 1, gpus=2, points=[point(HOUR, span=HOUR, gpu_util=90.0)]),
             task("worker", 2, gpus=1, points=[point(HOUR, span=HOUR, gpu_util=1.0)],
                  idle=idle.model_copy(update={"flagged": False})),  # idle, not for long enough yet
             task("ps", 0, gpus=0, idle=idle)]  # a task without GPUs is never reported idle
    got = job_usage(tasks)
    assert got.idle_gpu_tasks == ("worker[0]",)
    assert got.warnings == ("task worker[0] held 2 GPUs used under 5% (at most 0.5%) for 60 min",)
