"""Submitting a job as one step from the client's view: the job, its SSH key and the client's idempotency
record all stored or none, across a database restart (issue 24: a 503 that had stored the job, a key
left without its job).

A try that fails with a connection error is tried again within the server-selection window; a try whose
fate is unknown (it may have reached the server: the commit sent, no answer) is settled by reading the job
back. So ``STORED`` is said only of a job that is stored, an error is raised only for one that is not, and
:class:`~shared.errors.SubmitOutcomeUnknownError` only when a try may have reached the server and the
database stayed away too long to tell.

Jobs submitted at once are stored together (:class:`Submissions`): while one transaction is out, the next
submissions wait and go as one transaction, so a burst costs a commit per batch, not per job (issue 37). Each
caller is answered with its own outcome: a batch one of whose jobs is refused (its name taken, its
``Idempotency-Key`` used meanwhile) is stored again one job at a time, each told its own refusal; a batch whose
outcome is unknown lets each caller settle its own job as above.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import bson
import pymongo
import structlog
from bson.raw_bson import RawBSONDocument
from pymongo.errors import (
    AutoReconnect,
    BulkWriteError,
    DuplicateKeyError,
    OperationFailure,
    PyMongoError,
    ServerSelectionTimeoutError,
)

from shared.db.batching import Batcher
from shared.db.idempotency import IdempotencyRecord, Submitted
from shared.db.retry import WINDOW_SECONDS, idempotent
from shared.errors import JobExistsError, SubmitOutcomeUnknownError
from shared.events import CloudEvent
from shared.records import JobRecord
from shared.tasks.jobkeys import StoredJobKey

if TYPE_CHECKING:
    from shared.db.base import StoreBase

log = structlog.get_logger("paiq.store")
WRITE_CONFLICT = 112  # a transaction that met another's write: tried again, nothing went away
DUPLICATE_KEY = 11000
MOST_TOGETHER = 32  # submissions in one transaction at most


class EncodedJob(NamedTuple):
    """A new job's documents as :meth:`shared.db.store.Store.insert_job` stores them, encoded: the job's, and its
    configs' where they are big (:meth:`shared.records.JobRecord.documents`)."""

    job: RawBSONDocument
    configs: RawBSONDocument | None


def encoded_job(job: JobRecord) -> EncodedJob:
    """The job's documents, encoded: pure CPU (~15 ms for the largest job), for a worker thread."""
    doc, configs = job.documents()
    return EncodedJob(RawBSONDocument(bson.encode(doc)),
                      None if configs is None else RawBSONDocument(bson.encode(configs)))


def _outcome_unknown(error: PyMongoError) -> bool:
    """Whether a failed write may have been applied or may be tried again: the connection went away, the
    deadline passed, or the server says the transaction failed transiently or its commit is unknown."""
    return (isinstance(error, AutoReconnect) or error.timeout
            or error.has_error_label("TransientTransactionError")
            or error.has_error_label("UnknownTransactionCommitResult"))


@dataclass(frozen=True)
class Submission:
    """One job to store, with what goes with it."""

    job: JobRecord
    document: EncodedJob
    key: StoredJobKey | None
    idempotency: IdempotencyRecord | None
    events: Sequence[CloudEvent]


class Submissions:
    """The submissions of one process, stored a transaction per batch of those that arrive together."""

    def __init__(self, store: StoreBase) -> None:
        self._store = store
        self._batcher: Batcher[Submission, Exception | None] = Batcher(self._store_many, most=MOST_TOGETHER)

    async def store(self, submission: Submission) -> None:
        """Store it (with the others arriving meanwhile); raises as storing it alone would."""
        refused = await self._batcher(submission)
        if refused is not None:
            raise refused

    async def submit(self, job: JobRecord, document: EncodedJob, key: StoredJobKey | None,
                     idempotency: IdempotencyRecord | None = None, events: Sequence[CloudEvent] = ()) -> Submitted:
        """Store a new job with its SSH key (and the client's idempotency record) as one step: all of them
        or none, in a transaction where the server has them (a replica set; on a standalone mongod the key
        goes first and is removed again when the job was refused).

        A connection error on the way (a database restarting) is tried again within the server-selection
        window; a try whose outcome is unknown (the commit sent, no answer) is settled by reading the job
        back, so the caller is told ``STORED`` only for a job that is stored and raises only for one that
        is not, or :class:`SubmitOutcomeUnknownError` when the database stayed away too long to tell.
        ``DUPLICATE``: the idempotency record says an earlier request stored this submission already. ``events``
        (``job.submitted``) are journaled in the same transaction (:mod:`shared.db.journal`)."""
        store = self._store
        deadline = time.monotonic() + WINDOW_SECONDS
        delay = 0.1
        maybe_sent = False  # whether any try may have reached the server (no server selected: it did not)
        while True:
            try:
                await _submit_once(store, self, job, document, key, idempotency, events)
                if events:
                    store.journal.touched()
                return Submitted.STORED
            except DuplicateKeyError as e:
                if await _stored(store, job.id):
                    return Submitted.STORED  # an earlier try of this request committed
                if idempotency is not None and await store.idempotency.find_one({"_id": idempotency.id}) is not None:
                    return Submitted.DUPLICATE  # another request with this key stored its job first
                raise JobExistsError(job.id) from e
            except PyMongoError as e:
                if not _outcome_unknown(e):
                    raise
                maybe_sent |= not isinstance(e, ServerSelectionTimeoutError)
                if await _settle(store, job.id, e, deadline=deadline, last=time.monotonic() + delay >= deadline,
                                      maybe_sent=maybe_sent):
                    return Submitted.STORED
                if isinstance(e, OperationFailure) and e.code == WRITE_CONFLICT:
                    log.info("storing a job conflicted with another write; trying again", job_id=job.id)
                else:
                    log.info("the database went away while a job was stored; trying again", job_id=job.id,
                             error=type(e).__name__)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def _store_many(self, batch: list[Submission]) -> list[Exception | None]:
        """One transaction for the batch. One whose outcome is unknown (the connection lost, a conflict) reaches
        every caller, who settles their own job; one refused (a duplicate key, or any other refusal: the whole
        transaction went) is stored again one job at a time, each caller told their own outcome."""
        if len(batch) > 1:
            try:
                await _insert_together(self._store, batch)
                return [None] * len(batch)
            except Exception as e:  # a duplicate, or one job's document refused by the driver: each alone says whose
                if isinstance(e, PyMongoError) and _outcome_unknown(e):
                    raise
                log.info("submissions stored together were refused; storing them one by one", jobs=len(batch),
                         error=type(e).__name__)
        outcomes: list[Exception | None] = []
        for one in batch:
            try:
                await _insert_together(self._store, [one])
                outcomes.append(None)
            except BulkWriteError as e:
                duplicate = all(w.get("code") == DUPLICATE_KEY for w in e.details.get("writeErrors", []))
                outcomes.append(DuplicateKeyError(str(e), DUPLICATE_KEY, e.details) if duplicate else e)
            except PyMongoError as e:
                outcomes.append(e)
                if _outcome_unknown(e):  # the database away: the rest settle their own jobs rather than wait
                    outcomes += [e] * (len(batch) - len(outcomes))
                    break
            except Exception as e:  # its own document refused by the driver (too large, not encodable): its alone
                outcomes.append(e)
        return outcomes


