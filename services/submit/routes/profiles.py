"""Job profiling through the REST API (paiq's extension, under the job's route): what each task used.

- ``GET /api/v1/user/{user}/jobs/{job}/profile``: the attempt's usage summed (GPU-hours held and used,
  the task closest to its memory limit, idle-GPU warnings) and each task's totals and latest point;
- ``GET /api/v1/user/{user}/jobs/{job}/tasks/{role}/{index}/profile``: one task's series, oldest first
  (``since=MS``: only points ending after it, for a live view).

``attempt=K`` reads an earlier attempt (default: the current one). A task re-run in place (``taskRetryCount``)
has a profile per run: the job's route lists each run (``taskAttempt``), the task's route reads its last run
of the attempt (its current one) or ``taskAttempt=T``, as the task's log route does. Open to all, as the job's
detail is; the job detail's ``jobStatus.usage`` is the same summary as the first route's ``usage``.
"""

from __future__ import annotations

from aiohttp import web

from services.submit.contract import answers
from services.submit.contract.answers import answer
from services.submit.contract.lookup import job_or_404
from services.submit.contract.route import Param, Reply, Route
from services.submit.deps import DEPS
from services.submit.errors import ApiError, shown
from services.submit.routes.logs import (
    NUMBER,
    RUN_HEADERS,
    TASK_ATTEMPT,
    TASK_ATTEMPT_HEADER,
    TASK_PARAMS,
    _int_query,
    _number,
    task_run,
)
from services.submit.routes.throttle import heavy_read
from shared.db.profiles import ProfileStore, TaskProfile
from shared.profiling.totals import job_usage
from shared.profiling.usage import Usage
from shared.records import JobRecord

JOB_PROFILE_ROUTE = "/api/v1/user/{user}/jobs/{job}/profile"
TASK_PROFILE_ROUTE = "/api/v1/user/{user}/jobs/{job}/tasks/{role}/{index}/profile"
MAX_TIME = 9_999_999_999_999  # ms since the epoch: year 2286


def point_view(p: Usage) -> answers.UsagePoint:
    return answers.UsagePoint(
        time=p.t_ms, span_ms=p.span_ms, cpu_cores=round(p.cpu, 4), memory_bytes=p.mem, memory_peak_bytes=p.mem_peak,
        network_receive_bytes_per_second=p.net_rx, network_transmit_bytes_per_second=p.net_tx,
        disk_read_bytes_per_second=p.blk_read, disk_write_bytes_per_second=p.blk_write,
        gpu_utilization=p.gpu_util, gpu_memory_bytes=p.gpu_mem)


def task_view(p: TaskProfile) -> answers.TaskUsage:
    t = p.totals
    return answers.TaskUsage(
        task_role_name=p.role, task_index=p.index, task_attempt=p.task_attempt, node_id=p.node_id,
        cpu_number=p.cpus, gpus=p.gpus,
        memory_limit_bytes=p.mem_limit, samples=t.samples, first_time=t.first_ms, last_time=t.last_ms,
        cpu_core_seconds=round(t.cpu_seconds, 3), memory_peak_bytes=t.mem_peak,
        gpu_seconds_held=round(t.gpu_held_seconds, 3),
        gpu_seconds_used=round(t.gpu_used_seconds, 3) if t.gpu_measured_seconds else None,
        gpu_idle_since=p.idle.since_ms, gpu_idle=p.idle.flagged, last=point_view(p.last) if p.last else None)


def usage_view(profiles: list[TaskProfile]) -> answers.JobUsage:
    u = job_usage([p.use() for p in profiles])
    return answers.JobUsage(
        tasks_sampled=u.tasks_sampled, cpu_core_hours=round(u.cpu_core_hours, 6),
        gpu_hours_held=round(u.gpu_hours_held, 6),
        gpu_hours_used=None if u.gpu_hours_used is None else round(u.gpu_hours_used, 6),
        gpu_utilization=None if u.gpu_utilization is None else round(u.gpu_utilization, 2),
        memory_peak_bytes=u.memory_peak_bytes, memory_limit_bytes=u.memory_limit_bytes,
        memory_peak_task=u.memory_peak_task, idle_gpu_tasks=u.idle_gpu_tasks, warnings=u.warnings)


