"""``GET /api/v2/jobs``: OpenPAI v1.8's job list (``controllers/v2/job.js`` ``list``), newest first, a page
at a time, every filter served by an index and flat with history.

Filters: ``username``, ``vc``, ``state`` (each comma-separated as OpenPAI took them: the list is the union of
the lists of each combination of their values, at most :data:`MAX_VALUES`, each read alone and merged newest
first), ``keyword`` (a prefix of the job's name or of a word of it,
case-insensitive: :mod:`shared.keywords`; OpenPAI matched a substring of the name, user or VC),
``tagsContain`` (jobs holding any of the tags, comma-separated as OpenPAI took them), ``tagsNotContain`` (jobs
holding none of them: a bounded walk of the list with the others, :mod:`shared.db.lists.negative`). Each combination is
one equality prefix of an index (:mod:`shared.db.indexes`) read in the newest-first windows of
:mod:`shared.db.lists.paging`; a keyword or tags with other filters is served by the keyword's (or tags')
index, the others checked among its jobs. ``order``: ``submissionTime,DESC`` (OpenPAI's default) is served here;
v1.8's other 19 (``jobName``, ``submissionTime``, ``username``, ``vc``, ``retries``, ``totalTaskNumber``,
``totalGpuNumber``, ``state``, ``completionTime``, ``jobPriority``, each ``,ASC`` or ``,DESC``) by
:mod:`shared.db.listorder`, which says how each is read and refuses (400, saying why) what no index serves
flat. ``offset``: a list with no ``vc``, ``keyword`` or tags reaches any
offset at the cost of a page (its counts); with them, ``offset + limit`` is bounded like a page's ``limit``
(past it, 400 naming ``X-Next-Cursor``, which continues at the cost of the next page only).
``withTotalCount=true``: ``{totalCount, data}``; the count from counters (:mod:`shared.db.lists.totals`),
never from the history; where none covers the filters, a lower bound (jobs up to this page, plus one when
more follow), which pages as the portal's pager needs.
"""

from __future__ import annotations

import itertools
from contextlib import nullcontext
from typing import Any

from aiohttp import web

from services.submit.contract.route import Param, Reply, Route, WholeNumber
from services.submit.contract.v2.jobs import V2JobList, V2JobPage
from services.submit.contract.v2.jobviews import v2_summary
from services.submit.deps import DEPS
from services.submit.errors import ApiError
from services.submit.routes.access import principal_of
from services.submit.routes.listing import CURSOR
from services.submit.routes.throttle import heavy_read, is_heavy_page
from services.submit.users import check_user_name
from shared.db.listorder import MAX_SORTED, Asked, OrderedPage, OrderRefusedError, ordered_page
from shared.db.lists.negative import SCAN_BUDGET, without_tags
from shared.db.lists.orders import ALL, DEFAULT, Order, OrderCursor, OrderError
from shared.db.lists.paging import Cursor, CursorError, JobPage
from shared.db.store import Store
from shared.db.tags import MAX_TAG_CHARS
from shared.records import JobState

MAX_WALK = 10_000  # offset + limit of a list no counts serve: what one page of the v1 list may read
LIMIT = WholeNumber("limit", default=1000, least=1, most=10_000)
OFFSET = WholeNumber("offset", default=0, least=0, most=100_000, hint=" (deeper: the cursor of X-Next-Cursor)")
MAX_KEYWORD = 255
MAX_TAGS_ASKED = 16
MAX_VALUES = 16  # combinations of username x state x vc values: each one list read
_STATES = [s.value for s in JobState]
_ONE_STATE = "|".join(_STATES)


def _values(request: web.Request, name: str) -> tuple[str | None, ...]:
    """A filter's values (OpenPAI's comma-separated list), each once; ``(None,)`` when absent."""
    values = tuple(dict.fromkeys(v for v in (request.query.get(name) or "").split(",") if v))
    if len(values) > MAX_VALUES:
        raise ApiError("InvalidParametersError", f"{name}: at most {MAX_VALUES} values")
    return values or (None,)


def _combinations(request: web.Request) -> list[tuple[str | None, str | None, str | None]]:
    """Every (username, state, vc) the list is the union of: each one list served by its index."""
    users = tuple(check_user_name(u) if u else None for u in _values(request, "username"))
    states = _values(request, "state")
    if any(s is not None and s not in _STATES for s in states):
        raise ApiError("InvalidParametersError", f"state: each one of {', '.join(_STATES)}")
    combos = list(itertools.product(users, states, _values(request, "vc")))
    if len(combos) > MAX_VALUES:
        raise ApiError("InvalidParametersError",
                       f"username x state x vc: at most {MAX_VALUES} combinations of their values")
    return combos


