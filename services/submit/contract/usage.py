"""The usage report's shapes (``GET /api/v1/usage``, paiq's extension): rows per UTC day and virtual cluster,
and per user (``by=user``) or every user summed (``by=vc``); hours, with the GPU utilisation in percent.
The OpenAPI document's schemas are generated from :data:`USAGE_ANSWERS`."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from services.submit.contract.answers import Answer
from shared.usage.report import ReportRow


class UsageRow(Answer):
    """What a virtual cluster (and a user) held and used on one UTC day, from the jobs that ended by then."""

    day: str = Field(description="the UTC day, YYYY-MM-DD")
    virtual_cluster: str
    user: str | None = Field(description="null in a by=vc report: every user of the virtual cluster")
    gpu_hours_held: float = Field(description="GPUs held x hours, from each task's start to its end")
    gpu_hours_used: float = Field(description="of the measured GPU-hours, held x utilisation")
    gpu_hours_measured: float = Field(description="GPU-hours held with a utilisation reading (0 without NVML)")
    gpu_utilization: float | None = Field(description="used / measured, percent; null when nothing was measured")
    cpu_core_hours_held: float = Field(description="CPUs asked x hours")
    cpu_core_hours_used: float = Field(description="cores busy x hours, as the profiler sampled them")
    jobs: int = Field(description="jobs that ended that day")
    attempts: int = Field(description="attempts that ended that day (retries and preempted attempts included)")


class UsageReport(Answer):
    """A report over ``from``..``to`` (UTC days, both included), rows ordered by day, VC and user."""

    from_day: str = Field(alias="from")
    to_day: str = Field(alias="to")
    by: Literal["user", "vc"]
    rows: tuple[UsageRow, ...]


def row_view(r: ReportRow) -> UsageRow:
    return UsageRow(day=r.day, virtual_cluster=r.vc, user=r.user, gpu_hours_held=r.gpu_hours_held,
                    gpu_hours_used=r.gpu_hours_used, gpu_hours_measured=r.gpu_hours_measured,
                    gpu_utilization=r.gpu_utilization, cpu_core_hours_held=r.cpu_core_hours_held,
                    cpu_core_hours_used=r.cpu_core_hours_used, jobs=r.jobs, attempts=r.attempts)


USAGE_ANSWERS: tuple[type[BaseModel], ...] = (UsageReport,)
