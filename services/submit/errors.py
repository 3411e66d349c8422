"""OpenPAI's REST errors, in one place: the codes, the status each answers with, what each status means
in the OpenAPI document, and the ``{code, message}`` answer (:class:`Error`) that carries them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from aiohttp import web
from pydantic import BaseModel, ConfigDict

from shared.admission.validation import MAX_CONFIG_BYTES
from shared.errors import PaiqError

ErrorCode = Literal[
    "InvalidParametersError", "NoUserError", "UnauthorizedUserError", "ForbiddenUserError", "NoJobError",
    "NoVirtualClusterError", "NoJobConfigError", "NoJobSshInfoError", "ConflictJobError", "ConflictUserError",
    "RemoveAdminError", "ConflictVirtualClusterError", "NoApiError", "MethodNotAllowedError",
    "PayloadTooLargeError", "RequestTimeoutError", "RequestHeaderFieldsTooLargeError", "UnknownError",
    "ServiceUnavailableError", "TooManyRequestsError", "InvalidProtocolError",
    "NoGroupError", "ConflictGroupError", "NoStorageError", "NoTagError", "NoSubscriptionError", "NoTaskLogError",
    "EventsExpiredError",
]

STATUS_OF: dict[ErrorCode, int] = {
    "InvalidParametersError": 400,
    # A protocol v2 job refused (POST /api/v2/jobs only): the message names each path and rule.
    "InvalidProtocolError": 400,
    # OpenPAI v1.8's /api/v2 groups and storages (their routes only): an unknown group or storage, a taken
    # group name (OpenPAI answered that 500; paiq says what it is).
    "NoGroupError": 404,
    "ConflictGroupError": 409,
    "NoStorageError": 404,
    # OpenPAI v1.8's DELETE /api/v2/jobs/{user}~{job}/tag of a tag the job does not have
    "NoTagError": 404,
    # OpenPAI v1.8's GET /api/v2/jobs/.../attempts/{taskAttemptId}/logs of a task attempt the task did not have
    # or whose container never started ("Log of task is not found.")
    "NoTaskLogError": 404,
    # Not one of OpenPAI's codes: DELETE of a notification subscription the caller does not have.
    "NoSubscriptionError": 404,
    "NoUserError": 404,
    "UnauthorizedUserError": 401,
    "ForbiddenUserError": 403,
    "NoJobError": 404,
    "NoVirtualClusterError": 404,
    "NoJobConfigError": 404,
    "NoJobSshInfoError": 404,
    "ConflictJobError": 409,
    "ConflictUserError": 409,
    "RemoveAdminError": 403,
    "ConflictVirtualClusterError": 409,
    "NoApiError": 404,
    "MethodNotAllowedError": 405,
    "PayloadTooLargeError": 413,
    # Not one of OpenPAI's codes: a body that does not arrive in time (PAIQ_BODY_TIMEOUT_SECONDS).
    "RequestTimeoutError": 408,
    # Not one of OpenPAI's codes: its Node.js server answered oversized headers with a bare 431.
    "RequestHeaderFieldsTooLargeError": 431,
    # Not one of OpenPAI's codes: an anonymous heavy read beyond its budget (services.submit.routes.throttle), a
    # password tried during a window that wrong ones opened (services.submit.loginguard).
    "TooManyRequestsError": 429,
    "UnknownError": 500,
    # Not one of OpenPAI's codes: the database or the broker unreachable (an outage, not a bug).
    "ServiceUnavailableError": 503,
    # Not one of OpenPAI's codes: a resume of the event stream from before what the journal still keeps
    # (PAIQ_EVENT_RETENTION_HOURS), as Kubernetes answers a watch from a compacted resourceVersion.
    "EventsExpiredError": 410,
}

# The code of an answer aiohttp decided (an HTTPException, a request its parser refused), by status.
_CODE_OF_STATUS: dict[int, ErrorCode] = {
    400: "InvalidParametersError", 401: "UnauthorizedUserError", 403: "ForbiddenUserError", 404: "NoApiError",
    405: "MethodNotAllowedError", 408: "RequestTimeoutError", 413: "PayloadTooLargeError",
    429: "TooManyRequestsError", 431: "RequestHeaderFieldsTooLargeError"}

# What an error of each status means, as the OpenAPI document says it (of the statuses routes list).
MEANING_OF_STATUS = {
    400: "invalid parameters or body; the message names each problem",
    401: "no bearer token, or an unknown or expired one",
    403: "not allowed to this user",
    404: "not found",
    408: "the body did not arrive within PAIQ_BODY_TIMEOUT_SECONDS",
    409: "conflicts with what exists",
    410: "the events asked for are older than the journal keeps (PAIQ_EVENT_RETENTION_HOURS): read the current "
         "state, then follow from now",
    413: f"the body is over {2 * MAX_CONFIG_BYTES:,} bytes",
    503: "the platform cannot take this now: its database or broker is unreachable, or it lacks a setting the "
         "request needs (the message names it)",
    429: "too many requests: a heavy read without a valid token, beyond what anonymous callers may ask together "
         "(PAIQ_ANONYMOUS_HEAVY_READS a second; or send a token), or a password tried again after repeated wrong "
         "ones for that user or from that address; Retry-After says when to try again",
}
# Headers an error of a status carries, as the OpenAPI document says them.
HEADERS_OF_STATUS = {
    429: {"Retry-After": {"description": "seconds to wait before trying again", "schema": {"type": "string"}}},
}

class Error(BaseModel):
    """OpenPAI's error answer, whatever the route; each code comes with one status (listed by each operation)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    code: ErrorCode
    message: str