def _filters(request: web.Request) -> dict[str, Any]:
    keyword = request.query.get("keyword") or None
    if keyword is not None and len(keyword) > MAX_KEYWORD:
        raise ApiError("InvalidParametersError", f"keyword: at most {MAX_KEYWORD} characters")
    tags, without = _tags(request, "tagsContain"), _tags(request, "tagsNotContain")
    return {"keyword": keyword, "tags": tags, "without": frozenset(without)}


def _tags(request: web.Request, name: str) -> tuple[str, ...]:
    tags = tuple(t for t in request.query.get(name, "").split(",") if t)
    if len(tags) > MAX_TAGS_ASKED or any(len(t) > MAX_TAG_CHARS for t in tags):
        raise ApiError("InvalidParametersError",
                       f"{name}: at most {MAX_TAGS_ASKED} tags of at most {MAX_TAG_CHARS} characters")
    return tags


def _order(request: web.Request) -> Order:
    try:
        return Order.parse(request.query.get("order") or None)
    except OrderError as e:
        raise ApiError("InvalidParametersError", str(e)) from e


def _cursor(request: web.Request) -> Cursor | None:
    text = request.query.get(CURSOR.name)
    try:
        return Cursor.decode(text) if text else None
    except CursorError as e:
        raise ApiError("InvalidParametersError", str(e)) from e


def _order_cursor(request: web.Request, order: Order) -> OrderCursor | None:
    text = request.query.get(CURSOR.name)
    try:
        return OrderCursor.decode(text, order) if text else None
    except CursorError as e:
        raise ApiError("InvalidParametersError", str(e)) from e


async def _ordered(request: web.Request, order: Order, combos: list[tuple[str | None, str | None, str | None]],
                   filters: dict[str, Any], limit: int, offset: int) -> tuple[OrderedPage, bool]:
    """A page in another of v1.8's orders (:mod:`shared.db.listorder`); whether it had a cursor."""
    cursor = _order_cursor(request, order)
    asked = Asked(tuple(combos), filters["keyword"], filters["tags"], filters["without"])
    async with heavy_read(request) if is_heavy_page(limit * len(combos), offset) else nullcontext():
        try:
            page = await ordered_page(request.app[DEPS].store, order, asked, limit=limit, offset=offset, cursor=cursor)
        except OrderRefusedError as e:
            raise ApiError("InvalidParametersError", str(e)) from e
    return page, cursor is not None


async def _page(store: Store, combos: list[tuple[str | None, str | None, str | None]], filters: dict[str, Any],
                limit: int, offset: int, cursor: Cursor | None) -> JobPage:
    """One list's page, or the union of several lists' (a filter of several values): each list's first
    ``offset + limit`` jobs after the cursor, merged newest first (the route bounds ``offset + limit``).
    ``tagsNotContain``: one list, read in chunks, its jobs with those tags skipped (:mod:`shared.db.lists.negative`)."""
    without: frozenset[str] = filters.pop("without")
    if len(combos) == 1:
        user, state, vc = combos[0]
        if without:
            async def read(at_most: int, at: Cursor | None) -> JobPage:
                return await store.list_jobs(limit=at_most, cursor=at, user=user, state=state, vc=vc, **filters)
            return await without_tags(read, without, limit=limit, offset=offset, cursor=cursor)
        return await store.list_jobs(limit=limit, offset=offset, cursor=cursor, user=user, state=state, vc=vc,
                                     **filters)
    pages = [await store.list_jobs(limit=offset + limit, cursor=cursor, user=user, state=state, vc=vc, **filters)
             for user, state, vc in combos]
    merged = sorted((j for p in pages for j in p.jobs), key=lambda j: (-j.created_ms, j.id))
    jobs = merged[offset:offset + limit]
    more = bool(jobs) and (len(merged) > offset + limit or any(p.next_cursor for p in pages))
    return JobPage(jobs, Cursor(jobs[-1].created_ms, jobs[-1].id).encode() if more else None)


async def _total(store: Store, combos: list[tuple[str | None, str | None, str | None]]) -> int | None:
    """The exact total where every combination has a counter (they are disjoint: each value once)."""
    total = 0
    for user, state, vc in combos:
        n = await store.count_jobs(user=user, state=state, vc=vc)
        if n is None:
            return None
        total += n
    return total


