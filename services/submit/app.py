"""The REST API (OpenPAI v1 routes): job submission and the job views."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import quote

import structlog
from aiohttp import web

from services.submit.errors import ApiError
from services.submit.views import job_detail, job_summary
from shared.bus.base import Bus
from shared.errors import BusError, JobExistsError
from shared.events import JobSubmitted, JobSubmittedData
from shared.records import JobRecord, initial_tasks, job_id_of, now_ms
from shared.settings import Settings
from shared.store import Store
from shared.validation import MAX_CONFIG_BYTES, Accepted, parse_job_json, validate_job_config

log = structlog.get_logger("paiq.submit")

USER_PATTERN = re.compile(r"^[A-Za-z0-9_\-.]{1,64}$")


@dataclass(frozen=True)
class SubmitDeps:
    settings: Settings
    store: Store
    bus: Bus


DEPS = web.AppKey("deps", SubmitDeps)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure leaves as OpenPAI's ``{code, message}``; never a stack trace."""
    try:
        return await handler(request)
    except ApiError as e:
        return e.response()
    except web.HTTPNotFound:
        return ApiError("NoApiError", f"no API at {request.method} {request.path}").response()
    except web.HTTPMethodNotAllowed:
        return ApiError("MethodNotAllowedError",
                        f"{request.method} is not allowed on {request.path}").response()
    except web.HTTPRequestEntityTooLarge:
        return ApiError("PayloadTooLargeError",
                        f"the request body must be at most {MAX_CONFIG_BYTES} bytes").response()
    except web.HTTPException:
        raise
    except Exception:
        log.exception("request failed", method=request.method, path=request.path)
        return ApiError("UnknownError", "internal error; the submit service log has the details").response()


def _user(request: web.Request) -> str:
    user = request.match_info["user"]
    if not USER_PATTERN.match(user):
        raise ApiError("InvalidParametersError", f"user name {user!r} must match {USER_PATTERN.pattern}")
    return user


async def submit_job(request: web.Request) -> web.Response:
    deps = request.app[DEPS]
    user = _user(request)
    parsed = parse_job_json(await request.read())
    result = validate_job_config(parsed) if isinstance(parsed, dict) else parsed
    if not isinstance(result, Accepted):
        raise ApiError("InvalidParametersError", result.message)
    config = result.config
    job = JobRecord(
        id=job_id_of(user, config.job_name), user=user, name=config.job_name,
        virtual_cluster=config.virtual_cluster, config=config, raw_config=result.raw,
        warnings=result.warnings, created_ms=now_ms(), tasks=initial_tasks(config),
    )
    try:
        await deps.store.insert_job(job)
    except JobExistsError as e:
        raise ApiError("ConflictJobError", f"job {config.job_name} already exists for user {user}") from e
    log.info("job accepted", job_id=job.id, tasks=config.total_tasks, vc=config.virtual_cluster)
    event = JobSubmitted(subject=job.id, data=JobSubmittedData(
        job_id=job.id, user=user, virtual_cluster=job.virtual_cluster))
    try:
        await deps.bus.publish([event])
    except BusError:
        # The job is stored; the scheduler's periodic pass finds WAITING jobs without the event.
        log.warning("job stored but job.submitted not published; the scheduler will find it on its next pass",
                    job_id=job.id)
    location = f"/api/v1/user/{quote(user)}/jobs/{quote(config.job_name)}"
    body: dict[str, object] = {"message": f"update job {config.job_name} successfully"}
    headers = {"Location": location}
    if result.warnings:
        body["warnings"] = list(result.warnings)
        headers["X-Warning"] = " | ".join(result.warnings)
    return web.json_response(body, status=202, headers=headers)


async def _job_or_404(request: web.Request) -> JobRecord:
    user, name = _user(request), request.match_info["job"]
    job = await request.app[DEPS].store.get_job(job_id_of(user, name))
    if job is None:
        raise ApiError("NoJobError", f"job {name} of user {user} was not found")
    return job


async def get_job(request: web.Request) -> web.Response:
    return web.json_response(job_detail(await _job_or_404(request)))


async def get_job_config(request: web.Request) -> web.Response:
    return web.json_response((await _job_or_404(request)).raw_config)


def _page(request: web.Request) -> tuple[int, int]:
    try:
        limit = int(request.query.get("limit", "1000"))
        offset = int(request.query.get("offset", "0"))
    except ValueError as e:
        raise ApiError("InvalidParametersError", "limit and offset must be integers") from e
    if not (1 <= limit <= 10000 and offset >= 0):
        raise ApiError("InvalidParametersError", "limit must be 1-10000 and offset >= 0")
    return limit, offset


async def list_jobs(request: web.Request) -> web.Response:
    user = request.query.get("username") or None
    limit, offset = _page(request)
    jobs = await request.app[DEPS].store.list_jobs(user=user, limit=limit, skip=offset)
    return web.json_response([job_summary(j) for j in jobs])


async def list_user_jobs(request: web.Request) -> web.Response:
    limit, offset = _page(request)
    jobs = await request.app[DEPS].store.list_jobs(user=_user(request), limit=limit, skip=offset)
    return web.json_response([job_summary(j) for j in jobs])


async def healthz(request: web.Request) -> web.Response:
    await request.app[DEPS].store.ping()
    return web.json_response({"status": "ok"})


def create_app(deps: SubmitDeps) -> web.Application:
    app = web.Application(middlewares=[error_middleware], client_max_size=MAX_CONFIG_BYTES * 2)
    app[DEPS] = deps
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/api/v1/jobs", list_jobs)
    app.router.add_get("/api/v1/user/{user}/jobs", list_user_jobs)
    app.router.add_post("/api/v1/user/{user}/jobs", submit_job)
    app.router.add_get("/api/v1/user/{user}/jobs/{job}", get_job)
    app.router.add_get("/api/v1/user/{user}/jobs/{job}/config", get_job_config)
    return app


async def start_submit(deps: SubmitDeps) -> web.AppRunner:
    runner = web.AppRunner(create_app(deps), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, deps.settings.api_host, deps.settings.api_port)
    await site.start()
    log.info("REST API listening", url=deps.settings.api_url)
    return runner
