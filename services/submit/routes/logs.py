"""A task's stdout and stderr, while it runs and after its container is gone.

``GET /api/v1/user/{user}/jobs/{job}/tasks/{role}/{index}/log`` answers ``text/plain``, line by line as
the launcher stored them (see :mod:`shared.db.logs`):

- ``tail=N``: only the last N lines (default: all that was kept);
- ``follow=true``: keep the answer open and send new lines as they are stored, until the task's log is
  complete (its container ended and the last lines were saved) or the task can no longer start;
- ``stream=stdout|stderr``: one stream only (default: both, in the order they were written);
- ``attempt=K``: an earlier attempt's task (default: the job's current attempt);
- ``taskAttempt=T``: one run of the task within that attempt (protocol v2's ``taskRetryCount`` re-runs a
  failed task in place: runs 0, 1, ...; frameworkcontroller's task attempt, ``FC_TASK_ATTEMPT_ID``). Default:
  the task's last run of that attempt (of the current attempt, its current run). The answer's
  ``X-Task-Attempt`` header says which run it is; the task's ``retries`` (job detail) is its last run's number.

Only the job's owner or an administrator may read it (logs may hold what a program printed about its
data or credentials).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

from aiohttp import web

from services.submit.contract.route import Param, Route, text
from services.submit.contract.streams import open_stream
from services.submit.deps import DEPS
from services.submit.errors import ApiError, shown
from services.submit.routes.access import principal_of
from services.submit.users import check_user_name
from shared.db.logs import LogLineRecord, LogStore
from shared.records import AttemptRecord, JobRecord, TaskRecord
from shared.taskref import TaskRef

FOLLOW_POLL_SECONDS = 0.3
TASK_ATTEMPT_HEADER = "X-Task-Attempt"  # the run of the task a log or profile answer is of
LOG_ROUTE = "/api/v1/user/{user}/jobs/{job}/tasks/{role}/{index}/log"
_STREAMS = {"": frozenset({"stdout", "stderr"}), "all": frozenset({"stdout", "stderr"}),
            "stdout": frozenset({"stdout"}), "stderr": frozenset({"stderr"})}


MAX_NUMBER = 999_999_999  # the largest tail, attempt or task index this route reads


def _number(raw: str) -> int | None:
    """``raw`` as a number 0-MAX_NUMBER, or None (ASCII digits only: ``int`` also takes '٣', '1_0', ' 1')."""
    if raw.isascii() and raw.isdigit() and len(raw) <= len(str(MAX_NUMBER)):
        return int(raw)
    return None


def _int_query(request: web.Request, name: str) -> int | None:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return None
    number = _number(raw)
    if number is None:
        raise ApiError("InvalidParametersError", f"{name}: must be a whole number 0-{MAX_NUMBER}")
    return number


def log_store(request: web.Request) -> LogStore:
    return LogStore(request.app[DEPS].store.jobs.database)


def archived_attempt(job_id: str, attempt: int) -> dict[str, str]:
    """The query of one earlier attempt's archive (``job_attempts``, by id: :meth:`AttemptRecord.to_document`)."""
    return {"_id": f"{job_id}/{attempt}"}


async def task_of_attempt(request: web.Request, job: JobRecord, attempt: int, role: str, index: int) -> TaskRecord:
    """Task ``role[index]`` as attempt ``attempt`` of ``job`` left it (the current attempt: as it is now); 404
    for an attempt the job never had. An earlier attempt is one read of its archive by id (``job_attempts``:
    ``<job>/<attempt>``), whatever the job's other attempts."""
    tasks: tuple[TaskRecord, ...] = ()
    if attempt == job.attempt:
        tasks = job.tasks
    elif attempt < job.attempt:
        doc = await request.app[DEPS].store.attempts.find_one(archived_attempt(job.id, attempt))
        tasks = AttemptRecord.from_document(doc).tasks if doc else ()
    if not tasks:
        raise ApiError("NoJobError", f"JobAttemptId {attempt} is not found in {job.user}~{shown(job.name)}.")
    found = next((t for t in tasks if t.role == role and t.index == index), None)
    if found is None:
        raise ApiError("NoJobError", f"job {shown(job.name)} has no task {shown(role)}[{index}] in attempt {attempt}")
    return found


