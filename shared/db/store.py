"""MongoDB, the source of truth, through PyMongo's async API.

Every state change is a conditional update: the filter carries the state (and the attempt, or the
version) the change expects, so a duplicated or late event changes nothing. Every periodic pass and
every request reads active work (what holds resources, what waits) or the page asked for, never the
history: see :mod:`shared.db.indexes` for the index behind each query. The reads of jobs are
:class:`shared.db.jobreads.JobReads`, a base of :class:`Store`.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import pymongo
import structlog
from pymongo import ASCENDING, AsyncMongoClient, UpdateOne
from pymongo.asynchronous.client_session import AsyncClientSession
from pymongo.errors import DuplicateKeyError, PyMongoError

from shared.db.idempotency import IdempotencyRecord, Submitted
from shared.db.indexes import ensure_schema
from shared.db.jobreads import QUEUE_SHARES, JobReads
from shared.db.logs import LogStore
from shared.db.retry import idempotent
from shared.db.submission import EncodedJob, Submissions
from shared.db.tags import add_tag, delete_tag, tags_of
from shared.db.usage import MARK, UsageIncrements
from shared.errors import JobExistsError, LeaseLostError, StoreError
from shared.events import CloudEvent
from shared.ops.vitals import CHECK_SECONDS
from shared.records import (
    CONFIGS_APART,
    PACKED_CONFIG,
    PACKED_TASKS,
    JobRecord,
    JobState,
    NodeRecord,
    PreemptedBy,
    SubState,
    TaskRecord,
    holding_fields,
    now_ms,
    tasks_update,
)
from shared.scheduling.queueing import Share
from shared.scheduling.vclusters import VirtualCluster
from shared.tasks.jobkeys import StoredJobKey

Doc = dict[str, Any]
log = structlog.get_logger("paiq.store")
CLOSE_SECONDS = 3
GONE_CLOSE_SECONDS = 0.2  # what closing a client takes when it need not wait for its server
SCHEMA_SECONDS = 3600  # index builds and a migration, once at start
MAX_IDLE_MS = 60_000  # well under a server's idle limit (SecantusDB closes connections idle for 300 s)


@dataclass(frozen=True)
class Fence:
    """Writes allowed only while ``holder`` holds the lease ``lease``."""

    lease: str
    holder: str


class _NothingWrittenError(Exception):
    """A conditional write matched nothing: its transaction is aborted on the way out."""


T = TypeVar("T")


@dataclass
class _Ending:
    """An ended job's counts (its VC's tally, the lists' counts, its usage), written in the transaction that
    stores its end, with the marks that keep them from being counted twice (:meth:`Store.count_finished`)."""

    store: Store
    job: JobRecord
    usage: UsageIncrements
    counted: bool = False  # counted already: the record written from was older than the count
    usage_counted: bool = False  # by a count cut short after its usage (a crash; the pass finishes those)

    async def marks(self, session: AsyncClientSession | None) -> Doc:
        """The fields that mark the job counted, for the write that ends it (``counted`` even when it was: the
        write sets every field of the record, whose flag may be older)."""
        doc = await self.store.jobs.find_one({"_id": self.job.id}, {"counted": 1, MARK: 1}, session=session)
        self.counted, self.usage_counted = bool(doc and doc.get("counted")), bool(doc and doc.get(MARK))
        return {"counted": True, **({} if self.usage_counted else {MARK: True})}

    async def count(self, head: Doc, session: AsyncClientSession | None) -> None:
        """Add the job (``head``: its document as written) to the counters, unless it is in them."""
        if self.counted:
            return
        if not self.usage_counted:
            await self.store.usage.add(self.usage, session)
        await self.store.tallies.add_in(self.job.virtual_cluster, self.job.state.value, self.job.id, session)
        await self.store.list_counts.add_ended(head, session)


class Store(JobReads):
    """The store: the job reads (:class:`~shared.db.jobreads.JobReads`) and every write, over the collections
    of :class:`~shared.db.base.StoreBase`."""

    def __init__(self, client: AsyncMongoClient[Doc], database: str) -> None:
        super().__init__(client, database)
        # Ended jobs are counted one at a time in a process: their transactions all move the same few counter
        # documents (a user's day of usage, the lists' counts), and side by side each but one failed with a
        # write conflict and ran again (half of all transactions in a burst of endings, issue 37).
        self._counting = asyncio.Lock()
        self.submissions = Submissions(self)  # new jobs, a transaction for those submitted together

    async def ensure_indexes(self) -> None:
        # Reach the server first within a call's bounds (the server selection, PAIQ_MONGODB_TIMEOUT_SECONDS):
        # under a timeout() block PyMongo selects a server for as long as the block allows, so a service
        # started without its database would wait the whole schema deadline (an hour) before it exits.
        await self._client.admin.command("ping")
        # Index builds and a migration read the whole history once: a deadline of their own, not a call's.
        with pymongo.timeout(SCHEMA_SECONDS):
            await ensure_schema(self)

    # --- jobs ------------------------------------------------------------------------------

    async def insert_job(self, job: JobRecord, document: EncodedJob | None = None) -> None:
        """Store a new job (its configs first, where apart; imports, tests: submit stores with
        :meth:`submit_job`); ``document`` is ``encoded_job(job)`` where the caller made it off the event loop
        (a job of thousands of tasks is ~15 ms of dumping and encoding)."""
        doc, configs = document if document is not None else job.documents()
        try:
            if configs is not None:
                await self.job_configs.replace_one({"_id": job.id}, configs, upsert=True)
            await self.jobs.insert_one(doc)
        except DuplicateKeyError as e:
            raise JobExistsError(job.id) from e

    async def submit_job(self, job: JobRecord, document: EncodedJob, key: StoredJobKey | None,
                         idempotency: IdempotencyRecord | None = None, events: Sequence[CloudEvent] = ()) -> Submitted:
        """Store a new job with its SSH key (sealed; None: the job has none), idempotency record and events as
        one step (:mod:`shared.db.submission`)."""
        return await self.submissions.submit(job, document, key, idempotency, events)

    async def idempotent_submission(self, user: str, key: str) -> IdempotencyRecord | None:
        """The submission an ``Idempotency-Key`` already made (kept a day)."""
        doc = await self.idempotency.find_one({"_id": IdempotencyRecord.id_of(user, key)})
        return IdempotencyRecord.from_document(doc) if doc else None

    async def insert_jobs(self, jobs: Sequence[JobRecord]) -> None:
        """Insert many jobs at once (imports, benchmarks) with their ``archived`` attempts; finished ones
        are counted in the tallies and the usage rollups (and marked so: see :mod:`shared.db.usage`)."""
        finished = Counter((j.virtual_cluster, j.state.value) for j in jobs if j.state.is_final)
        written = [j.model_copy(update={"counted": j.state.is_final}).documents() for j in jobs]
        docs = [{**doc, MARK: True} if j.state.is_final else doc for (doc, _), j in zip(written, jobs, strict=True)]
        configs = [c for _, c in written if c is not None]
        attempts = [a.to_document(j.id) for j in jobs for a in j.archived]
        if attempts:
            await self.attempts.insert_many(attempts, ordered=False)
        if configs:
            await self.job_configs.insert_many(configs, ordered=False)
        if docs:
            await self.jobs.insert_many(docs, ordered=False)
        await self.tallies.add_counts(finished)
        await self.usage.add_jobs(jobs)
        await self.list_counts.add((j.created_ms, j.user, j.state.value) for j in jobs if j.state.is_final)
        await self.list_counts.add_values(doc for doc, j in zip(docs, jobs, strict=True) if j.state.is_final)

    async def add_tag(self, job_id: str, tag: str) -> None:
        await add_tag(self.jobs, job_id, tag)

    async def delete_tag(self, job_id: str, tag: str) -> bool:
        return await delete_tag(self.jobs, job_id, tag)

    async def tags_of(self, job_id: str) -> tuple[str, ...]:
        return await tags_of(self.jobs, job_id)

    async def unpark_queued(self) -> int:
        """Give every parked job another look (the cluster changed); how many there were."""
        result = await self.jobs.update_many(
            {"state": JobState.WAITING.value, "sub_state": SubState.QUEUED.value, "parked": True},
            {"$set": {"parked": False}, "$inc": {"version": 1}})
        return result.modified_count

    async def set_queue_shares(self, shares: Mapping[str, Mapping[str, Share]]) -> None:
        """One small document (users x VCs with running jobs), written by the scheduler when it changed."""
        rows = [{"vc": vc, "user": user, "dominant": share.dominant, "gpus": share.gpus}
                for vc, users in sorted(shares.items()) for user, share in sorted(users.items())]
        await self.meta.replace_one({"_id": QUEUE_SHARES}, {"_id": QUEUE_SHARES, "shares": rows}, upsert=True)

    async def update_job(self, job_id: str, expect: Mapping[str, Any], changes: Mapping[str, Any],
                         events: Sequence[CloudEvent] = ()) -> JobRecord | None:
        """Apply ``$set: changes`` if the job still matches ``expect``; the job after, or None. ``events``
        (journaled ones: :mod:`shared.db.journal`) are stored with the change, in its transaction.

        An update then a read by ``_id``, not ``find_one_and_update``: SecantusDB answers the latter
        by reading the whole collection. ``tasks`` are written packed or plain (:func:`tasks_update`); the
        configs, written once and maybe packed, are never changed."""
        if {"config", "raw_config", PACKED_CONFIG, PACKED_TASKS, CONFIGS_APART} & set(changes):
            raise ValueError(f"update_job: a job's configs never change, its tasks go as tasks: {sorted(changes)}")
        update_doc: Doc = {"$set": dict(changes), "$inc": {"version": 1}}
        if "tasks" in changes:
            written, unset = tasks_update(update_doc["$set"].pop("tasks"))
            update_doc.update({"$set": {**update_doc["$set"], **written}, "$unset": unset})

        async def write(session: AsyncClientSession | None) -> Doc | None:
            result = await self.jobs.update_one({"_id": job_id, **expect}, update_doc, session=session)
            if result.modified_count != 1:
                return None
            doc = await self.jobs.find_one({"_id": job_id}, session=session)
            if doc is not None:
                await self.journal.record(events, version=int(doc.get("version", 0)), session=session)
            return doc

        async def update() -> Doc | None:
            try:
                return await self.atomically(write, bool(events))
            except DuplicateKeyError:  # an earlier try committed the change and its events: the answer was lost
                return await self.jobs.find_one({"_id": job_id})

        try:  # the $set is idempotent: a try whose answer was lost changed what the next one sets again
            doc = await idempotent(update, "update a job")
        except PyMongoError as e:
            raise StoreError(f"updating job {job_id} failed: {e}") from e
        return await self._record(doc)

    async def replace_job(self, job: JobRecord, expected_version: int, events: Sequence[CloudEvent] = (),
                          published: Sequence[bool] | None = None) -> bool:
        """Write every field of ``job`` but its configs if nobody changed it since ``expected_version`` was
        read; attempts it ended go to ``job_attempts`` first. A job that has just ended is counted (its VC's
        tally, the lists' counts, its usage) and marked so in the same transaction, one write of the job's
        document (a server without transactions: after, by :meth:`count_finished`). The configs, which never
        change, stay as they were written (never packed again). ``events`` (journaled ones,
        :mod:`shared.db.journal`; ``published``: each already on the bus) are stored with the change, in that
        transaction: all of it or none."""
        head = job.head_document()
        del head["_id"]
        unset = {field: "" for field in ("tasks", PACKED_TASKS) if field not in head}
        change: Doc = {"$set": {**head, "version": expected_version + 1}, **({"$unset": unset} if unset else {})}
        ending = await self._ending(job)

        async def write(session: AsyncClientSession | None) -> bool:
            for past in job.archived:  # by id: archiving again (a write that missed, retried) replaces it
                await self.attempts.replace_one({"_id": f"{job.id}/{past.attempt}"}, past.to_document(job.id),
                                                upsert=True, session=session)
            marks = await ending.marks(session) if ending else {}
            result = await self.jobs.update_one({"_id": job.id, "version": expected_version},
                                                {**change, "$set": {**change["$set"], **marks}}, session=session)
            if result.modified_count != 1:
                raise _NothingWrittenError  # nothing else of the transaction may stay
            if ending:
                await ending.count(head, session)
            await self.journal.record(events, version=expected_version + 1, session=session, published=published)
            return True

        try:
            try:
                written = await self._write_ending(write, ending, bool(events))
            except DuplicateKeyError:
                # An event is journaled already (one from the bus, delivered again after an earlier change took it
                # in): the change goes with the others.
                events, published = await self._unjournaled(events, published)
                written = await self._write_ending(write, ending, bool(events))
        except _NothingWrittenError:
            return False
        except PyMongoError as e:
            raise StoreError(f"writing job {job.id} failed: {e}") from e
        if job.state.is_final and not job.counted and not ending:
            await self.count_finished(job)
        return written

    async def _write_ending(self, write: Callable[[AsyncClientSession | None], Awaitable[T]], ending: _Ending | None,
                            journaled: bool) -> T:
        """``write`` (a job's change), in a transaction if it journals events or counts the job's end."""
        if ending is None:
            return await self.atomically(write, journaled)
        async with self._counting:  # the counters are few documents: one count at a time, no write conflicts
            return await self.atomically(write, True, journaled=journaled)

    async def _unjournaled(self, events: Sequence[CloudEvent],
                           published: Sequence[bool] | None) -> tuple[list[CloudEvent], list[bool]]:
        """The events not in the journal yet, with their ``published`` flags."""
        known = {d["_id"] async for d in self.journal.entries.find({"_id": {"$in": [e.id for e in events]}},
                                                                    {"_id": 1})}
        keep = [i for i, e in enumerate(events) if e.id not in known]
        flags = published or [False] * len(events)
        return [events[i] for i in keep], [flags[i] for i in keep]

    async def _ending(self, job: JobRecord) -> _Ending | None:
        """The counts of a job this change ends, to write with it; None if it does not end it, or if the server
        takes no transactions (:meth:`count_finished` then counts it after)."""
        if not job.state.is_final or job.counted or not await self.supports_transactions():
            return None
        stored = {a.attempt: a for a in await self.attempts_of(job.id)} | {a.attempt: a for a in job.archived}
        return _Ending(self, job, await self.usage.increments_of(job, [stored[n] for n in sorted(stored)]))

    async def atomically(self, write: Callable[[AsyncClientSession | None], Awaitable[T]], wanted: bool, *,
                         journaled: bool = True) -> T:
        """``write`` in one transaction when ``wanted`` and the server takes them (a replica set); else as it
        is, its parts one after another (a standalone mongod: a change is then stored before its events).
        ``journaled``: it stored journal entries when ``wanted`` (their relay is woken once it committed)."""
        if not wanted or not await self.supports_transactions():
            result = await write(None)
        else:  # a transaction that conflicted with another (WriteConflict) is run again, as the driver does it
            async with self._client.start_session() as session:
                result = await session.with_transaction(write)
        if wanted and journaled:
            self.journal.touched()
        return result

    async def check_lease(self, name: str, holder: str, session: AsyncClientSession | None) -> None:
        """LeaseLostError unless ``holder`` holds the lease ``name`` now; in ``session``'s transaction, a fence:
        the transaction's writes commit only while the lease is held (without transactions, a check)."""
        held = await self.leases.update_one({"_id": name, "holder": holder, "expires_ms": {"$gt": now_ms()}},
                                            {"$inc": {"commits": 1}}, session=session)
        if held.matched_count != 1:
            raise LeaseLostError(name, holder)

    async def count_finished(self, job: JobRecord) -> None:
        """Add an ended job to its VC's tally, then mark it counted (a crash in between: the status
        service's pass finds it uncounted and counts again, which the tally refuses to do twice). The mark
        and the job's place in the lists' counts are one transaction (shared.db.lists.counts). Its usage goes
        into the daily rollups first, once (shared.db.usage)."""
        archived = await self.attempts_of(job.id)
        atomic = await self.supports_transactions()
        async with self._counting:
            await self.usage.record_job(job, archived, atomic=atomic)
            await self.tallies.add(job.virtual_cluster, job.state.value, job.id)
            await self.list_counts.count(job.id, job.created_ms, job.user, job.state.value, atomic=atomic)

    async def commit_placements(self, placements: Sequence[tuple[JobRecord, Sequence[TaskRecord]]],
                                fence: Fence | None = None,
                                announce: Mapping[str, Sequence[CloudEvent]] | None = None) -> list[JobRecord]:
        """Place many queued jobs in one round trip; the jobs that were placed (a job that changed
        meanwhile, e.g. was stopped, is left as it is). ``announce``: each job's events, journaled with its
        placement where it is placed.

        With a ``fence``, the writes are one transaction with a check that its holder still holds the
        lease: a scheduler that lost its lease (stalled past it, another took over) cannot commit, and one
        that takes the lease over waits for a commit in flight, so no resource is given twice. Raises
        :class:`LeaseLostError`. A server without transactions (a standalone mongod) commits unfenced."""
        if not placements:
            return []
        token = uuid.uuid4().hex  # marks this batch's writes, to read back exactly the jobs it placed
        ops = [UpdateOne(
            {"_id": job.id, "state": JobState.WAITING.value, "sub_state": SubState.QUEUED.value, "attempt": job.attempt,
             "stop_requested_by": None},
            _placed(tuple(tasks), token))
            for job, tasks in placements]
        try:
            await self._write_jobs(ops, fence, announce, lambda doc: doc.get("placement_id") == token)
            cursor = self.jobs.find({"_id": {"$in": [job.id for job, _ in placements]}, "placement_id": token})
            return await self.records_of(cursor)
        except PyMongoError as e:
            raise StoreError(f"committing {len(ops)} placements failed: {e}") from e

    async def mark_preempted(self, marks: Sequence[tuple[JobRecord, PreemptedBy, tuple[str, ...]]],
                             fence: Fence | None = None,
                             announce: Mapping[str, Sequence[CloudEvent]] | None = None) -> list[JobRecord]:
        """Record the scheduler's preemptions on their victims (each: the victim as read, the decision, its
        lineage after), fenced by the lease as placements are; the victims marked (one whose attempt ended
        or changed meanwhile, or that a user is stopping, is left alone)."""
        if not marks:
            return []
        ops = [UpdateOne(
            {"_id": job.id, "attempt": mark.attempt, "state": {"$in": [JobState.WAITING.value, JobState.RUNNING.value]},
             "sub_state": {"$ne": SubState.RETRY_PENDING.value}, "stop_requested_by": None,
             "$or": [{"preempted": None}, {"preempted.attempt": {"$ne": mark.attempt}}]},
            {"$set": {"preempted": mark.model_dump(mode="json"), "preempted_by": list(lineage)},
             "$inc": {"version": 1}})
            for job, mark, lineage in marks]
        wanted = {job.id: mark for job, mark, _ in marks}
        try:
            await self._write_jobs(ops, fence, announce,
                                   lambda doc: doc.get("preempted") == wanted[doc["_id"]].model_dump(mode="json"))
            # Marked by this write: each decision has its own id (one left alone keeps an earlier one or none).
            cursor = self.jobs.find({"_id": {"$in": list(wanted)}})
            after = await self.records_of(cursor)
        except PyMongoError as e:
            raise StoreError(f"recording {len(ops)} preemptions failed: {e}") from e
        return [j for j in after if j.preempted == wanted[j.id]]

    async def _write_jobs(self, ops: list[UpdateOne], fence: Fence | None,
                          announce: Mapping[str, Sequence[CloudEvent]] | None = None,
                          changed: Callable[[Doc], bool] | None = None) -> None:
        """The scheduler's writes to jobs in one round trip: with a ``fence``, one transaction that checks its
        holder still holds the lease (:class:`LeaseLostError` if not); unfenced on a server without
        transactions (a standalone mongod) or without a fence. ``announce``: each job's events, journaled in
        the same transaction for the jobs the write ``changed`` (read back in it)."""
        journal = {job_id: events for job_id, events in (announce or {}).items() if events}
        if not await self.supports_transactions() or (fence is None and not journal):
            await self.jobs.bulk_write(ops, ordered=False)
            await self._journal_changed(journal, changed, None)
        else:
            async def write(session: AsyncClientSession) -> None:
                if fence is not None:  # the transaction is aborted on the way out when the lease is lost
                    await self.check_lease(fence.lease, fence.holder, session)
                await self.jobs.bulk_write(ops, ordered=False, session=session)
                await self._journal_changed(journal, changed, session)

            async with self._client.start_session() as session:  # run again after a WriteConflict
                await session.with_transaction(write)
        if journal:
            self.journal.touched()

    async def _journal_changed(self, journal: Mapping[str, Sequence[CloudEvent]], changed: Callable[[Doc], bool] | None,
                               session: AsyncClientSession | None) -> None:
        """Journal each job's events where the write just made changed it, at its version after."""
        if not journal:
            return
        fields = {"version": 1, "placement_id": 1, "preempted": 1, "reason": 1}
        changes = [(journal[doc["_id"]], int(doc.get("version", 0))) async for doc in
                   self.jobs.find({"_id": {"$in": list(journal)}}, fields, session=session)
                   if changed is None or changed(doc)]
        await self.journal.record_changes(changes, session=session)  # one insert for the whole pass

    async def set_waiting_reasons(self, waiting: Sequence[tuple[JobRecord, str, bool]],
                                  announce: Mapping[str, Sequence[CloudEvent]] | None = None) -> None:
        """Record why each job waits and whether it is parked as never fitting, in one round trip (where
        it waits is derived when read); ``announce``: each job's events, journaled with its new reason."""
        if not waiting:
            return
        ops = [UpdateOne({"_id": job.id, "state": JobState.WAITING.value, "sub_state": SubState.QUEUED.value,
                          "attempt": job.attempt},
                         {"$set": {"reason": reason, "parked": parked}, "$inc": {"version": 1}})
               for job, reason, parked in waiting]
        reasons = {job.id: reason for job, reason, _ in waiting}
        await self._write_jobs(ops, None, announce, lambda doc: doc.get("reason") == reasons[doc["_id"]])

    async def delete_job(self, job_id: str) -> bool:
        """Remove a job with its earlier attempts, its tasks' logs, runs and profiles, and its place in the
        tallies (each step idempotent: a try cut off by a restart is finished by the next)."""
        return await idempotent(lambda: self._delete_job(job_id), "delete a job")

    async def _delete_job(self, job_id: str) -> bool:
        doc = await self.jobs.find_one({"_id": job_id}, {"virtual_cluster": 1, "state": 1, "counted": 1})
        if doc is None:
            await self.job_configs.delete_one({"_id": job_id})  # a try cut off after the job's document
            return False
        if doc.get("counted"):
            await self.tallies.remove(str(doc["virtual_cluster"]), str(doc["state"]), job_id)
        await self.attempts.delete_many({"job_id": job_id})
        await self.job_keys.delete_one({"_id": job_id})
        await LogStore(self.jobs.database).delete_job(job_id)
        await self.profiles.delete_job(job_id)
        # the document and its place in the lists' counts together (shared.db.lists.counts), then its configs
        # (after, so that no read finds the job without them; a process killed in between leaves them alone)
        deleted = await self.list_counts.delete_job(job_id, atomic=await self.supports_transactions())
        await self.job_configs.delete_one({"_id": job_id})
        return deleted

    async def job_key(self, job_id: str) -> StoredJobKey | None:
        """The job's SSH key pair as stored, its private key sealed (:meth:`StoredJobKey.opened` where it is
        used); None for a job submitted before paiq made them, or while the platform had no PAIQ_SECRETS_KEY."""
        doc = await self.job_keys.find_one({"_id": job_id})
        return StoredJobKey.from_document(doc) if doc else None

    async def delete_job_key(self, job_id: str) -> None:
        await idempotent(lambda: self.job_keys.delete_one({"_id": job_id}), "delete a job's key")

    # --- nodes -----------------------------------------------------------------------------

    async def upsert_node(self, node: NodeRecord) -> None:
        doc = node.to_document()
        await self.nodes.replace_one({"_id": node.id}, doc, upsert=True)

    async def heartbeat(self, node_id: str) -> None:
        await self.nodes.update_one({"_id": node_id}, {"$set": {"heartbeat_ms": now_ms(), "lost": False}})

    async def list_nodes(self) -> list[NodeRecord]:
        return [NodeRecord.model_validate(d) async for d in self.nodes.find({}).sort([("_id", ASCENDING)])]

    async def mark_node_lost(self, node_id: str, heard_before_ms: int) -> bool:
        """Mark a node lost if it still has not been heard from since ``heard_before_ms`` (once)."""
        result = await self.nodes.update_one(
            {"_id": node_id, "lost": False, "heartbeat_ms": {"$lt": heard_before_ms}}, {"$set": {"lost": True}})
        return result.modified_count == 1

    # --- virtual clusters ------------------------------------------------------------------

    async def list_vcs(self) -> list[VirtualCluster]:
        return [VirtualCluster.model_validate({k: v for k, v in d.items() if k != "_id"})
                async for d in self.vcs.find({}).sort([("_id", ASCENDING)])]

    async def put_vc(self, vc: VirtualCluster) -> None:
        """Create or replace a VC; whether it is stopped stays as stored (only :meth:`set_vc_stopped` sets it)."""
        fields = vc.model_dump(mode="json", exclude={"stopped"})
        await idempotent(lambda: self.vcs.update_one({"_id": vc.name}, {"$set": fields}, upsert=True),
                         "store a virtual cluster")

    async def set_vc_stopped(self, name: str, stopped: bool) -> bool:
        """Stop a stored VC or set it running again; False when there is no such VC."""
        result = await idempotent(lambda: self.vcs.update_one({"_id": name}, {"$set": {"stopped": stopped}}),
                                  "stop or start a virtual cluster")
        return int(result.matched_count) > 0

    async def delete_vc(self, name: str) -> bool:
        """Whether it was there (a try cut off by a restart that had deleted it counts as deleting it)."""
        tries = 0

        async def delete() -> bool:
            nonlocal tries
            tries += 1
            return (await self.vcs.delete_one({"_id": name})).deleted_count == 1 or tries > 1

        return await idempotent(delete, "delete a virtual cluster")

    async def ping(self) -> None:
        """Whether the database answers, bounded by the driver's own deadline: never cancelled
        (shared.ops.vitals)."""
        with pymongo.timeout(CHECK_SECONDS):
            await self._client.admin.command("ping")


@asynccontextmanager
async def open_store(uri: str, database: str, timeout_seconds: float = 30,
                     max_idle_ms: int = MAX_IDLE_MS) -> AsyncIterator[Store]:
    """The store over a new client. PyMongo's default server selection (30 s): a database restarting
    within it only delays answers. Every operation is bounded by the driver's own deadline (``timeoutMS``,
    ``PAIQ_MONGODB_TIMEOUT_SECONDS``), so a call on a connection that hangs fails instead of waiting for
    ever, and no caller needs to cancel one (cancelled operations can wedge the async client). Pooled
    connections idle for MAX_IDLE_MS are closed by the client before a server's own idle limit
    (SecantusDB's: 300 s) closes them under it."""
    client: AsyncMongoClient[Doc] = AsyncMongoClient(uri, tz_aware=True, serverSelectionTimeoutMS=30_000,
                                                     timeoutMS=int(timeout_seconds * 1000),
                                                     maxIdleTimeMS=max_idle_ms)
    store: Store | None = None
    try:
        store = Store(client, database)
        try:
            await store.ensure_indexes()
        except PyMongoError as e:
            raise StoreError(f"cannot reach MongoDB: {e}") from e
        yield store
    finally:
        gone = store is not None and store.gone is not None
        try:
            # close() ends the client's sessions on the server: with the database unreachable it would wait
            # out a whole server selection (30 s), holding up a shutdown; with it gone, not at all.
            async with asyncio.timeout(GONE_CLOSE_SECONDS if gone else CLOSE_SECONDS):
                await client.close()
        except TimeoutError:
            if not gone:
                log.warning("the database did not answer while closing; closed without ending its sessions")


def _placed(tasks: tuple[TaskRecord, ...], token: str) -> Doc:
    """The update that places a queued job: its tasks (packed or plain, the other form unset), what they
    hold, its sub-state and the commit's token."""
    written, unset = tasks_update(tasks)
    return {"$set": {**written, "sub_state": SubState.STARTING.value, "reason": "", "placement_id": token,
                     **holding_fields(tasks)},
            "$unset": unset, "$inc": {"version": 1}}
