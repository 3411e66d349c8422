"""OpenPAI v1.8's ``/api/v2/jobs/{user}~{job}`` routes beside submit and config (:mod:`.jobs`): the job
(``attempts/{attemptId}`` for an earlier attempt), its ``job-attempts``, a task's attempts (its runs: a task
re-run in place by ``taskRetryCount`` has one per run, numbered from 0 within the job attempt, as
frameworkcontroller's task attempts were), a task attempt's log list, ``ssh``, ``executionType`` and ``tag``.
Every one needs a token, as OpenPAI's ``token.check`` did; what programs printed (exit diagnostics) is shown
to the job's owner and admins only, as v1's detail shows it.
The work is v1's: the same lookups (:func:`services.submit.contract.lookup.job_or_404`), the same stop
request (:func:`services.submit.routes.jobs.request_stop`), the same ssh answer and logs."""

from __future__ import annotations

from urllib.parse import quote

from aiohttp import web

from services.submit.contract.answers import SshInfo, Submitted, answer
from services.submit.contract.lookup import job_or_404
from services.submit.contract.requests import USER_NAME_SCHEMA, ExecutionTypeChange
from services.submit.contract.route import ModelBody, Param, Reply, Route, text
from services.submit.contract.v2.jobs import (
    V2JobAttempt,
    V2JobAttempts,
    V2JobDetail,
    V2JobEvents,
    V2LogList,
    V2LogLocation,
    V2TagChange,
    V2TaskAttempts,
)
from services.submit.contract.v2.jobviews import (
    AttemptView,
    all_attempts,
    current_attempt,
    framework_name,
    v2_attempt,
    v2_detail,
    v2_events,
    v2_task_attempts,
)
from services.submit.deps import DEPS
from services.submit.errors import ApiError, shown
from services.submit.routes.access import principal_of
from services.submit.routes.jobs import _request_stop as request_stop
from services.submit.routes.logs import LOG_ROUTE, log_store
from services.submit.routes.ssh import get_job_ssh
from shared.db.tags import TagsFullError
from shared.records import JobRecord, TaskRecord
from shared.taskref import TaskRef

JOB = "/api/v2/jobs/{user}~{job}"
MAX_INDEX = 1_000_000
# A task's runs listed at most (the newest; each older one's log is still reachable by its number): a task
# with taskRetryCount -1 may run without end, and a read must not grow with it.
MAX_RUNS_SHOWN = 100


async def _job(request: web.Request) -> tuple[JobRecord, bool]:
    """The job (404) for a token's holder (401 first), and whether they may see what its programs printed."""
    principal = await principal_of(request)
    job = await job_or_404(request)
    return job, principal.admin or principal.user == job.user


def _index(request: web.Request, name: str) -> int:
    raw = request.match_info[name]
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 7 and int(raw) <= MAX_INDEX):
        raise ApiError("InvalidParametersError", f"{name}: must be a whole number 0-{MAX_INDEX} in ASCII digits")
    return int(raw)


async def _attempt(request: web.Request, job: JobRecord, index: int) -> AttemptView:
    """Attempt ``index`` of the job (404 ``JobAttemptId N is not found in U~J.`` as OpenPAI said it)."""
    if index == job.attempt:
        return current_attempt(job)
    earlier = await request.app[DEPS].store.attempts_of(job.id) if index < job.attempt else []
    found = next((a for a in all_attempts(job, earlier) if a.attempt == index), None)
    if found is None:
        raise ApiError("NoJobError", f"JobAttemptId {index} is not found in {framework_name(job.user, job.name)}.")
    return found


async def get_v2_job(request: web.Request) -> web.Response:
    job, private = await _job(request)
    index = _index(request, "attemptId") if "attemptId" in request.match_info else job.attempt
    tags = await request.app[DEPS].store.tags_of(job.id)
    return answer(v2_detail(job, await _attempt(request, job, index), tags, private=private))


async def get_job_attempts(request: web.Request) -> web.Response:
    job, private = await _job(request)
    earlier = await request.app[DEPS].store.attempts_of(job.id) if job.attempt else []
    body = V2JobAttempts(tuple(v2_attempt(job, a, private=private) for a in all_attempts(job, earlier)))
    return web.json_response(body.model_dump(mode="json", by_alias=True))


async def job_attempts_healthz(request: web.Request) -> web.Response:
    """OpenPAI's ``200 ok`` (paiq reads attempts from its store, as every route does)."""
    await principal_of(request)
    return web.Response(text="ok")


