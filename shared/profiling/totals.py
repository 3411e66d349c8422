"""Running totals of a task's usage, and a job's usage summed from its tasks'."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from shared.profiling.idle import IdleState, idle_sentence
from shared.profiling.usage import Usage


class TaskTotals(BaseModel):
    """What one task used since it was first sampled: core-seconds, GPU-seconds held (GPUs x time) and used
    (GPUs x time x utilisation), the highest memory seen."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    samples: int = 0
    first_ms: int | None = None
    last_ms: int | None = None
    cpu_seconds: float = 0.0
    mem_peak: int = 0
    gpu_held_seconds: float = 0.0
    gpu_used_seconds: float = 0.0
    gpu_measured_seconds: float = 0.0  # of the held ones, how many had a utilisation reading

    def plus(self, point: Usage, gpus: int) -> TaskTotals:
        seconds = point.span_ms / 1000
        held = gpus * seconds
        used = 0.0 if point.gpu_util is None else held * point.gpu_util / 100
        return TaskTotals(
            samples=self.samples + 1,
            first_ms=point.start_ms if self.first_ms is None else self.first_ms, last_ms=point.t_ms,
            cpu_seconds=self.cpu_seconds + point.cpu * seconds, mem_peak=max(self.mem_peak, point.mem_peak),
            gpu_held_seconds=self.gpu_held_seconds + held, gpu_used_seconds=self.gpu_used_seconds + used,
            gpu_measured_seconds=self.gpu_measured_seconds + (0.0 if point.gpu_util is None else held))


class TaskUse(BaseModel):
    """One task's profile as the job's summary reads it (no series)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    role: str
    index: int
    gpus: int
    mem_limit: int  # bytes; 0: none known
    totals: TaskTotals
    idle: IdleState
    last: Usage | None = None

    @property
    def name(self) -> str:
        return f"{self.role}[{self.index}]"


class JobUsage(BaseModel):
    """A job's attempt, summed over its tasks: what it held and what it used."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    tasks_sampled: int
    cpu_core_hours: float
    gpu_hours_held: float
    gpu_hours_used: float | None  # None: no GPU utilisation was measured (no NVML on the nodes)
    gpu_utilization: float | None  # percent: used / held, over the time measured
    memory_peak_bytes: int  # the task closest to its limit: its peak,
    memory_limit_bytes: int  # its limit (0: none known)
    memory_peak_task: str | None  # and its name
    idle_gpu_tasks: tuple[str, ...]
    warnings: tuple[str, ...]


def job_usage(tasks: Sequence[TaskUse]) -> JobUsage:
    held = sum(t.totals.gpu_held_seconds for t in tasks)
    measured = sum(t.totals.gpu_measured_seconds for t in tasks)
    used = sum(t.totals.gpu_used_seconds for t in tasks)
    closest = max(tasks, key=lambda t: (t.totals.mem_peak / t.mem_limit if t.mem_limit else 0.0, t.totals.mem_peak),
                  default=None)
    idle = [t for t in tasks if t.idle.flagged and t.gpus > 0]
    return JobUsage(
        tasks_sampled=sum(1 for t in tasks if t.totals.samples),
        cpu_core_hours=sum(t.totals.cpu_seconds for t in tasks) / 3600,
        gpu_hours_held=held / 3600, gpu_hours_used=used / 3600 if measured else None,
        gpu_utilization=100 * used / measured if measured else None,
        memory_peak_bytes=closest.totals.mem_peak if closest else 0,
        memory_limit_bytes=closest.mem_limit if closest else 0,
        memory_peak_task=closest.name if closest and closest.totals.samples else None,
        idle_gpu_tasks=tuple(t.name for t in idle),
        warnings=tuple(idle_sentence(t.name, t.gpus, t.idle, t.totals.last_ms or 0) for t in idle))
