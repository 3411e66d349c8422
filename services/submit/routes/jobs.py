"""Job routes of the v1 API: submit (POST, or PUT by name), detail, config, stop, delete (lists:
:mod:`services.submit.routes.listing`; SSH: :mod:`services.submit.routes.ssh`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol
from urllib.parse import quote

import structlog
import yaml
from aiohttp import web

from services.submit.contract.answers import JobDetail, Message, answer
from services.submit.contract.bodies import read_bytes
from services.submit.contract.configschema import job_config_schemas
from services.submit.contract.lookup import JOB_PARAMS, USER_PARAM, job_or_404, path_user
from services.submit.contract.requests import ExecutionTypeChange
from services.submit.contract.route import STRING, Body, ModelBody, Param, Reply, Route
from services.submit.contract.views import job_detail
from services.submit.deps import DEPS
from services.submit.errors import ApiError
from services.submit.routes.access import optional_principal, principal_of
from services.submit.routes.listing import positions
from services.submit.routes.profiles import job_usage_of
from services.submit.routes.ssh import requested_user_keys, stored_job_key
from services.submit.users import Principal, may_use
from shared.admission.envsize import env_size_problems
from shared.admission.validation import Accepted, parse_job_json, validate_job_config
from shared.db.idempotency import HEADER as IDEMPOTENCY_HEADER
from shared.db.idempotency import REPLAYED_HEADER, IdempotencyRecord, Submitted, key_problem
from shared.db.store import Store
from shared.db.submission import EncodedJob, encoded_job
from shared.errors import JobExistsError, SubmitOutcomeUnknownError
from shared.events import JobStopRequested, JobStopRequestedData, JobSubmitted, JobSubmittedData
from shared.jobconfig.limits import JobLimits, printable
from shared.jobconfig.model import JobConfig
from shared.jobconfig.priority import FIELD_PATH as PRIORITY_FIELD
from shared.jobconfig.priority import PriorityClass, priority_class_of
from shared.jobconfig.sealing import SecretsKeyMissingError, seal_config
from shared.jobconfig.storagepath import StorageRefusal, resolve_in_storage, storage_root
from shared.records import ACTIVE_JOB_STATES, JobRecord, SubState, initial_tasks, new_job_id, now_ms
from shared.scheduling.vclusters import VirtualCluster, with_default
from shared.settings.model import Settings
from shared.storageconfig import storage_configs_at, storage_refusal
from shared.tasks.envvars import JobPaths, resolve_paths
from shared.tasks.plugins import teamwise_storage_names

log = structlog.get_logger("paiq.submit")
# What a new job's name may be, as the job config's schema says it (the path names it on a PUT).
JOB_NAME_SCHEMA = job_config_schemas()["JobConfig"]["properties"]["jobName"]

# The X-Warning header's length at most (20 warnings of keys quoted up to 64 characters fit).
MAX_WARNING_HEADER = 4096


async def submit_job(request: web.Request) -> web.Response:
    """``POST /api/v1/user/{user}/jobs``: the body's ``jobName`` names the job."""
    return await submit(request, path_user(request), partial(_accepted, path_name=None), accepted_v1)


async def put_job(request: web.Request) -> web.Response:
    """``PUT /api/v1/user/{user}/jobs/{job}``, OpenPAI's older way to submit: the path names the job.

    As in OpenPAI v0.14 the body must still carry a ``jobName`` (400 without one), and where it names
    another job the path's name wins: OpenPAI overwrote ``jobName`` with it, paiq does too and says so
    in a warning. Everything else is the POST's submission.
    """
    judge = partial(_accepted, path_name=request.match_info["job"])
    return await submit(request, path_user(request), judge, accepted_v1)


def named_by_path(raw: dict[str, Any], name: str) -> tuple[dict[str, Any], str | None]:
    """The body of a ``PUT .../jobs/{name}`` as OpenPAI took it, and a warning when it was renamed."""
    given = raw.get("jobName")
    if not isinstance(given, str) or given == name:
        return raw, None  # absent or not a string: the config's own validation refuses it
    return {**raw, "jobName": name}, (f"jobName: the body says '{printable(given, 64)}' but the path names the job "
                                      f"{name!r}; the path's name is used, as in OpenPAI")


