"""A finished job's contributions to the daily usage rollups, per UTC day.

What a task held: from its container's start (``started_ms``) to its end (``completed_ms``; a task still
being stopped when its job ended, to the job's end), its GPUs and the CPUs its role asks for, for that
long. A task that never started held nothing here (its placement's wait for an image is not counted).
Every attempt counts: a retried job's earlier attempts and a preempted attempt each for what their tasks
held until their containers were gone.

What a task used comes from the launcher's profiler (:class:`shared.profiling.totals.TaskTotals`): its
core-seconds, and its GPU-seconds used (held GPUs x time x utilisation) of those measured (held with a
utilisation reading; none on a node without NVML). Those totals cover the task's whole run; they are
spread over its days in proportion to the time it held on each, and never exceed what it held that day.
A task re-run in place (protocol v2's taskRetryCount) keeps only its current run's times in its record;
each earlier run is counted over the span its profile sampled (to within a sampling interval at each end;
not at all with profiling off).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from pydantic import BaseModel, ConfigDict

from shared.jobconfig.model import JobConfig
from shared.profiling.totals import TaskTotals
from shared.records import AttemptRecord, JobRecord, TaskRecord
from shared.usage.days import day_of, split_days

RunKey = tuple[int, str, int, int]  # (attempt, role, index, run of the task: TaskRef.task_attempt)


class Amounts(BaseModel):
    """Sums over some tasks and days: seconds of GPUs and cores held and used, jobs and attempts ended."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    gpu_held_s: float = 0.0
    gpu_measured_s: float = 0.0  # of the GPU-seconds held, those with a utilisation reading
    gpu_used_s: float = 0.0  # held x utilisation, over the measured ones
    cpu_held_s: float = 0.0  # cores asked x time
    cpu_used_s: float = 0.0  # cores busy x time, as sampled
    jobs: int = 0  # jobs that ended that day
    attempts: int = 0  # attempts that ended that day (a job's last one included)

    def plus(self, other: Amounts) -> Amounts:
        return Amounts(**{name: getattr(self, name) + getattr(other, name) for name in Amounts.model_fields})

    def increments(self) -> dict[str, float | int]:
        """The fields to add, as a store's ``$inc`` (those that are not zero)."""
        return {name: value for name, value in self.model_dump().items() if value}


class DayUsage(BaseModel):
    """What a (virtual cluster, user) used on a UTC day: one row of the rollups."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    day: str
    vc: str
    user: str
    amounts: Amounts


def _cpus(config: JobConfig, role: str) -> int:
    try:
        return config.role(role).cpu_number
    except KeyError:
        return 0


def held_days(start_ms: int, end_ms: int, gpus: int, cpus: int, totals: TaskTotals | None) -> dict[str, Amounts]:
    """What one run of a task held over ``[start_ms, end_ms)`` by day, and its profile's use (``totals``)
    spread over those days in proportion to the time held on each."""
    if end_ms <= start_ms:
        return {}
    total_ms = end_ms - start_ms
    out: dict[str, Amounts] = {}
    for span in split_days(start_ms, end_ms):
        seconds, share = span.ms / 1000, span.ms / total_ms
        held = gpus * seconds
        measured = min(held, totals.gpu_measured_seconds * share) if totals else 0.0
        used = min(measured, totals.gpu_used_seconds * share) if totals else 0.0
        out[span.day] = Amounts(gpu_held_s=held, gpu_measured_s=measured, gpu_used_s=used, cpu_held_s=cpus * seconds,
                                cpu_used_s=totals.cpu_seconds * share if totals else 0.0)
    return out


def current_run(task: TaskRecord) -> int:
    """Which run of the task its record describes (0 unless it was re-run in place: taskRetryCount)."""
    return task.retries


def task_days(task: TaskRecord, cpus: int, ended_ms: int | None, attempt: int,
              runs: Mapping[RunKey, TaskTotals]) -> dict[str, Amounts]:
    """One task's contributions by day: its current run from its start to its end (``ended_ms`` where the
    task has no end of its own), with its profile's use; and each earlier run of it (re-run in place), whose
    times only its profile kept, over the span it was sampled."""
    gpus, now = len(task.gpus), current_run(task)
    out: dict[str, Amounts] = {}
    for run in range(now):
        earlier = runs.get((attempt, task.role, task.index, run))
        if earlier is not None and earlier.first_ms is not None and earlier.last_ms is not None:
            _merge(out, held_days(earlier.first_ms, earlier.last_ms, gpus, cpus, earlier))
    end = task.completed_ms if task.completed_ms is not None else ended_ms
    if task.started_ms is not None and end is not None:
        _merge(out, held_days(task.started_ms, end, gpus, cpus, runs.get((attempt, task.role, task.index, now))))
    return out


def _merge(into: dict[str, Amounts], more: Mapping[str, Amounts]) -> None:
    for day, amounts in more.items():
        into[day] = into[day].plus(amounts) if day in into else amounts


def _attempt_days(config: JobConfig, attempt: int, tasks: Iterable[TaskRecord], ended_ms: int | None,
                  runs: Mapping[RunKey, TaskTotals]) -> dict[str, Amounts]:
    out: dict[str, Amounts] = {}
    for t in tasks:
        _merge(out, task_days(t, _cpus(config, t.role), ended_ms, attempt, runs))
    if ended_ms is not None:
        _merge(out, {day_of(ended_ms): Amounts(attempts=1)})
    return out


def job_days(job: JobRecord, archived: Sequence[AttemptRecord],
             runs: Mapping[RunKey, TaskTotals]) -> tuple[DayUsage, ...]:
    """What a finished job adds to the rollups, oldest day first: each earlier attempt (``archived``) and
    its last one (``job.tasks``), and the job itself on the day it ended."""
    days: dict[str, Amounts] = {}
    for past in archived:
        if past.attempt != job.attempt:  # the current attempt is the job's own tasks
            _merge(days, _attempt_days(job.config, past.attempt, past.tasks, past.completed_ms, runs))
    _merge(days, _attempt_days(job.config, job.attempt, job.tasks, job.completed_ms, runs))
    if job.completed_ms is not None:
        _merge(days, {day_of(job.completed_ms): Amounts(jobs=1)})
    return tuple(DayUsage(day=day, vc=job.virtual_cluster, user=job.user, amounts=days[day]) for day in sorted(days))


def merged(rows: Iterable[DayUsage]) -> dict[tuple[str, str, str], Amounts]:
    """Rows summed by (day, vc, user): many jobs' contributions as one increment per rollup document."""
    out: dict[tuple[str, str, str], Amounts] = {}
    for r in rows:
        key = (r.day, r.vc, r.user)
        out[key] = out[key].plus(r.amounts) if key in out else r.amounts
    return out