async def _insert_together(store: StoreBase, batch: Sequence[Submission]) -> None:
    """The batch's keys, idempotency records, configs, jobs and events in one transaction (inserts: a job id
    is new, its random suffix, and an insert costs the server less than an upsert)."""
    keys = [s.key.to_document() for s in batch if s.key is not None]
    records = [s.idempotency.to_document() for s in batch if s.idempotency is not None]
    configs = [s.document.configs for s in batch if s.document.configs is not None]
    async with store.start_session() as session, await session.start_transaction():
        for collection, docs in ((store.job_keys, keys), (store.idempotency, records), (store.job_configs, configs),
                                 (store.jobs, [s.document.job for s in batch])):
            if len(docs) == 1:
                await collection.insert_one(docs[0], session=session)
            elif docs:
                await collection.insert_many(docs, ordered=True, session=session)
        await store.journal.record_changes([(s.events, s.job.version) for s in batch if s.events], session=session)


async def _submit_once(store: StoreBase, submissions: Submissions, job: JobRecord, document: EncodedJob,
                       key: StoredJobKey | None, idempotency: IdempotencyRecord | None,
                       events: Sequence[CloudEvent]) -> None:
    if not await store.supports_transactions():  # a standalone mongod: key, configs, job, then the record
        if key is not None:
            await store.put_job_key(key)
        if (configs := document.configs) is not None:
            await idempotent(lambda: store.job_configs.replace_one({"_id": job.id}, configs, upsert=True),
                             "store a job's configs")
        try:
            await store.jobs.insert_one(document.job)
        except DuplicateKeyError:
            if not await _stored(store, job.id):
                await idempotent(lambda: _unstore_parts(store, job.id), "remove a refused job's key")
            raise
        if idempotency is not None:
            await idempotent(lambda: store.idempotency.replace_one({"_id": idempotency.id},
                                                                  idempotency.to_document(), upsert=True),
                             "store an idempotency record")
        with contextlib.suppress(DuplicateKeyError):  # a try whose answer was lost journaled them already
            await store.journal.record(events, version=job.version, session=None)
        return
    await submissions.store(Submission(job, document, key, idempotency, events))

async def _settle(store: StoreBase, job_id: str, error: PyMongoError, *, deadline: float, last: bool,
                  maybe_sent: bool) -> bool:
    """After a failed try: True when the job is stored; False to try again; on the ``last`` try, raise
    ``error`` when it is surely not stored (no try reached a server, or the job is not there; its key
    and configs removed where no transaction took them along), or SubmitOutcomeUnknownError when a try may have
    reached the server and the database cannot tell."""
    stored: bool | None = False
    if maybe_sent:
        with pymongo.timeout(max(1.0, deadline - time.monotonic())):
            stored = await _stored_or_none(store, job_id)
    if stored or not last:
        return bool(stored)
    if stored is None:
        raise SubmitOutcomeUnknownError(job_id) from error
    if store.transactions_known is False:  # the key and configs went on their own, before the job: take them back
        with contextlib.suppress(PyMongoError):
            await _unstore_parts(store, job_id)
    raise error


async def _unstore_parts(store: StoreBase, job_id: str) -> None:
    """Remove what a submission without a transaction stored before the job: its key and configs."""
    await store.job_keys.delete_one({"_id": job_id})
    await store.job_configs.delete_one({"_id": job_id})

async def _stored(store: StoreBase, job_id: str) -> bool:
    return await store.jobs.find_one({"_id": job_id}, {"_id": 1}) is not None

async def _stored_or_none(store: StoreBase, job_id: str) -> bool | None:
    """Whether the job is stored; None when the database cannot be asked."""
    try:
        return await _stored(store, job_id)
    except PyMongoError:
        return None