async def get_job_attempt(request: web.Request) -> web.Response:
    job, private = await _job(request)
    return answer(v2_attempt(job, await _attempt(request, job, _index(request, "attemptIndex")), private=private))


async def _task(request: web.Request) -> tuple[JobRecord, AttemptView, TaskRecord, bool]:
    """The job, the attempt and its task the path names (404 ``NoJobError`` as v1.8's ``models/v2/task.js``)."""
    job, private = await _job(request)
    attempt = await _attempt(request, job, _index(request, "attemptId"))
    role, index = request.match_info["role"], _index(request, "index")
    task = next((t for t in attempt.tasks if t.role == role and t.index == index), None)
    if task is None:
        raise ApiError("NoJobError", f"Task not found in Job {framework_name(job.user, job.name)} with jobAttemptIndex "
                                     f"{attempt.attempt}, taskRoleName {shown(role)} and taskIndex {index}.")
    return job, attempt, task, private


def _task_ref(job: JobRecord, attempt: AttemptView, task: TaskRecord, run: int) -> TaskRef:
    return TaskRef(job_id=job.id, attempt=attempt.attempt, role=task.role, index=task.index, task_attempt=run)


async def get_task_attempts(request: web.Request) -> web.Response:
    """The task and its runs, latest first: the current one from the job's record, the earlier ones (at most
    ``MAX_RUNS_SHOWN`` in all) read by id from their launchers' records."""
    job, attempt, task, private = await _task(request)
    earlier = await log_store(request).runs_of(_task_ref(job, attempt, task, 0), task.retries - 1,
                                               MAX_RUNS_SHOWN - 1) if task.retries else []
    return answer(v2_task_attempts(job, attempt, task, earlier, private=private))


NO_TASK_LOG = "Log of task is not found."  # v1.8's NoTaskLogError: no such task attempt, or not on a node


async def get_task_logs(request: web.Request) -> web.Response:
    """Where task attempt ``taskAttemptId``'s logs are read (v1's log route, with ``stream``, ``attempt`` and
    ``taskAttempt`` set); the owner's or an admin's, as v1's logs are (403 otherwise). 404 ``NoTaskLogError``
    for a run the task did not have (past its ``retries``) or a task never placed on a node, as v1.8 answered
    for an attempt it did not find or without a ``containerIp``."""
    job, attempt, task, private = await _task(request)
    if not private:
        raise ApiError("ForbiddenUserError", f"user may not read the logs of {job.user}'s jobs")
    run = _index(request, "taskAttemptId")
    if run > task.retries or task.ip is None:
        raise ApiError("NoTaskLogError", NO_TASK_LOG)
    path = LOG_ROUTE.format(user=quote(job.user, safe=""), job=quote(job.name, safe=""),
                            role=quote(task.role, safe=""), index=task.index)
    return answer(V2LogList(locations=tuple(
        V2LogLocation(name=name, uri=f"{path}?stream={name}&attempt={attempt.attempt}&taskAttempt={run}")
        for name in ("all", "stdout", "stderr"))))


async def get_v2_events(request: web.Request) -> web.Response:
    job, _ = await _job(request)
    kind = request.query.get("type") or None
    if kind not in (None, "Normal", "Warning"):
        raise ApiError("InvalidParametersError", "type: Normal or Warning")
    return answer(v2_events(job, kind))


async def get_v2_ssh(request: web.Request) -> web.StreamResponse:
    await principal_of(request)
    return await get_job_ssh(request)


EXECUTION_TYPE = ModelBody(ExecutionTypeChange)
TAG = ModelBody(V2TagChange)


async def put_v2_execution_type(request: web.Request) -> web.Response:
    """``{"value": "STOP"}`` (paiq resubmits a stopped job, it does not START it again: 400 for START)."""
    await EXECUTION_TYPE.read(request)
    job, _ = await request_stop(request, delete=False)
    return answer(Submitted(status=202, message=f"Execute job {framework_name(job.user, job.name)} successfully."),
                  status=202)


async def _tag_request(request: web.Request, verb: str) -> tuple[JobRecord, str]:
    principal = await principal_of(request)
    job = await job_or_404(request)
    if principal.user != job.user and not principal.admin:
        raise ApiError("ForbiddenUserError", f"User {principal.user} is not allowed to {verb} job "
                                             f"{framework_name(job.user, job.name)}.")
    return job, (await TAG.read(request)).value


async def put_tag(request: web.Request) -> web.Response:
    job, tag = await _tag_request(request, "add tag to")
    try:
        await request.app[DEPS].store.add_tag(job.id, tag)
    except TagsFullError as e:
        raise ApiError("InvalidParametersError", f"job {job.name} holds its most tags already") from e
    return answer(Submitted(status=200, message=f"Add tag {tag} for job {framework_name(job.user, job.name)} "
                                                "successfully."))


