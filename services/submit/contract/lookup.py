"""What a route's path names: its user (a valid name, else 400) and that user's job (else 404); and the path
parameters as the document gives them."""

from __future__ import annotations

from aiohttp import web

from services.submit.contract.requests import USER_NAME_SCHEMA
from services.submit.contract.route import Param
from services.submit.deps import DEPS
from services.submit.errors import ApiError, shown
from services.submit.users import check_user_name
from shared.records import JobRecord


def path_user(request: web.Request) -> str:
    return check_user_name(request.match_info["user"])


async def job_or_404(request: web.Request) -> JobRecord:
    user, name = path_user(request), request.match_info["job"]
    job = await request.app[DEPS].store.find_job(user, name)
    if job is None:
        raise ApiError("NoJobError", f"job {shown(name)} of user {user} was not found")
    return job


USER_PARAM = Param("user", "path", USER_NAME_SCHEMA, "a user name (400 otherwise)")
JOB_PARAMS = (USER_PARAM, Param("job", "path"))