def _accepted(body: bytes, limits: JobLimits, *, path_name: str | None) -> Accepted:
    """The body as a valid config (400 InvalidParametersError naming each problem otherwise)."""
    parsed = parse_job_json(body, limits)
    renamed = None
    if isinstance(parsed, dict) and path_name is not None:
        parsed, renamed = named_by_path(parsed, path_name)
    result = validate_job_config(parsed, limits) if isinstance(parsed, dict) else parsed
    if not isinstance(result, Accepted):
        raise ApiError("InvalidParametersError", result.message)
    if renamed:
        result = result.model_copy(update={"warnings": (*result.warnings, renamed)})
    return result


@dataclass(frozen=True)
class Prepared:
    """A submission judged and built: its accepted config and the job record to store."""

    result: Accepted
    job: JobRecord
    document: EncodedJob  # the job as stored, encoded off the event loop


# How a protocol's body becomes an accepted config (raises ApiError 400 naming each problem).
Judge = Callable[[bytes, JobLimits], Accepted]


class AcceptedAnswer(Protocol):
    """How a protocol answers an accepted submission (``replayed``: a repeat with the same idempotency key)."""

    def __call__(self, user: str, job_name: str, warnings: tuple[str, ...], *, replayed: bool = False) -> web.Response:
        ...


def prepare_job(body: bytes, judge: Judge, user: str, settings: Settings) -> Prepared:
    """Everything a submission costs in CPU, in the order that keeps it cheap: the body's limits first
    (shared.jobconfig.limits, before any model), then the config, its paths, every task's environment (still
    O(roles)), and only then the record with one entry per task, its secrets sealed
    (:mod:`shared.jobconfig.sealing`: nothing stored holds them readable). Pure, for a worker thread;
    raises :class:`ApiError` for what it refuses (400; 503 for secrets without PAIQ_SECRETS_KEY)."""
    result = judge(body, settings.job_limits)
    config = result.config
    paths = resolve_paths(config, user, settings.default_fs_uri)  # once: both checks below read them
    _check_storage_paths(paths, settings.default_fs_uri)
    # Every task sees every task's host and ports: refuse now a job whose tasks Linux would not start.
    too_large = env_size_problems(config, user=user, paths=paths)
    if too_large:
        raise ApiError("InvalidParametersError", "; ".join(map(str, too_large)))
    try:
        config = seal_config(config, settings.secrets_key)
    except SecretsKeyMissingError as e:
        raise ApiError("ServiceUnavailableError", f"{e}; until then, submit it without secrets") from e
    job = JobRecord(
        id=new_job_id(user, config.job_name), user=user, name=config.job_name,
        virtual_cluster=config.virtual_cluster, config=config, raw_config=result.raw,
        warnings=result.warnings, created_ms=now_ms(), tasks=initial_tasks(config),
    )
    return Prepared(result=result, job=job, document=encoded_job(job))


@dataclass(frozen=True)
class Refusals:
    """How a protocol words the refusals that come after the body was judged: OpenPAI's v1 and v2 REST
    servers answered an unknown virtual cluster and a taken name differently."""

    no_vc: Callable[[str, str], ApiError]  # (user, VC): the VC does not exist
    taken: Callable[[str, str], ApiError]  # (user, job name): the name is taken


V1_REFUSALS = Refusals(
    no_vc=lambda user, vc: ApiError("NoVirtualClusterError", f"virtual cluster {vc} does not exist"),
    taken=lambda user, name: ApiError("ConflictJobError", f"job {name} already exists for user {user}"))


