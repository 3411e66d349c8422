"""OpenPAI's REST errors: ``{code, message}`` with the status each code answers with."""

from __future__ import annotations

from aiohttp import web

from shared.errors import PaiqError

STATUS_OF = {
    "InvalidParametersError": 400,
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
    "UnknownError": 500,
}


class ApiError(PaiqError):
    """``status`` only where OpenPAI answered a code with another status than its usual one (its
    ``GET /api/v1/user/{user}`` said ``400 NoUserError``; its PUT and DELETE said 404)."""

    def __init__(self, code: str, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status or STATUS_OF[code]

    def response(self) -> web.Response:
        return web.json_response({"code": self.code, "message": self.message}, status=self.status)