async def delete_tag(request: web.Request) -> web.Response:
    job, tag = await _tag_request(request, "delete tag from")
    name = framework_name(job.user, job.name)
    if not await request.app[DEPS].store.delete_tag(job.id, tag):
        raise ApiError("NoTagError", f"Tag {tag} is not found for job {name}.")
    return answer(Submitted(status=200, message=f"Delete tag {tag} from job {name} successfully."))


_INDEX = {"type": "integer", "minimum": 0, "maximum": MAX_INDEX}
_JOB = (Param("user", "path", USER_NAME_SCHEMA, "the job's user"), Param("job", "path", description="the job's name"))
_TASK = (*_JOB, Param("attemptId", "path", _INDEX), Param("role", "path"), Param("index", "path", _INDEX))
_TASK_ROUTE = JOB + "/attempts/{attemptId}/taskRoles/{role}/taskIndex/{index}/attempts"
_DONE = Reply("done", Submitted)

ROUTES = (
    Route("GET", JOB, get_v2_job, "the job with its latest attempt's tasks (OpenPAI v1.8's v2 detail)",
          {200: Reply("the job", V2JobDetail)}, (400, 401, 404), auth="token", params=_JOB),
    Route("GET", JOB + "/attempts/{attemptId}", get_v2_job, "the job with one attempt's tasks",
          {200: Reply("the job", V2JobDetail)}, (400, 401, 404), auth="token",
          params=(*_JOB, Param("attemptId", "path", _INDEX))),
    Route("GET", JOB + "/job-attempts", get_job_attempts, "every attempt of the job, oldest first",
          {200: Reply("the attempts", V2JobAttempts)}, (400, 401, 404), auth="token", params=_JOB),
    Route("GET", JOB + "/job-attempts/healthz", job_attempts_healthz, "whether job attempts can be read (OpenPAI's "
          "health check of its job-attempt store)", {200: text("ok")}, (400, 401), auth="token", params=_JOB),
    Route("GET", JOB + "/job-attempts/{attemptIndex}", get_job_attempt, "one attempt of the job",
          {200: Reply("the attempt", V2JobAttempt)}, (400, 401, 404), auth="token",
          params=(*_JOB, Param("attemptIndex", "path", _INDEX))),
    Route("GET", _TASK_ROUTE, get_task_attempts, "a task of one job attempt and its attempts (its runs: taskRetryCount "
          f"re-runs a task in place), latest first, at most {MAX_RUNS_SHOWN}",
          {200: Reply("the task", V2TaskAttempts)}, (400, 401, 404), auth="token", params=_TASK),
    Route("GET", _TASK_ROUTE + "/{taskAttemptId}/logs", get_task_logs, "where one task attempt's (run's) logs are "
          "read (the job's owner or an admin)", {200: Reply("the log list", V2LogList)}, (400, 401, 403, 404),
          also={404: ("NoTaskLogError",)}, auth="token",
          params=(*_TASK, Param("taskAttemptId", "path", _INDEX, "the task attempt: its run, from 0"))),
    Route("GET", JOB + "/events", get_v2_events, "the job's events, newest first (derived from its record: tasks "
          "placed, started, ended; why it waits)", {200: Reply("the events", V2JobEvents)}, (400, 401, 404),
          auth="token", params=(*_JOB, Param("type", "query", {"type": "string", "enum": ["Normal", "Warning"]}))),
    Route("GET", JOB + "/ssh", get_v2_ssh, "SSH information of the job", {200: Reply("ssh info", SshInfo)},
          (400, 401, 404), auth="token", params=_JOB),
    Route("PUT", JOB + "/executionType", put_v2_execution_type, 'stop the job: {"value": "STOP"}',
          {202: Reply("stop requested (or the job had ended)", Submitted)}, (400, 401, 403, 404, 408, 413),
          auth="token", params=_JOB, body=EXECUTION_TYPE),
    Route("PUT", JOB + "/tag", put_tag, "add a tag to the job (its owner or an admin)", {200: _DONE},
          (400, 401, 403, 404, 408, 413), auth="token", params=_JOB, body=TAG),
    Route("DELETE", JOB + "/tag", delete_tag, "remove a tag from the job (404 NoTagError when it has none such)",
          {200: _DONE}, (400, 401, 403, 404, 408, 413), also={404: ("NoTagError",)}, auth="token", params=_JOB,
          body=TAG),
)