async def submit(request: web.Request, user: str | None, judge: Judge,
                 accepted_answer: AcceptedAnswer, refusals: Refusals = V1_REFUSALS) -> web.Response:
    """Every way to submit (v1 POST and PUT, v2 POST): as the path's user only (``None``: the token's own,
    as v2 has no user in its path), into a VC they may use, under a name not taken.

    The body is judged and the record built in the submit service's one worker thread
    (``SubmitDeps.cpu``), so the event loop keeps serving others meanwhile; one thread, so that
    concurrent submissions take turns instead of taking the interpreter's lock from the loop together.
    """
    deps = request.app[DEPS]
    principal = await principal_of(request)
    user = principal.user if user is None else user
    if principal.user != user:
        raise ApiError("ForbiddenUserError", f"user {principal.user} may not submit jobs as {user}")
    body = await read_bytes(request)
    prepared = await asyncio.get_running_loop().run_in_executor(
        deps.cpu, prepare_job, body, judge, user, deps.settings)
    result, job = prepared.result, prepared.job
    config = result.config
    vc = (await virtual_clusters(request)).get(config.virtual_cluster)
    if vc is None:
        raise refusals.no_vc(user, config.virtual_cluster)
    _admit(vc, principal, config)
    _admit_storages(deps.settings, principal, config)
    admitted = requested_user_keys(config)
    idem = _idempotency(request, user, job, body, result.warnings)
    repeated = await _repeat_of(deps.store, idem, config.job_name, accepted_answer)
    if repeated is not None:
        return repeated
    # The job, its key, the idempotency record and its event in one step: a 503 means none of them is stored.
    submitted = JobSubmitted(subject=job.id, data=JobSubmittedData(job_id=job.id, user=user,
                                                                    virtual_cluster=job.virtual_cluster))
    try:
        stored = await deps.store.submit_job(job, prepared.document,
                                             stored_job_key(job, admitted, deps.settings.secrets_key),
                                             idem.record if idem else None, events=[submitted])
    except JobExistsError as e:
        raise refusals.taken(user, config.job_name) from e
    except SubmitOutcomeUnknownError:
        log.warning("the database went away while a job was stored; whether it was is unknown", job_id=job.id)
        return ApiError("ServiceUnavailableError", (
            f"the database went away while job {config.job_name} was being stored and did not come back in "
            f"time to tell whether it was: GET the job to see, or send the request again with the same "
            f"{IDEMPOTENCY_HEADER} header")).response({"Retry-After": "5"})
    if stored is Submitted.DUPLICATE:  # a request with the same key stored its job first, meanwhile
        repeated = await _repeat_of(deps.store, idem, config.job_name, accepted_answer)
        if repeated is not None:
            return repeated
    log.info("job accepted", job_id=job.id, tasks=config.total_tasks, vc=config.virtual_cluster)
    return accepted_answer(user, config.job_name, result.warnings)


def _admit_storages(settings: Settings, principal: Principal, config: JobConfig) -> None:
    """The teamwise_storage plugin's storages must exist (400) and be the user's or their groups' (403)."""
    names = teamwise_storage_names(config.extras)
    denied = storage_refusal(storage_configs_at(settings.storage_config_path), names, principal.user,
                             principal.groups) if names else None
    if denied is not None:
        raise ApiError("InvalidParametersError" if denied.unknown else "ForbiddenUserError", denied.message)


def _admit(vc: VirtualCluster, principal: Principal, config: JobConfig) -> None:
    """The user may use the VC (an administrator any: :func:`services.submit.users.may_use`) and it is not
    stopped (PUT /api/v2/virtual-clusters/{vc}/status); crit only from an administrator."""
    if not may_use(vc, principal.user, principal.groups, admin=principal.admin):
        raise ApiError("ForbiddenUserError", f"user {principal.user} may not use virtual cluster {vc.name}")
    if vc.stopped:  # after access, as YARN checked a queue's state after its ACL; its words for a stopped queue
        raise ApiError("ForbiddenUserError", f"Virtual cluster {vc.name} is STOPPED. Cannot accept submission of "
                                             f"job {config.job_name}.")
    if priority_class_of(config) is PriorityClass.CRIT and not principal.admin:
        raise ApiError("ForbiddenUserError", f"{PRIORITY_FIELD} crit is for administrators (it may preempt "
                                             "any other job); use prod, test or oppo")


@dataclass(frozen=True)
class _Idempotency:
    key: str
    record: IdempotencyRecord


def _idempotency(request: web.Request, user: str, job: JobRecord, body: bytes,
                 warnings: tuple[str, ...]) -> _Idempotency | None:
    """The request's ``Idempotency-Key`` (400 naming the header when malformed), as the record to store."""
    key = request.headers.get(IDEMPOTENCY_HEADER)
    if key is None:
        return None
    problem = key_problem(key)
    if problem:
        raise ApiError("InvalidParametersError", problem)
    return _Idempotency(key, IdempotencyRecord.new(user=user, key=key, job_id=job.id, job_name=job.name, body=body,
                                                   warnings=warnings))


async def _repeat_of(store: Store, idem: _Idempotency | None, job_name: str,
                     accepted_answer: AcceptedAnswer) -> web.Response | None:
    """The first answer again, when an earlier request with the same Idempotency-Key stored its job."""
    if idem is None:
        return None
    earlier = await store.idempotent_submission(idem.record.user, idem.key)
    return None if earlier is None else _repeated(earlier, idem.record, job_name, accepted_answer)


