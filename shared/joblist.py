"""Job lists, newest first, whose cost follows the page asked for and not the history stored.

Order: ``created_ms`` descending, then ``_id`` ascending, served by the indexes ``(created_ms, _id)``,
``(user, created_ms, _id)`` and ``(state, created_ms, _id)``. A page is read as a series of windows of
creation time walked backwards from the newest job (or from a cursor): each query is a bounded range of
one of those indexes, the first window is a minute wide and later ones are sized from the density seen so
far. Why windows rather than one ``sort().limit()``: the embedded MongoDB-wire server (SecantusDB) reads
the whole index range a query allows before applying its limit, so an unbounded newest-first query
reads every job ever stored; a bounded range reads only the jobs in it, on any server.

``offset`` (OpenPAI's) still costs the jobs it skips; the opaque cursor of a page (``X-Next-Cursor``)
continues from its last job at the cost of the next page only. Lists carry summaries (a projection):
never task arrays or configs.
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

from shared.records import JobState, RetryCounts, SubState

Doc = dict[str, Any]
FIRST_WINDOW_MS = 60_000
MAX_GROWTH = 16  # a window is at most this many times wider than the one before


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


PROJECTION: Doc = {name: 1 for name in JobSummary.model_fields if name != "id"}
SORT = [("created_ms", DESCENDING), ("_id", ASCENDING)]


class CursorError(ValueError):
    """A cursor that this server did not make (or that was cut or changed)."""


@dataclass(frozen=True)
class Cursor:
    """Where a page ended: the creation time and id of its last job."""

    created_ms: int
    job_id: str

    def encode(self) -> str:
        raw = json.dumps([self.created_ms, self.job_id], separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str) -> Cursor:
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
            created, job_id = json.loads(raw)
        except (binascii.Error, ValueError, TypeError) as e:
            raise CursorError("cursor: not a cursor this server gave out (use X-Next-Cursor as it came)") from e
        if not isinstance(created, int) or isinstance(created, bool) or not isinstance(job_id, str):
            raise CursorError("cursor: not a cursor this server gave out (use X-Next-Cursor as it came)")
        return cls(created, job_id)


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
                    cursor: Cursor | None = None, user: str | None = None, state: str | None = None) -> JobPage:
    """``limit`` summaries after ``offset`` (and after ``cursor``), newest first, with the next page's cursor."""
    base: Doc = {}
    if user:
        base["user"] = user
    if state:
        base["state"] = state
    want = offset + limit + 1  # one more tells whether a next page exists
    found: list[Doc] = []
    if cursor is not None:  # the cursor's own millisecond first: jobs after it by id
        found += await _read(col, {**base, "created_ms": cursor.created_ms, "_id": {"$gt": cursor.job_id}}, want)
        hi: int | None = cursor.created_ms
    else:
        hi = None  # the first window is open above: clocks may differ between submit replicas
    top = cursor.created_ms if cursor else now_ms
    span, covered = FIRST_WINDOW_MS, 0
    while len(found) < want and (hi is None or hi > 0):
        lo = max(0, top - covered - span)
        window: Doc = {"$gte": lo} if hi is None else {"$gte": lo, "$lt": hi}
        found += await _read(col, {**base, "created_ms": window}, want - len(found))
        covered += span
        span = next_window(span, covered, len(found), want - len(found))
        hi = lo
    page = [JobSummary.model_validate(d) for d in found[offset:offset + limit]]
    more = len(found) > offset + limit and bool(page)
    return JobPage(page, Cursor(page[-1].created_ms, page[-1].id).encode() if more else None)


async def _read(col: AsyncCollection[Doc], query: Doc, at_most: int) -> list[Doc]:
    return [d async for d in col.find(query, PROJECTION).sort(SORT).limit(at_most)]