async def job_usage_of(request: web.Request, job: JobRecord) -> answers.JobUsage | None:
    """The job detail's ``usage``: its current attempt's summary, null before any sample."""
    profiles = await _profiles(request).of_job(job.id, job.attempt)
    return usage_view(profiles) if profiles else None


def _profiles(request: web.Request) -> ProfileStore:
    return request.app[DEPS].store.profiles


def _attempt(request: web.Request, job: JobRecord) -> int:
    attempt = _int_query(request, "attempt")
    return job.attempt if attempt is None else attempt


def _since(request: web.Request) -> int:
    raw = request.query.get("since", "")
    if not raw:
        return 0
    if not (raw.isascii() and raw.isdigit() and len(raw) <= len(str(MAX_TIME))):
        raise ApiError("InvalidParametersError", f"since: must be a time in ms since the epoch, 0-{MAX_TIME}")
    return int(raw)


def _interval(profiles: list[TaskProfile]) -> float | None:
    return max(p.interval_ms for p in profiles) / 1000 if profiles else None


async def get_job_profile(request: web.Request) -> web.Response:
    job = await job_or_404(request)
    attempt = _attempt(request, job)
    async with heavy_read(request):  # every task's profile: 429 beyond the anonymous budget
        profiles = await _profiles(request).of_job(job.id, attempt)
    return answer(answers.JobProfile(name=job.name, attempt=attempt, interval_seconds=_interval(profiles),
                                     usage=usage_view(profiles), tasks=tuple(task_view(p) for p in profiles)))


async def get_task_profile(request: web.Request) -> web.Response:
    job = await job_or_404(request)
    role, raw_index = request.match_info["role"], request.match_info["index"]
    index = _number(raw_index)
    if index is None or not any(t.role == role and t.index == index for t in job.tasks):
        raise ApiError("NoJobError", f"job {shown(job.name)} has no task {shown(role)}[{shown(raw_index)}]")
    since = _since(request)
    key = await task_run(request, job, role, index)  # the run asked for, else the task's last of the attempt
    found = await _profiles(request).get(key)
    points = tuple(point_view(p) for p in found.series.points(since)) if found else ()
    reply = answer(answers.TaskProfile(name=job.name, attempt=key.attempt, task_attempt=key.task_attempt,
                                       interval_seconds=found.interval_ms / 1000 if found else None,
                                       task=task_view(found) if found else None, points=points))
    reply.headers[TASK_ATTEMPT_HEADER] = str(key.task_attempt)
    return reply


_ATTEMPT = Param("attempt", "query", NUMBER, "an earlier attempt (default: the current one)")
_JOB = (Param("user", "path"), Param("job", "path"))

ROUTES = (
    Route("GET", JOB_PROFILE_ROUTE, get_job_profile, "the attempt's usage: summed (GPU-hours held and used, memory "
          "peak against limit, idle-GPU warnings) and each task's totals and latest point (paiq's extension)",
          {200: Reply("the job's profile", answers.JobProfile)}, (400, 404, 429), auth="optional",
          params=(*_JOB, _ATTEMPT)),
    Route("GET", TASK_PROFILE_ROUTE, get_task_profile, "one task's usage over time, oldest point first; older points "
          "span longer (paiq's extension)", {200: Reply("the task's series", answers.TaskProfile, headers=RUN_HEADERS)},
          (400, 404), auth="optional", params=(*_JOB, *TASK_PARAMS, _ATTEMPT, TASK_ATTEMPT, Param(
              "since", "query", {"type": "integer", "minimum": 0, "maximum": MAX_TIME},
              "only points ending after this time (ms since the epoch)"))),
)