def _repeated(earlier: IdempotencyRecord, now: IdempotencyRecord, job_name: str,
              accepted_answer: AcceptedAnswer) -> web.Response:
    """The answer to a request repeated with the key of an earlier one: that one's answer, if the bodies agree."""
    if earlier.body_sha256 != now.body_sha256:
        raise ApiError("ConflictJobError", f"this {IDEMPOTENCY_HEADER} was sent before with another body (job "
                                           f"{earlier.job_name}); use a new key for a new submission")
    log.info("submission repeated with its idempotency key; answered as the first time", job_id=earlier.job_id)
    return accepted_answer(earlier.user, job_name, earlier.warnings, replayed=True)


def accepted_headers(user: str, job_name: str, warnings: tuple[str, ...], *, replayed: bool) -> dict[str, str]:
    """Location names the job; ``Idempotent-Replayed: true`` when the answer repeats an earlier request's
    (that request stored it); X-Warning the warnings."""
    headers = {"Location": f"/api/v1/user/{quote(user)}/jobs/{quote(job_name)}"}
    if replayed:
        headers[REPLAYED_HEADER] = "true"
    if warnings:
        headers["X-Warning"] = warning_header(warnings)
    return headers


def accepted_v1(user: str, job_name: str, warnings: tuple[str, ...], *, replayed: bool = False) -> web.Response:
    """v1's 202."""
    headers = accepted_headers(user, job_name, warnings, replayed=replayed)
    return answer(Message(message=f"update job {job_name} successfully", warnings=warnings), status=202,
                  headers=headers)


def _check_storage_paths(paths: JobPaths, default_fs_uri: str) -> None:
    """authFile and codeDir must lie inside the default file system: refuse now, not after scheduling."""
    root = storage_root(default_fs_uri)
    if isinstance(root, StorageRefusal):
        return  # an operator problem, said by the launcher when a task needs the storage
    for field, value in (("authFile", paths.auth_file), ("codeDir", paths.code_dir)):
        if value:
            found = resolve_in_storage(value, root.path, what=field)
            if isinstance(found, StorageRefusal):
                raise ApiError("InvalidParametersError", f"{field}: {found.reason}")


async def virtual_clusters(request: web.Request) -> dict[str, VirtualCluster]:
    return with_default(await request.app[DEPS].store.list_vcs())


def _may_change(principal: Principal, job: JobRecord) -> None:
    if principal.user != job.user and not principal.admin:
        raise ApiError("ForbiddenUserError", f"user {principal.user} may not change job {job.name} of {job.user}")


async def get_job(request: web.Request) -> web.Response:
    """Open to all, as in OpenPAI; what the tasks printed (stderr tails) only for the owner or an admin,
    as their logs are."""
    job = await job_or_404(request)
    store = request.app[DEPS].store
    attempts = await store.attempts_of(job.id) if job.attempt else []
    detail = job_detail(job, attempts, await positions(store) if job.sub_state == SubState.QUEUED else {},
                        await job_usage_of(request, job))
    principal = await optional_principal(request)
    if principal is None or (principal.user != job.user and not principal.admin):
        detail = detail.without_private()
    return answer(detail)


async def get_job_config(request: web.Request) -> web.Response:
    job = await job_or_404(request)
    accept = request.headers.get("Accept", "")
    if "yaml" in accept:
        return web.Response(text=yaml.safe_dump(job.raw_config, sort_keys=False, allow_unicode=True),
                            content_type="text/yaml")
    # the config as submitted, unknown fields and all (documented as an object: it passed JobConfig)
    return web.json_response(job.raw_config)


async def _request_stop(request: web.Request, *, delete: bool) -> tuple[JobRecord, JobRecord | None]:
    """Mark the job (if still active) as to be stopped; the job as found and as changed (None if over).
    Who asks is checked first: a stranger learns nothing of which jobs exist (401 before any 404)."""
    principal = await principal_of(request)
    job = await job_or_404(request)
    _may_change(principal, job)
    changes: dict[str, object] = {"stop_requested_by": principal.user}
    if delete:
        changes["delete_requested"] = True
    requested = JobStopRequested(subject=job.id, data=JobStopRequestedData(job_id=job.id, by=principal.user))
    changed = await request.app[DEPS].store.update_job(
        job.id, {"state": {"$in": list(ACTIVE_JOB_STATES)}}, changes, events=[requested])
    if changed is not None:
        log.info("stop requested", job_id=job.id, by=principal.user, delete=delete)
    return job, changed