# Codes only some routes answer with (each such route lists them in its ``also``).
ROUTE_CODES: frozenset[ErrorCode] = frozenset({"InvalidProtocolError", "NoGroupError", "ConflictGroupError",
                                               "NoStorageError", "NoTagError", "NoSubscriptionError",
                                               "NoTaskLogError"})


def codes_of(status: int) -> list[ErrorCode]:
    """The codes answered with ``status`` by any route, sorted."""
    return sorted(c for c, s in STATUS_OF.items() if s == status and c not in ROUTE_CODES)


# What a refusal may quote of the value it refuses: longer or odd values are described, not echoed.
SHOWN_CHARS = 64


class ApiError(PaiqError):
    """``status`` only where OpenPAI answered a code with another status than its usual one (its
    ``GET /api/v1/user/{user}`` said ``400 NoUserError``; its PUT and DELETE said 404)."""

    def __init__(self, code: ErrorCode, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status or STATUS_OF[code]

    def response(self, headers: Mapping[str, str] | None = None) -> web.Response:
        return web.json_response(Error(code=self.code, message=self.message).model_dump(mode="json"),
                                 status=self.status, headers=headers)


class TooManyRequestsError(ApiError):
    """429 TooManyRequestsError with the whole seconds to wait, which the answer carries as ``Retry-After``."""

    def __init__(self, message: str, wait_s: int) -> None:
        super().__init__("TooManyRequestsError", message)
        self.wait_s = wait_s

    def response(self, headers: Mapping[str, str] | None = None) -> web.Response:
        return super().response({**(headers or {}), "Retry-After": str(self.wait_s)})


def for_status(status: int, message: str) -> ApiError:
    """An answer of ``status`` that aiohttp decided, as OpenPAI's ``{code, message}`` (a 4xx without a code
    of its own is the request's fault: InvalidParametersError)."""
    code = _CODE_OF_STATUS.get(status, "InvalidParametersError" if 400 <= status < 500 else "UnknownError")
    return ApiError(code, message, status=status)


def shown(value: str, limit: int = SHOWN_CHARS) -> str:
    """``value`` as a refusal may quote it: ``repr`` when short and printable, else only what it is like,
    so that no answer echoes a long or binary input back."""
    if len(value) > limit:
        return f"(a value of {len(value)} characters)"
    if not value.isprintable() or "\ufffd" in value:  # U+FFFD: where the URL held bytes that are not UTF-8
        return "(a value with control characters or bytes that are not UTF-8)"
    return repr(value)


def error_responses(*statuses: int, also: Mapping[int, tuple[str, ...]] | None = None) -> dict[str, Any]:
    """The OpenAPI answers of a route's errors: ``{code, message}`` with the codes each status carries
    (``also``: codes only this route answers with), described by what the status means."""
    out: dict[str, Any] = {}
    for status in statuses:
        codes = sorted({*codes_of(status), *(also or {}).get(status, ())})
        schema = {"allOf": [{"$ref": "#/components/schemas/Error"}], "properties": {"code": {"enum": codes}}}
        out[str(status)] = {"description": f"{MEANING_OF_STATUS[status]} ({', '.join(codes)})",
                            "content": {"application/json": {"schema": schema}}}
        if status in HEADERS_OF_STATUS:
            out[str(status)]["headers"] = HEADERS_OF_STATUS[status]
    return out
