"""The store's reads of jobs, a base of :class:`shared.db.store.Store` (which writes them): a job or several
read whole (a big job's configs read beside it, :meth:`JobReads.records_of`), a job's earlier attempts, the
lists' pages and counts, the queue as the scheduler orders it, and the active work the periodic passes read
(what is placed, what holds resources, what is to stop or preempt). Each reads active work or the page asked
for, never the whole history: see :mod:`shared.db.indexes` for the index behind each query.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

import structlog
from pymongo import ASCENDING

from shared.db.base import StoreBase
from shared.db.lists.paging import Cursor, JobPage, list_page
from shared.db.lists.totals import list_total
from shared.jobconfig.priority import FIELD_PATH, class_of_extras
from shared.records import ACTIVE_JOB_STATES, CONFIGS_APART, AttemptRecord, JobRecord, JobState, SubState, now_ms
from shared.scheduling.queueing import QueueEntry, Share

if TYPE_CHECKING:
    from shared.db.jobcache import JobCache

Doc = dict[str, Any]
log = structlog.get_logger("paiq.store")
PRIORITY_FIELD = f"config.{FIELD_PATH}"  # the one field of the config a query projects (the queue's class)
QUEUE_SHARES = "queue_shares"  # meta document: the users' shares of the scheduler's last pass


class JobReads(StoreBase):
    """The job reads of :class:`shared.db.store.Store`, over the collections of :class:`StoreBase`."""

    # --- one job ---------------------------------------------------------------------------

    async def get_job(self, job_id: str) -> JobRecord | None:
        return await self._record(await self.jobs.find_one({"_id": job_id}))

    async def get_jobs(self, job_ids: Sequence[str]) -> dict[str, JobRecord]:
        """Jobs by id, read in one query (the notifier's burst of changes); those not stored are left out."""
        return {j.id: j for j in await self.records_of(self.jobs.find({"_id": {"$in": list(job_ids)}}))}

    async def find_job(self, user: str, name: str) -> JobRecord | None:
        return await self._record(await self.jobs.find_one({"user": user, "name": name}))

    async def _record(self, doc: Doc | None) -> JobRecord | None:
        """A job read whole, or None (not stored; or its configs lost: see :meth:`records_of`)."""
        found = await self.records_of([doc] if doc else [])
        return found[0] if found else None

    async def records_of(self, docs: Sequence[Doc] | AsyncIterator[Doc]) -> list[JobRecord]:
        """Jobs read whole: the documents of those whose configs are apart read beside them, in one query.
        A job whose configs' document is missing (written before the job's, deleted after it: only a store
        changed by hand) is left out, with a warning."""
        docs = docs if isinstance(docs, Sequence) else [d async for d in docs]
        apart = [d["_id"] for d in docs if d.get(CONFIGS_APART)]
        configs = {c["_id"]: c async for c in self.job_configs.find({"_id": {"$in": apart}})} if apart else {}
        jobs = []
        for doc in docs:
            if doc.get(CONFIGS_APART):
                if (found := configs.get(doc["_id"])) is None:
                    log.warning("a stored job has lost its configs; it is left out", job_id=doc["_id"])
                    continue
                doc = {**doc, **{k: v for k, v in found.items() if k != "_id"}}
            jobs.append(JobRecord.from_document(doc))
        return jobs

    async def attempts_of(self, job_id: str) -> list[AttemptRecord]:
        """The job's earlier attempts, oldest first."""
        cursor = self.attempts.find({"job_id": job_id}).sort([("job_id", ASCENDING), ("attempt", ASCENDING)])
        return [AttemptRecord.from_document(d) async for d in cursor]

    # --- lists and counts ------------------------------------------------------------------

    async def list_jobs(self, *, user: str | None = None, state: str | None = None, limit: int = 1000,
                        offset: int = 0, cursor: Cursor | None = None, vc: str | None = None,
                        keyword: str | None = None, tags: tuple[str, ...] = ()) -> JobPage:
        """A page of job summaries, newest first (see :mod:`shared.db.lists.paging`)."""
        return await list_page(self.jobs, now_ms=now_ms(), limit=limit, offset=offset, cursor=cursor,
                               user=user, state=state, counts=self.list_counts, vc=vc, keyword=keyword, tags=tags)

    async def count_jobs(self, *, user: str | None = None, state: str | None = None,
                         vc: str | None = None) -> int | None:
        """How many jobs a list holds, from counters (:mod:`shared.db.lists.totals`); None where none covers it."""
        return await list_total(self.jobs, self.list_counts.col, self.tallies, user=user, state=state, vc=vc)

    async def job_counts_by_vc_and_state(self) -> dict[str, dict[str, int]]:
        """``{vc: {state: n}}``: active jobs counted from the state index, ended ones from the tallies."""
        out = await self.tallies.by_vc()
        cursor = self.jobs.find({"state": {"$in": list(ACTIVE_JOB_STATES)}}, {"virtual_cluster": 1, "state": 1})
        async for d in cursor:
            states = out.setdefault(str(d["virtual_cluster"]), {})
            states[str(d["state"])] = states.get(str(d["state"]), 0) + 1
        return out

    async def active_jobs_in_vc(self, name: str) -> int:
        return await self.jobs.count_documents({"state": {"$in": list(ACTIVE_JOB_STATES)},
                                                "virtual_cluster": name})

    async def expired_jobs(self, completed_before_ms: int, limit: int) -> list[str]:
        """Ids of ended jobs completed before the time, that hold nothing any more (retention)."""
        cursor = self.jobs.find({"completed_ms": {"$lt": completed_before_ms}, "holds": False}, {"_id": 1})
        return [str(d["_id"]) async for d in cursor.limit(limit)]

    # --- the queue -------------------------------------------------------------------------

    async def queued_jobs(self, cache: JobCache | None = None) -> list[JobRecord]:
        """WAITING jobs that hold no placement yet and are not parked as never fitting, oldest first (``cache``:
        the reader's, :mod:`shared.db.jobcache`)."""
        query = {"state": JobState.WAITING.value, "sub_state": SubState.QUEUED.value, "parked": False}
        jobs = await (cache.read(self.jobs, self.get_jobs, "queued", query) if cache
                      else self.records_of(self.jobs.find(query)))
        return sorted(jobs, key=lambda j: (j.created_ms, j.id))

    async def queue_order(self) -> list[QueueEntry]:
        """Every queued job as its queue place is decided from (:class:`shared.scheduling.queueing.QueueEntry`): the
        fields projected, the priority class read from the stored config (documents of any age)."""
        cursor = self.jobs.find({"state": JobState.WAITING.value, "sub_state": SubState.QUEUED.value},
                                {"virtual_cluster": 1, "queued_ms": 1, "created_ms": 1, "user": 1,
                                 PRIORITY_FIELD: 1})
        return [_entry(d) async for d in cursor]

    async def queue_lengths(self) -> dict[str, int]:
        """Queued jobs per VC, parked ones included (active work: the queue, never the history)."""
        lengths: dict[str, int] = {}
        for entry in await self.queue_order():
            lengths[entry.vc] = lengths.get(entry.vc, 0) + 1
        return lengths

    async def queue_of_vc(self, vc: str) -> list[tuple[QueueEntry, str, str]]:
        """A VC's queued jobs, parked ones included: each one's queue entry, name and waiting reason."""
        cursor = self.jobs.find({"state": JobState.WAITING.value, "sub_state": SubState.QUEUED.value,
                                 "virtual_cluster": vc},
                                {"virtual_cluster": 1, "queued_ms": 1, "created_ms": 1, "user": 1, "name": 1,
                                 "reason": 1, PRIORITY_FIELD: 1})
        return [(_entry(d), str(d.get("name", "")), str(d.get("reason", ""))) async for d in cursor]

    async def queue_shares(self) -> dict[str, dict[str, Share]]:
        """The users' shares the scheduler's last pass ordered its queues by (see
        :meth:`shared.db.store.Store.set_queue_shares`)."""
        doc = await self.meta.find_one({"_id": QUEUE_SHARES})
        shares: dict[str, dict[str, Share]] = {}
        for row in (doc or {}).get("shares", []):
            shares.setdefault(str(row["vc"]), {})[str(row["user"])] = Share(float(row["dominant"]), float(row["gpus"]))
        return shares

    # --- active work -----------------------------------------------------------------------

    async def placed_jobs(self) -> list[JobRecord]:
        """Active jobs that hold a placement."""
        cursor = self.jobs.find({"state": {"$in": list(ACTIVE_JOB_STATES)},
                                 "sub_state": {"$ne": SubState.QUEUED.value}})
        return await self.records_of(cursor)

    async def jobs_holding_resources(self, cache: JobCache | None = None) -> list[JobRecord]:
        """Jobs with a task holding resources (see :func:`shared.records.holds_resources`), final jobs
        included: a completed job's leftover tasks hold their CPUs, GPUs and ports until their
        containers are really gone (``cache``: the reader's, :mod:`shared.db.jobcache`)."""
        query = {"holds": True}
        return await (cache.read(self.jobs, self.get_jobs, "holding", query) if cache
                      else self.records_of(self.jobs.find(query)))

    async def jobs_on_node(self, node_id: str) -> list[JobRecord]:
        """Jobs with a task on the node that holds resources (final jobs whose tasks still stop included)."""
        cursor = self.jobs.find({"holds": True, "hold_nodes": node_id})
        return await self.records_of(cursor)

    async def jobs_to_stop(self) -> list[JobRecord]:
        """Active jobs a user asked to stop (the stop event may have been lost)."""
        cursor = self.jobs.find({"state": {"$in": list(ACTIVE_JOB_STATES)}, "stop_requested_by": {"$ne": None}})
        return await self.records_of(cursor)

    async def jobs_to_preempt(self) -> list[JobRecord]:
        """Active jobs whose current attempt the scheduler preempted and that still run it (the event may
        have been lost)."""
        cursor = self.jobs.find({"state": {"$in": list(ACTIVE_JOB_STATES)}, "preempted": {"$ne": None},
                                 "sub_state": {"$ne": SubState.RETRY_PENDING.value}})
        jobs = await self.records_of(cursor)
        return [j for j in jobs if j.preempted is not None and j.preempted.attempt == j.attempt]

    async def retry_pending_jobs(self) -> list[JobRecord]:
        cursor = self.jobs.find({"state": JobState.WAITING.value, "sub_state": SubState.RETRY_PENDING.value})
        return await self.records_of(cursor)

    async def uncounted_finished_jobs(self) -> list[JobRecord]:
        """Ended jobs not yet in the tallies (served by the partial index of uncounted, i.e. active, jobs)."""
        cursor = self.jobs.find({"counted": False, "state": {"$nin": list(ACTIVE_JOB_STATES)}})
        return await self.records_of(cursor)


def _entry(doc: Doc) -> QueueEntry:
    """A queued job's document, projected, as its queue entry (the class read from the stored config)."""
    return QueueEntry(str(doc["_id"]), str(doc["virtual_cluster"]), int(doc.get("queued_ms") or doc["created_ms"]),
                      str(doc.get("user", "")), class_of_extras(doc.get("config", {}).get("extras", {})).number)
