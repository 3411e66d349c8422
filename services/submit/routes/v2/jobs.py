"""Protocol v2's job routes (OpenPAI v1.8's ``/api/v2/jobs``): submit a v2 job (YAML, or JSON), and read
any job's config as a v2 document. The rest of ``/api/v2`` (issue 27) goes beside these.

A v2 submission is a v1 one with another judge (:func:`shared.admission.v2.checks.validate_v2_body`,
refusals ``400 InvalidProtocolError`` naming each path and rule) and OpenPAI v1.8's answer
(``202 {"status": 202, "message": "Update job <name> for user <user> successfully."}``); the token's user
submits (v2 has no user in its path), and everything else is :func:`services.submit.routes.jobs.submit`'s:
limits, the worker thread, idempotency keys, virtual clusters, names, secrets sealed before storing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from services.submit.contract.answers import Submitted, answer
from services.submit.contract.bodies import FORM_TYPES, check_charset
from services.submit.contract.lookup import job_or_404
from services.submit.contract.requests import USER_NAME_SCHEMA
from services.submit.contract.route import Body, Param, Reply, Route
from services.submit.errors import ApiError
from services.submit.routes.jobs import Refusals, accepted_headers, submit
from shared.admission.v2.checks import validate_v2_body
from shared.admission.validation import Accepted
from shared.jobconfig.limits import JobLimits
from shared.jobconfig.v2.fromjob import to_v2_document
from shared.jobconfig.v2.render import MASK
from shared.records import JobRecord

# The media types of a v2 body that are not YAML text (any other is read as YAML, which JSON is too).
_NOT_YAML = FORM_TYPES


def judge_v2(body: bytes, limits: JobLimits) -> Accepted:
    """The body as a v2 job (400 InvalidProtocolError naming each problem otherwise), its stored document
    holding no credentials (:func:`stored_document`)."""
    result = validate_v2_body(body, limits)
    if not isinstance(result, Accepted):
        raise ApiError("InvalidProtocolError", result.message)
    return result.model_copy(update={"raw": stored_document(result.raw)})


def stored_document(document: Mapping[str, Any]) -> dict[str, Any]:
    """The masked document (its ``secrets`` already ``******``) as it may be stored and shown: a registry
    password written as it is, not as a ``<% $secrets.x %>`` reference, masked too (OpenPAI stored and
    showed it)."""
    prerequisites = document.get("prerequisites")
    if not isinstance(prerequisites, list):
        return dict(document)
    return {**document, "prerequisites": [_without_password(p) for p in prerequisites]}


def _without_password(item: Any) -> Any:
    if not isinstance(item, Mapping) or not isinstance(item.get("auth"), Mapping):
        return item
    password = item["auth"].get("password")
    if not isinstance(password, str) or not password or "<%" in password:
        return item
    return {**item, "auth": {**item["auth"], "password": MASK}}


# OpenPAI v1.8's v2 job model (models/v2/job/k8s.js put, controllers/v2/job.js): a VC not among the user's,
# unknown ones included, is 403; a taken name is "Job <user>~<name> already exists."
V2_REFUSALS = Refusals(
    no_vc=lambda user, vc: ApiError("ForbiddenUserError", f"User {user} is not allowed to do operation in {vc}"),
    taken=lambda user, name: ApiError("ConflictJobError", f"Job {user}~{name} already exists."))


def accepted_v2(user: str, job_name: str, warnings: tuple[str, ...], *, replayed: bool = False) -> web.Response:
    """OpenPAI v1.8's 202, with v1's headers (Location, Idempotent-Replayed, X-Warning)."""
    return answer(Submitted(status=202, message=f"Update job {job_name} for user {user} successfully.",
                            warnings=warnings), status=202,
                  headers=accepted_headers(user, job_name, warnings, replayed=replayed))


async def submit_v2(request: web.Request) -> web.Response:
    """``POST /api/v2/jobs``: YAML as ``text/yaml`` (any ``text/*``, or none), or JSON (``application/json``,
    which OpenPAI refused); a form is refused, naming the types to send."""
    if request.content_type in _NOT_YAML:
        raise ApiError("InvalidProtocolError", f"a protocol v2 job is sent as text/yaml (or application/json), "
                                               f"not as {request.content_type}")
    check_charset(request)
    return await submit(request, None, judge_v2, accepted_v2, V2_REFUSALS)


def is_v2_document(raw: Mapping[str, Any]) -> bool:
    """Whether a stored config is a v2 job's document (a v1 body is never both of these)."""
    return raw.get("protocolVersion") in (2, "2") and isinstance(raw.get("taskRoles"), Mapping)


def v2_document(job: JobRecord) -> dict[str, Any]:
    """A job's config as v2: a v2 job's stored (masked) document, a v1 job's config converted."""
    return dict(job.raw_config) if is_v2_document(job.raw_config) else to_v2_document(job.config)


async def get_v2_config(request: web.Request) -> web.Response:
    """As OpenPAI v1.8 answered it: the document as JSON text (which is YAML) under ``text/yaml``."""
    job = await job_or_404(request)
    text = json.dumps(v2_document(job), ensure_ascii=False, separators=(",", ":"))
    return web.Response(text=text, content_type="text/yaml", charset="utf-8")


_V2_BODY = Body("JobV2", content={
    "text/yaml": {"type": "string", "description": "a protocol v2 job in YAML (OpenPAI v1.8's schema and checks)"},
    "application/json": {"type": "object", "description": "a protocol v2 job as JSON (paiq only: OpenPAI refused "
                                                          "JSON bodies)"}})
# What a YAML loader reads from the answer (its text is JSON, which is YAML): a v2 job's document.
_V2_DOCUMENT = {"type": "object", "description": "a protocol v2 job document, secrets masked"}
_SUBMITTED = Reply("accepted; Location names the job", Submitted, headers={
    "Location": {"schema": {"type": "string"}, "description": "the job's URL path"},
    "X-Warning": {"schema": {"type": "string"}, "description": "the warnings, ' | '"}})
_V2_JOB_PARAMS = (Param("user", "path", USER_NAME_SCHEMA, "the job's user (400 when not a user name)"),
                  Param("job", "path", description="the job's name"))

ROUTES = (
    Route("POST", "/api/v2/jobs", submit_v2, "submit a protocol v2 job (YAML, or JSON) as the token's user",
          {202: _SUBMITTED}, (400, 401, 403, 404, 408, 409, 413, 503), also={400: ("InvalidProtocolError",)},
          auth="token", body=_V2_BODY),
    Route("GET", "/api/v2/jobs/{user}~{job}/config", get_v2_config, "a job's config as a protocol v2 document, "
          "secrets masked (a v1 job's converted), as JSON text under text/yaml as OpenPAI answered it",
          {200: Reply("the config", content={"text/yaml": _V2_DOCUMENT})}, (400, 404), params=_V2_JOB_PARAMS),
)
