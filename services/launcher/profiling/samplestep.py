"""One task's profile after one reading: the sampler's decision, pure (no engine, store or clock).

The first reading of a task only primes (usage is a difference of counters); each later one makes a point
that joins the series (shared.profiling.series), the totals and the idle-GPU watch, and says what to
write and whether the task just crossed the idle threshold.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict

from services.launcher.engine.enginestats import Counters, GpuReading, usage_between
from services.launcher.engine.tasklabels import TaskLabels
from shared.db.profiles import ProfileWrite, TaskProfile
from shared.profiling.idle import GpuIdleFinding, GpuIdlePolicy, watch
from shared.profiling.series import add

MIB = 1024 * 1024


class Step(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    profile: TaskProfile
    write: ProfileWrite | None = None
    finding: GpuIdleFinding | None = None


def new_profile(task: TaskLabels, node_id: str, interval_ms: int, reading: Counters) -> TaskProfile:
    return TaskProfile(
        **task.ref.fields(), node_id=node_id, vc=task.vc, cpus=task.cpus, gpus=task.gpus, interval_ms=interval_ms,
        mem_limit=task.memory_mb * MIB if task.memory_mb else reading.mem_limit)


def advance(profile: TaskProfile, stored: bool, prev: Counters | None, cur: Counters,
            gpus: Mapping[int, GpuReading], policy: GpuIdlePolicy) -> Step:
    """``profile`` after the reading ``cur`` (``prev``: the task's previous reading, None after a start or
    a restart of the launcher); ``stored``: whether its document exists already."""
    readings = [gpus[i] for i in profile.gpus if i in gpus]
    point = None if prev is None else usage_between(prev, cur, readings if len(readings) == len(profile.gpus) else ())
    if point is None:
        return Step(profile=profile)
    added = add(profile.series, point)
    idle, finding = watch(profile.idle, point, len(profile.gpus), policy)
    after = profile.model_copy(update={"series": added.series, "last": point, "idle": idle,
                                       "totals": profile.totals.plus(point, len(profile.gpus))})
    return Step(profile=after, write=ProfileWrite(profile=after, new=not stored, added=added), finding=finding)