async def list_v2_jobs(request: web.Request) -> web.Response:
    """A token is needed (OpenPAI v1.8: ``token.check``); any user's jobs are listed, as there."""
    await principal_of(request)
    combos, filters, order = _combinations(request), _filters(request), _order(request)
    limit, offset = LIMIT.read(request), OFFSET.read(request)
    if not order.is_default:
        ordered, continued = await _ordered(request, order, combos, filters, limit, offset)
        return await _answer(request, combos, filters, offset, JobPage(ordered.jobs, ordered.next_cursor), continued)
    cursor = _cursor(request)
    if filters["without"] and len(combos) > 1:
        raise ApiError("InvalidParametersError", "tagsNotContain: with one value each of username, state and vc "
                                                 "at most")
    walked = len(combos) > 1 or any(vc for _, _, vc in combos) or bool(filters["keyword"] or filters["tags"]
                                                                        or filters["without"])
    if walked and offset + limit > MAX_WALK:
        raise ApiError("InvalidParametersError", f"offset + limit: at most {MAX_WALK} with vc, keyword, tagsContain "
                                                 "or several values of a filter (continue with the cursor of "
                                                 "X-Next-Cursor)")
    async with heavy_read(request) if is_heavy_page(limit * len(combos), offset) else nullcontext():
        page = await _page(request.app[DEPS].store, combos, dict(filters), limit, offset, cursor)
    return await _answer(request, combos, filters, offset, page, cursor is not None)


async def _answer(request: web.Request, combos: list[tuple[str | None, str | None, str | None]],
                  filters: dict[str, Any], offset: int, page: JobPage, continued: bool) -> web.Response:
    """The page as v1.8 answered it (with ``{totalCount, data}`` when asked: the same in every order)."""
    headers = {"X-Next-Cursor": page.next_cursor} if page.next_cursor else {}
    data = tuple(v2_summary(j) for j in page.jobs)
    if request.query.get("withTotalCount") != "true":
        return web.json_response(V2JobList(data).model_dump(mode="json", by_alias=True), headers=headers)
    total = None
    if not filters["keyword"] and not filters["tags"] and not filters["without"] and not continued:
        total = await _total(request.app[DEPS].store, combos)
    if total is None:  # no counter covers these filters: a lower bound
        total = offset + len(data) + (1 if page.next_cursor else 0)
    body = V2JobPage(total_count=total, data=data)
    return web.json_response(body.model_dump(mode="json", by_alias=True), headers=headers)


_PARAMS = (
    Param("username", "query", description="these users' jobs (comma-separated user names)"),
    Param("vc", "query", description="these virtual clusters' jobs (comma-separated)"),
    Param("state", "query", {"type": "string", "pattern": f"^({_ONE_STATE})(,({_ONE_STATE}))*$"},
          "jobs in these states (comma-separated)"),
    Param("keyword", "query", {"type": "string", "maxLength": MAX_KEYWORD},
          "a prefix of the job's name or of a word of it, case-insensitive"),
    Param("tagsContain", "query", description="jobs holding any of these tags (comma-separated)"),
    Param("tagsNotContain", "query", description="jobs holding none of these tags (comma-separated); a request "
          f"reads at most {SCAN_BUDGET} jobs: a page shorter than limit with X-Next-Cursor may have more after it"),
    Param("order", "query", {"type": "string", "enum": list(ALL)},
          f"OpenPAI v1.8's orders (default {DEFAULT}: newest first); ties newest first. jobName, and the others with "
          f"filters no index serves in that order, sort a list of at most {MAX_SORTED} jobs (400 for a longer one); "
          "offset + limit at most 10,000 where no count serves a deeper page (then the cursor)"),
    LIMIT.param(), OFFSET.param(), CURSOR,
    Param("withTotalCount", "query", {"type": "string", "enum": ["true", "false"]},
          "answer {totalCount, data} (OpenPAI's form)"),
)
_PAGE = Reply("the jobs (an array; {totalCount, data} with withTotalCount=true)", content={"application/json": {
    "oneOf": [{"$ref": "#/components/schemas/V2JobList"}, {"$ref": "#/components/schemas/V2JobPage"}]}},
    headers={"X-Next-Cursor": {"description": "the cursor of the next page; absent on the last",
                               "schema": {"type": "string"}}})

ROUTES = (
    Route("GET", "/api/v2/jobs", list_v2_jobs, "jobs, newest first or in another of OpenPAI v1.8's orders, filtered "
          "by username, vc, state, keyword (a prefix of the name or a word of it) and tags (OpenPAI v1.8's v2 list)",
          {200: _PAGE},
          (400, 401, 429), auth="token", params=_PARAMS),
)