def warning_header(warnings: tuple[str, ...]) -> str:
    """The warnings as one header value: printable ASCII (other characters as Python's backslash escapes)
    and bounded, whatever keys the job had; the answer's ``warnings`` has them as they are."""
    text = " | ".join(warnings).encode("ascii", "backslashreplace").decode()
    text = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)
    return text if len(text) <= MAX_WARNING_HEADER else text[:MAX_WARNING_HEADER - 3] + "..."


EXECUTION_TYPE = ModelBody(ExecutionTypeChange)


async def put_execution_type(request: web.Request) -> web.Response:
    await EXECUTION_TYPE.read(request)  # "STOP" is all it may say
    job, changed = await _request_stop(request, delete=False)
    if changed is None:
        latest = await request.app[DEPS].store.get_job(job.id)
        state = latest.state.value if latest else job.state.value
        return answer(Message(message=f"job {job.name} has already ended ({state}); nothing to stop"))
    return answer(Message(message=f"execute job {job.name} successfully: stop requested"), status=202)


async def delete_job(request: web.Request) -> web.Response:
    job, changed = await _request_stop(request, delete=True)
    store = request.app[DEPS].store
    if changed is None:
        # Over already; while its last containers are still being stopped its record holds their
        # resources, so the status service deletes it once they are gone.
        stopping = {"sub_state": SubState.STOPPING.value}
        if await store.update_job(job.id, stopping, {"delete_requested": True}) is not None:
            return answer(Message(message=f"job {job.name} will be deleted once its containers have stopped"),
                          status=202)
        await store.delete_job(job.id)
        log.info("job deleted", job_id=job.id)
        return answer(Message(message=f"job {job.name} deleted"), status=202)
    return answer(Message(message=f"job {job.name} is being stopped and will then be deleted"), status=202)


_NEW_JOB_PARAMS = (USER_PARAM, Param("job", "path", JOB_NAME_SCHEMA))
_ACCEPTED = Reply("accepted; Location names the job, warnings (and X-Warning) what was ignored", Message, headers={
    "Location": {"schema": {"type": "string"}, "description": "the job's URL path"},
    "X-Warning": {"schema": {"type": "string"}, "description": "the warnings, ' | '"}})
_SUBMIT_ERRORS = (400, 401, 403, 404, 408, 409, 413)
_AS_SUBMITTED = {"type": "object", "description": "as submitted: it passed JobConfig's validation, and keeps its "
                                                  "unknown fields and spellings"}

ROUTES = (
    Route("POST", "/api/v1/user/{user}/jobs", submit_job, "submit a job as the path's user (an admin too submits "
          "only as themself)", {202: _ACCEPTED}, _SUBMIT_ERRORS, auth="token", params=(USER_PARAM,),
          body=Body("JobConfig")),
    Route("GET", "/api/v1/user/{user}/jobs/{job}", get_job, "job detail (what the tasks printed only with the "
          "owner's or an admin's token)", {200: Reply("the job", JobDetail)}, (400, 404), auth="optional",
          params=JOB_PARAMS),
    Route("PUT", "/api/v1/user/{user}/jobs/{job}", put_job, "submit a job named by the path (the body's jobName is "
          "required; where it differs, the path's name is used and a warning says so)", {202: _ACCEPTED},
          _SUBMIT_ERRORS, auth="token", params=_NEW_JOB_PARAMS, body=Body("JobConfigNamedByPath")),
    Route("DELETE", "/api/v1/user/{user}/jobs/{job}", delete_job, "stop (if running) and delete a job",
          {202: Reply("deleted or being stopped", Message)}, (400, 401, 403, 404), auth="token", params=JOB_PARAMS),
    Route("GET", "/api/v1/user/{user}/jobs/{job}/config", get_job_config, "the config as submitted (JSON, or YAML "
          "with Accept: text/yaml)", {200: Reply("the config", content={"application/json": _AS_SUBMITTED,
                                                                         "text/yaml": STRING})},
          (400, 404), params=JOB_PARAMS),
    Route("PUT", "/api/v1/user/{user}/jobs/{job}/executionType", put_execution_type, 'stop a job: {"value": "STOP"}',
          {200: Reply("the job had already ended", Message), 202: Reply("stop requested", Message)},
          (400, 401, 403, 404, 408, 413), auth="token", params=JOB_PARAMS, body=EXECUTION_TYPE),
)
