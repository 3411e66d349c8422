"""Jobs a long-running reader reads again and again, kept decoded between its reads (issue 37).

The scheduler's pass reads every job holding resources and the whole queue, and a pass runs after most
events: read and decoded whole each time (a ``JobRecord`` validated from its document), the running jobs cost
the pass most of its time, and a burst of endings a pass each (a pass's cost times the jobs running). A
:class:`JobCache` asks the database for the matching jobs' ids and versions only, then reads whole, in one
query, just the jobs it does not hold at that version; the others are the records it decoded before.

Every write of a job's fields that placement, quotas or preemption read moves its ``version``
(:mod:`shared.db.store`: placements, status changes, marks, unparking). Two writes do not: a tag
(:mod:`shared.db.tags`) and the usage rollups' mark (:mod:`shared.db.usage`), neither read by such a reader;
records kept here may show them stale. What a read no longer matches (ended, deleted) is dropped: the cache
holds what the last read of each query returned, no more.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pymongo.asynchronous.collection import AsyncCollection

    from shared.records import JobRecord

Doc = dict[str, Any]
JobsById = Callable[[Sequence[str]], Awaitable[dict[str, "JobRecord"]]]


class JobCache:
    """One reader's decoded jobs, by query (each query's entry is what its last read returned)."""

    def __init__(self) -> None:
        self._by_query: dict[str, dict[str, JobRecord]] = {}
        self.read_whole = 0  # jobs read whole so far (the rest came from here)

    async def read(self, jobs: AsyncCollection[Doc], get_jobs: JobsById, name: str, query: Doc) -> list[JobRecord]:
        """The jobs of ``jobs`` matching ``query`` (``name`` tells the queries apart), in the database's order: those
        whose version changed since the last read of ``name``, and those new to it, read whole (by ``get_jobs``:
        :meth:`shared.db.jobreads.JobReads.get_jobs`); the others kept."""
        kept = self._by_query.get(name, {})
        heads = [(str(d["_id"]), int(d.get("version", 0))) async for d in jobs.find(query, {"version": 1})]
        stale = {job_id for job_id, version in heads if (j := kept.get(job_id)) is None or j.version != version}
        fresh = await get_jobs(list(stale)) if stale else {}
        self.read_whole += len(fresh)
        now: dict[str, JobRecord] = {}
        for job_id, _ in heads:
            record = fresh.get(job_id) if job_id in stale else kept[job_id]
            if record is not None:  # gone between the two reads (deleted): left out, as a later read would
                now[job_id] = record
        self._by_query[name] = now
        return list(now.values())
