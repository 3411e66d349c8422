"""The job lists, a page at a time: ``GET /api/v1/jobs`` and ``GET /api/v1/user/{user}/jobs``, newest first.

A page's parameters are declared once (:data:`LIMIT`, :data:`OFFSET`, :data:`STATE`, the cursor): the
handlers read them through the same values the OpenAPI document describes.
"""

from __future__ import annotations

from contextlib import nullcontext
from urllib.parse import urlencode

from aiohttp import web

from services.submit.contract.answers import JobList, answer
from services.submit.contract.lookup import USER_PARAM, path_user
from services.submit.contract.requests import USER_NAME_SCHEMA
from services.submit.contract.route import Param, Reply, Route, WholeNumber
from services.submit.contract.views import job_summary
from services.submit.deps import DEPS
from services.submit.errors import ApiError
from services.submit.routes.throttle import heavy_read, is_heavy_page
from services.submit.users import check_user_name
from shared.db.lists.paging import Cursor, CursorError
from shared.db.store import Store
from shared.jobconfig.problems import shown
from shared.records import JobState, SubState
from shared.scheduling.queueing import queue_positions

LIMIT = WholeNumber("limit", default=1000, least=1, most=10_000)
OFFSET = WholeNumber("offset", default=0, least=0, most=100_000,
                     hint=" (use the cursor of X-Next-Cursor for deeper pages)")
STATE = Param("state", "query", {"type": "string", "enum": [s.value for s in JobState]})
CURSOR = Param("cursor", "query", description="X-Next-Cursor of the page before (400 for another string)")
PAGE_PARAMS = (STATE, LIMIT.param(), OFFSET.param(), CURSOR)
PAGE = Reply("jobs", JobList, headers={
    "X-Next-Cursor": {"description": "the cursor of the next page; absent on the last", "schema": {"type": "string"}},
    "Link": {"description": '<next page>; rel="next"', "schema": {"type": "string"}}})


def _page(request: web.Request) -> tuple[int, int, Cursor | None]:
    limit, offset = LIMIT.read(request), OFFSET.read(request)
    text = request.query.get(CURSOR.name)
    try:
        cursor = Cursor.decode(text) if text else None
    except CursorError as e:
        raise ApiError("InvalidParametersError", str(e)) from e
    return limit, offset, cursor


def _state_filter(request: web.Request) -> str | None:
    state = request.query.get(STATE.name) or None
    if state is not None and state not in {s.value for s in JobState}:
        raise ApiError("InvalidParametersError",
                       f"state: must be one of {', '.join(s.value for s in JobState)}, got {shown(state)[1:-1]}")
    return state


async def positions(store: Store) -> dict[str, int]:
    """Queued jobs' places in their queues, derived from the queue as it is now (active work only)."""
    return queue_positions(await store.queue_order(), await store.queue_shares())


async def _list(request: web.Request, user: str | None) -> web.Response:
    """A page of summaries, newest first; ``X-Next-Cursor`` (and a ``Link`` rel=next) when more follow."""
    limit, offset, cursor = _page(request)
    state = _state_filter(request)
    async with heavy_read(request) if is_heavy_page(limit, offset) else nullcontext():
        page = await request.app[DEPS].store.list_jobs(user=user, state=state, limit=limit, offset=offset,
                                                       cursor=cursor)
    headers = {}
    if page.next_cursor:
        query = {k: v for k, v in request.query.items() if k not in {"cursor", "offset"}}
        headers["X-Next-Cursor"] = page.next_cursor
        headers["Link"] = f'<{request.path}?{urlencode({**query, "cursor": page.next_cursor})}>; rel="next"'
    queued = any(j.sub_state == SubState.QUEUED for j in page.jobs)
    places = await positions(request.app[DEPS].store) if queued else {}
    return answer(JobList(tuple(job_summary(j, places) for j in page.jobs)), headers=headers)


async def list_jobs(request: web.Request) -> web.Response:
    user = request.query.get("username") or None
    return await _list(request, check_user_name(user) if user else None)


async def list_user_jobs(request: web.Request) -> web.Response:
    return await _list(request, path_user(request))


ROUTES = (
    Route("GET", "/api/v1/jobs", list_jobs, "all jobs, newest first (a page: X-Next-Cursor when more follow)",
          {200: PAGE}, (400, 429), params=(Param("username", "query", USER_NAME_SCHEMA), *PAGE_PARAMS)),
    Route("GET", "/api/v1/user/{user}/jobs", list_user_jobs, "a user's jobs, newest first (a page)", {200: PAGE},
          (400, 429), params=(USER_PARAM, *PAGE_PARAMS)),
)
