"""Job lists, newest first, whose cost follows the page asked for and not the history stored.

Order: ``created_ms`` descending, then ``_id`` ascending, served by the indexes ``(created_ms, _id)``,
``(user, created_ms, _id)``, ``(state, created_ms, _id)`` and ``(user, state, created_ms, _id)``: every
filter the list routes take is one bounded range of one index. A page is read as a series of windows of
creation time walked backwards from the newest job (or from a cursor): the first window is a minute wide
and later ones are sized from the density seen so far. Why windows rather than one ``sort().limit()``:
the embedded MongoDB-wire server (SecantusDB) reads the whole index range a query allows before applying
its limit, so an unbounded newest-first query reads every job ever stored; a bounded range reads only the
jobs in it, on any server.

An ``offset`` past :data:`DEEP_FROM` (OpenPAI's paging) is not walked: the counts of ended jobs by
creation time (:mod:`shared.db.lists.counts`) say which fine bucket of creation time (about 16 s) holds the
page's first job and which holds the job after its last, and only the jobs between are read; so any
offset costs about what a page costs, plus the active jobs (read to count them). The opaque cursor of a
page (``X-Next-Cursor``) continues from its last job at the cost of the next page only. Lists carry
summaries (a projection): never task arrays or configs.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pymongo import ASCENDING, DESCENDING
from pymongo.asynchronous.collection import AsyncCollection

from shared.db.lists.buckets import LEVEL_BITS, span
from shared.db.lists.counts import ListCounts, ListView
from shared.keywords import keyword_query
from shared.records import JobState, RetryCounts, SubState

Doc = dict[str, Any]
FIRST_WINDOW_MS = 60_000
MAX_GROWTH = 16  # a window is at most this many times wider than the one before
DEEP_FROM = 100  # an offset past this is found through the counts (shared.db.lists.counts)


class JobSummary(BaseModel):
    """What a list shows of a job: the fields below, read with a projection."""

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)
    id: str = Field(alias="_id")
    user: str
    name: str
    virtual_cluster: str
    state: JobState
    sub_state: SubState = SubState.QUEUED
    reason: str = ""
    queued_ms: int | None = None
    stop_requested_by: str | None = None
    retries: int = 0
    retry_counts: RetryCounts = RetryCounts()
    created_ms: int
    completed_ms: int | None = None
    exit_code: int | None = None
    task_count: int = 0
    gpu_count: int = 0
    role_count: int = 0
    launched_ms: int | None = None
    tags: tuple[str, ...] = ()  # GET /api/v2/jobs's tags (PUT/DELETE /api/v2/jobs/{user}~{job}/tag)
    job_priority: str | None = None  # the class the config wrote (shared.jobconfig.priority.written_class)


PROJECTION: Doc = {name: 1 for name in JobSummary.model_fields if name != "id"}
SORT = [("created_ms", DESCENDING), ("_id", ASCENDING)]


class CursorError(ValueError):
    """A cursor that this server did not make (or that was cut or changed)."""


@dataclass(frozen=True)
class Cursor:
    """Where a page ended: the creation time and id of its last job (or of the last job a filtered walk read,
    :mod:`shared.db.lists.negative`, with how many of the list's jobs are still to be skipped)."""

    created_ms: int
    job_id: str
    skip: int = 0

    def encode(self) -> str:
        fields: list[int | str] = [self.created_ms, self.job_id, *([self.skip] if self.skip else [])]
        raw = json.dumps(fields, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str) -> Cursor:
        bad = "cursor: not a cursor this server gave out (use X-Next-Cursor as it came)"
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
            created, job_id, *rest = json.loads(raw)
        except (binascii.Error, ValueError, TypeError) as e:
            raise CursorError(bad) from e
        skip = rest[0] if len(rest) == 1 else 0
        if (len(rest) > 1 or not all(isinstance(n, int) and not isinstance(n, bool) for n in (created, skip))
                or skip < 0 or not isinstance(job_id, str)):
            raise CursorError(bad)
        return cls(created, job_id, skip)


@dataclass(frozen=True)
class JobPage:
    jobs: list[JobSummary]
    next_cursor: str | None  # None: this was the last page


def next_window(span_ms: int, covered_ms: int, found: int, needed: int) -> int:
    """The width of the next window: from the density seen so far, a little more than what should hold
    the ``needed`` jobs still missing; 4 times wider after nothing; never more than ``MAX_GROWTH`` times.
    (After a long idle gap the window that reaches past it may hold more than the page: at most about
    as many jobs as were created in a time as long as the gap.)"""
    if found == 0:
        return span_ms * 4
    estimate = int(needed * covered_ms / found * 1.25) + 1
    return max(span_ms * 2, min(span_ms * MAX_GROWTH, estimate))


async def list_page(col: AsyncCollection[Doc], *, now_ms: int, limit: int, offset: int = 0,
                    cursor: Cursor | None = None, user: str | None = None, state: str | None = None,
                    counts: ListCounts | None = None, vc: str | None = None,
                    keyword: str | None = None, tags: tuple[str, ...] = (), match: Doc | None = None,
                    holds: int | None = None) -> JobPage:
    """``limit`` summaries after ``offset`` (and after ``cursor``), newest first, with the next page's cursor.
    With ``counts``, an offset past :data:`DEEP_FROM` is found through them (:func:`_deep_page`); a list
    filtered by ``vc``, ``keyword`` or ``tags`` (any of them; ``GET /api/v2/jobs``: indexes ``vc_*_created``,
    ``name_keys_created``, ``tags_created``) has no counts and walks its windows to any offset (its route bounds
    ``offset + limit`` as a page's ``limit`` is bounded). ``match``: one more equality (a value of another order's
    field, :mod:`shared.db.listorder`), served by that field's index; walked too. ``holds``: how many jobs
    the list holds from its start (or the cursor), where counters say: the walk stops once it has them all."""
    base = _base(user, state)
    if match:
        base.update(match)
    if vc:
        base["virtual_cluster"] = vc
    if keyword:
        base.update(keyword_query(keyword))
    if tags:
        base["tags"] = {"$in": list(tags)}
    if counts is not None and offset > DEEP_FROM and not vc and not keyword and not tags and not match:
        return await _deep_page(col, await counts.view(user, state), base, limit, offset, cursor)
    want = offset + limit + 1  # one more tells whether a next page exists
    if holds is not None:
        want = min(want, holds)  # no more to find: not walked to the start of time for the one more
    found: list[Doc] = []
    if cursor is not None:  # the cursor's own millisecond first: jobs after it by id
        found += await _read(col, {**base, "created_ms": cursor.created_ms, "_id": {"$gt": cursor.job_id}}, want)
        found = await _walk(col, base, found, want, top=cursor.created_ms, hi=cursor.created_ms)
    else:  # the first window is open above: clocks may differ between submit replicas
        found = await _walk(col, base, found, want, top=now_ms, hi=None)
    return _page(found, offset, limit)


def _base(user: str | None, state: str | None) -> Doc:
    base: Doc = {}
    if user:
        base["user"] = user
    if state:
        base["state"] = state
    return base


def _page(found: list[Doc], skip: int, limit: int) -> JobPage:
    page = [JobSummary.model_validate(d) for d in found[skip:skip + limit]]
    more = len(found) > skip + limit and bool(page)
    return JobPage(page, Cursor(page[-1].created_ms, page[-1].id).encode() if more else None)


async def _walk(col: AsyncCollection[Doc], base: Doc, found: list[Doc], want: int, *, top: int,
                hi: int | None) -> list[Doc]:
    """``found`` and the jobs created before ``hi`` (all of them with ``hi`` None), read in windows walked
    back from ``top`` until ``want`` are found or the start of time is reached."""
    span, covered = FIRST_WINDOW_MS, 0
    while len(found) < want and (hi is None or hi > 0):
        lo = max(0, top - covered - span)
        window: Doc = {"$gte": lo} if hi is None else {"$gte": lo, "$lt": hi}
        found += await _read(col, {**base, "created_ms": window}, want - len(found))
        covered += span
        span = next_window(span, covered, len(found), want - len(found))
        hi = lo
    return found


async def _deep_page(col: AsyncCollection[Doc], view: ListView, base: Doc, limit: int, offset: int,
                     cursor: Cursor | None) -> JobPage:
    """A page far down the list: the fine buckets of creation time that hold its first job and the job
    after it are found through the counts, and only the jobs from the one to the other are read (plus
    those of the first bucket that come before the page)."""
    position = offset + (await _rank(col, view, base, cursor) if cursor is not None else 0)
    first = await view.locate(position)
    if first is None:
        return JobPage([], None)
    after = await view.locate(position + limit)  # None: the page reaches the end of the list
    lo = after.lo_ms if after is not None else 0
    want = first.skip + limit + 1
    found = await _read(col, {**base, "created_ms": {"$gte": lo, "$lt": first.hi_ms}}, want)
    if len(found) < want and lo > 0:  # the counts moved meanwhile: read on as a shallow page would
        found = await _walk(col, base, found, want, top=lo, hi=lo)
    return _page(found, first.skip, limit)


async def _rank(col: AsyncCollection[Doc], view: ListView, base: Doc, cursor: Cursor) -> int:
    """How many of the list's jobs come before the cursor's page: those of newer fine buckets (counted),
    and those of the cursor's own bucket up to the cursor's job (read)."""
    lo, hi = span(len(LEVEL_BITS) - 1, cursor.created_ms >> LEVEL_BITS[-1])
    own = await _read(col, {**base, "created_ms": {"$gte": lo, "$lt": hi}}, 0, {"created_ms": 1})
    key = (-cursor.created_ms, cursor.job_id)
    return await view.newer_than_bucket(cursor.created_ms) + sum(
        1 for d in own if (-int(d["created_ms"]), str(d["_id"])) <= key)


async def _read(col: AsyncCollection[Doc], query: Doc, at_most: int, projection: Doc | None = None) -> list[Doc]:
    """The query's jobs in list order (``at_most`` 0: all of them)."""
    return [d async for d in col.find(query, projection or PROJECTION).sort(SORT).limit(at_most)]