async def task_run(request: web.Request, job: JobRecord, role: str, index: int) -> TaskRef:
    """The run of task ``role[index]`` a read asks for: ``attempt=K`` (default: the job's current attempt) and
    ``taskAttempt=T`` (default: the task's last run of that attempt, its current one in the current attempt;
    404 past it). Runs are numbered from 0 within a job attempt (``TaskRecord.retries`` is the last's)."""
    asked = _int_query(request, "attempt")
    attempt = job.attempt if asked is None else asked
    task = await task_of_attempt(request, job, attempt, role, index)
    run = _int_query(request, "taskAttempt")
    if run is None:
        run = task.retries
    elif run > task.retries:
        raise ApiError("NoJobError", f"task {shown(role)}[{index}] of attempt {attempt} has no run {run} (its runs: "
                                     f"0-{task.retries})")
    return TaskRef(job_id=job.id, attempt=attempt, role=role, index=index, task_attempt=run)


async def _task_key(request: web.Request) -> TaskRef:
    principal = await principal_of(request)
    user, name = check_user_name(request.match_info["user"]), request.match_info["job"]
    job = await request.app[DEPS].store.find_job(user, name)
    if job is None:
        raise ApiError("NoJobError", f"job {shown(name)} of user {user} was not found")
    if principal.user != job.user and not principal.admin:
        raise ApiError("ForbiddenUserError", f"user {principal.user} may not read the logs of {job.user}'s jobs")
    role, raw_index = request.match_info["role"], request.match_info["index"]
    index = _number(raw_index)
    if index is None or not any(t.role == role and t.index == index for t in job.tasks):
        raise ApiError("NoJobError", f"job {name} has no task {shown(role)}[{shown(raw_index)}]")
    return await task_run(request, job, role, index)


async def _write(response: web.StreamResponse, lines: list[LogLineRecord], streams: frozenset[str]) -> None:
    text = "".join(ln.text for ln in lines if ln.stream in streams)
    if text:
        await response.write(text.encode())


async def _still_to_come(logs: LogStore, request: web.Request, key: TaskRef) -> bool:
    """Whether more lines may come: the log is not complete, and the task may still (or did) start."""
    run = await logs.get_run(key)
    if run is not None:
        return not run.log_complete
    job = await request.app[DEPS].store.get_job(key.job_id)
    return job is not None and not job.state.is_final and job.attempt == key.attempt


async def get_task_log(request: web.Request) -> web.StreamResponse:
    key = await _task_key(request)
    streams = _STREAMS.get(request.query.get("stream", ""))
    if streams is None:
        raise ApiError("InvalidParametersError", "stream: must be stdout, stderr or all")
    tail = _int_query(request, "tail")
    follow = request.query.get("follow", "").lower() in {"true", "1", "yes"}
    logs = log_store(request)
    response = web.StreamResponse(headers={"Content-Type": "text/plain; charset=utf-8",  # nosniff: every answer's
                                           TASK_ATTEMPT_HEADER: str(key.task_attempt)})
    if not await open_stream(request, response):
        return response
    last_seq = -1
    if tail is not None:
        lines, last_seq = await logs.tail(key, tail, streams)
        await _write(response, lines, streams)
    while True:
        chunks = await logs.chunks_after(key, last_seq)
        for chunk in chunks:
            await _write(response, list(chunk.lines), streams)
            last_seq = chunk.seq
        if chunks:
            continue
        if not follow or not await _still_to_come(logs, request, key):
            break
        await asyncio.sleep(FOLLOW_POLL_SECONDS)
    await response.write_eof()
    return response


NUMBER = {"type": "integer", "minimum": 0, "maximum": MAX_NUMBER}  # of a tail, an attempt or a task index
TASK_PARAMS = (Param("role", "path"), Param("index", "path", NUMBER))
TASK_ATTEMPT = Param("taskAttempt", "query", NUMBER, "one run of the task within the attempt (taskRetryCount's "
                     "re-runs: 0, 1, ...; default: its last run of that attempt)")
RUN_HEADERS = {TASK_ATTEMPT_HEADER: {"description": "the run of the task answered (its taskAttempt)",
                                     "schema": {"type": "string"}}}

ROUTES = (
    Route("GET", LOG_ROUTE, get_task_log, "a task's stdout and stderr (kept after its container is gone); "
          "follow=true streams new lines", {200: replace(text("the log, as text"), headers=RUN_HEADERS)},
          (400, 401, 403, 404), auth="token",
          params=(Param("user", "path"), Param("job", "path"), *TASK_PARAMS, Param("tail", "query", NUMBER),
                  Param("follow", "query", {"type": "boolean"}),
                  Param("stream", "query", {"enum": ["stdout", "stderr", "all"]}), Param("attempt", "query", NUMBER),
                  TASK_ATTEMPT)),
)
