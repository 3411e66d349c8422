"""Where tasks' usage series are kept: one document per run of a task of an attempt (a task re-run in place,
``taskRetryCount``, has one per run: :attr:`TaskRef.task_attempt` is in the key), in ``task_profiles``.

The launcher of the task's node is its only writer. The first sample inserts the document; each later one
appends to the finest level (``$push`` with ``$slice``, so the document never grows past its levels'
capacities) and rewrites a coarser level only when points moved into it (one time in six at most). The
documents outlive the containers, and go with the job (:meth:`delete_job`, called by the store's job
removal: a user's delete and retention alike). Served by ``_id`` and ``(job_id, attempt)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict
from pymongo import ASCENDING, InsertOne, UpdateOne
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import BulkWriteError

from shared.profiling.idle import IdleState
from shared.profiling.series import Added, Series
from shared.profiling.totals import TaskTotals, TaskUse
from shared.profiling.usage import Usage
from shared.taskref import TaskRef

Doc = dict[str, Any]
LEVEL_FIELDS = ("l0", "l1", "l2", "l3")
_SUMMARY = {name: 0 for name in LEVEL_FIELDS}  # a projection: everything but the series


class TaskProfile(TaskRef):
    """A task's stored profile (``_id``: :attr:`TaskRef.id`): who it is, what it holds, its series, totals
    and idle state."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    node_id: str
    vc: str = ""
    cpus: int = 0
    gpus: tuple[int, ...] = ()
    mem_limit: int = 0  # bytes; 0: none known
    interval_ms: int
    series: Series = Series()
    last: Usage | None = None
    totals: TaskTotals = TaskTotals()
    idle: IdleState = IdleState()

    def use(self) -> TaskUse:
        return TaskUse(role=self.role, index=self.index, gpus=len(self.gpus), mem_limit=self.mem_limit,
                       totals=self.totals, idle=self.idle, last=self.last)

    def to_document(self) -> Doc:
        doc: Doc = {"_id": self.id, **self.model_dump(exclude={"series", "last", "totals", "idle"})}
        doc.update(_levels(self.series, range(len(LEVEL_FIELDS))))
        doc.update(_state(self))
        return doc

    @classmethod
    def from_document(cls, doc: Doc) -> TaskProfile:
        levels = tuple(tuple(Usage.from_row(r) for r in doc.get(name) or ()) for name in LEVEL_FIELDS)
        last = doc.get("last")
        return cls.model_validate({**doc, "series": Series(levels=levels) if any(levels) else Series(),
                                   "last": Usage.from_row(last) if last else None})


def _levels(series: Series, which: range) -> Doc:
    levels = series.levels
    return {LEVEL_FIELDS[i]: [p.row() for p in (levels[i] if i < len(levels) else ())] for i in which}


def _state(profile: TaskProfile) -> Doc:
    return {"last": profile.last.row() if profile.last else None, "totals": profile.totals.model_dump(),
            "idle": profile.idle.model_dump()}


class ProfileWrite(BaseModel):
    """One task's profile after a sample: new (insert it whole) or grown by ``added`` (append, and rewrite
    the levels it moved points into)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    profile: TaskProfile
    new: bool
    added: Added | None = None

    def operation(self) -> InsertOne[Doc] | UpdateOne:
        p = self.profile
        if self.new or self.added is None:
            return InsertOne(p.to_document())
        first = p.series.levels[0] if p.series.levels else ()
        changes: Doc = {"$set": {**_state(p), **_levels(p.series, range(1, self.added.deeper + 1))}}
        if first:
            changes["$push"] = {"l0": {"$each": [first[-1].row()], "$slice": -len(first)}}
        return UpdateOne({"_id": p.id}, changes)


class ProfileStore:
    def __init__(self, db: AsyncDatabase[Doc]) -> None:
        self.col = db["task_profiles"]

    async def ensure_indexes(self) -> None:
        await self.col.create_index([("job_id", ASCENDING), ("attempt", ASCENDING)])

    async def get(self, key: TaskRef) -> TaskProfile | None:
        doc = await self.col.find_one({"_id": key.id})
        return TaskProfile.from_document(doc) if doc else None

    async def save(self, writes: list[ProfileWrite]) -> int:
        """Write a sampling round in one request; how many documents were refused (an insert of a profile
        another process created meanwhile: its next round loads it)."""
        if not writes:
            return 0
        try:
            await self.col.bulk_write([w.operation() for w in writes], ordered=False)
        except BulkWriteError as e:
            return len(e.details.get("writeErrors", []))
        return 0

    async def of_job(self, job_id: str, attempt: int) -> list[TaskProfile]:
        """The attempt's task profiles without their series (a job's summary), by role, index and run."""
        cursor = self.col.find({"job_id": job_id, "attempt": attempt}, _SUMMARY)
        found = [TaskProfile.from_document(d) async for d in cursor]
        return sorted(found, key=lambda p: (p.role, p.index, p.task_attempt))

    async def of_jobs(self, job_ids: Sequence[str]) -> list[TaskProfile]:
        """Every attempt's task profiles of these jobs without their series, in one query (the usage
        rollups' backfill reads the history so, a batch of jobs at a time)."""
        return [TaskProfile.from_document(d) async for d in self.col.find({"job_id": {"$in": list(job_ids)}}, _SUMMARY)]

    async def recent(self, key: TaskRef, n: int) -> list[Usage]:
        """The task's newest ``n`` points, oldest first (its memory before an OOM kill)."""
        doc = await self.col.find_one({"_id": key.id}, {"l0": {"$slice": -n}})
        return [Usage.from_row(r) for r in (doc or {}).get("l0") or ()]

    async def forget(self, key: TaskRef) -> None:
        await self.col.delete_one({"_id": key.id})

    async def delete_job(self, job_id: str) -> None:
        await self.col.delete_many({"job_id": job_id})
