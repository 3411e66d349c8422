"""The usage rollups: what each virtual cluster and user held and used, per UTC day, written as jobs end.

Two collections of small documents, one per day and key, moved by ``$inc``:
``usage_by_user`` (``_id`` ``<day>|<vc>|<user>``) and ``usage_by_vc`` (``_id`` ``<day>|<vc>``, every user
summed), each with the fields of :class:`shared.usage.counting.Amounts`. A job is counted once, when it
ends (with the write that ends it, :meth:`shared.db.store.Store.replace_job`; or by the status service's pass,
:meth:`shared.db.store.Store.count_finished`, for a count cut short): its every attempt's tasks, and its
profiles' totals for what they used (:mod:`shared.usage.counting`). A report reads the days it covers, never
the jobs: at most one document per day and (VC, user) that ran anything that day.

Counting is idempotent: the job's document is marked ``usage_counted`` in the same transaction as the
increments (the mark's filter refuses a job marked already), so a completion applied twice, or a count
retried after a crash by the status service's pass, adds nothing twice. A server without transactions
gets the mark first, then the increments: a crash between them leaves that job out (never counted twice).
Deleting a job, by its owner or by retention, leaves the rollups alone: usage is history.

Jobs that ended before the rollups existed (a store older than schema version 6) are added by the schema
migration (:meth:`UsageStore.backfill`): every ended, counted job without the mark, in chunks in the order of
their ids, each chunk's amounts written in one small transaction with how far it got (not one transaction for
the whole history, which could outlive MongoDB's 60 s limit), so a migration cut off goes on where it stopped.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from pymongo import ASCENDING, UpdateOne
from pymongo.asynchronous.client_session import AsyncClientSession
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import BulkWriteError

from shared.db.profiles import ProfileStore
from shared.profiling.totals import TaskTotals
from shared.records import AttemptRecord, JobRecord
from shared.usage.counting import Amounts, RunKey, job_days, merged
from shared.usage.days import DayRange
from shared.usage.report import ReportRow, RowFilter, report_row

Doc = dict[str, Any]
MARK = "usage_counted"  # on the job's document: its usage is in the rollups
BACKFILL = "usage_backfill"  # in meta: how far (by job id) the jobs ended before the rollups were added
BULK = 1000
DUPLICATE_KEY = 11000
_AMOUNTS = {name: 1 for name in Amounts.model_fields}


UsageIncrements = tuple[list[UpdateOne], list[UpdateOne]]  # the per-user rows' and the per-VC rows' $inc


def _ops(rows: dict[tuple[str, str, str], Amounts]) -> UsageIncrements:
    """The increments of the two rollups for rows summed by (day, vc, user)."""
    by_vc: dict[tuple[str, str], Amounts] = {}
    for (day, vc, _), a in rows.items():
        by_vc[(day, vc)] = by_vc[(day, vc)].plus(a) if (day, vc) in by_vc else a
    users = [UpdateOne({"_id": f"{day}|{vc}|{user}"},
                       {"$inc": a.increments(), "$setOnInsert": {"day": day, "vc": vc, "user": user}}, upsert=True)
             for (day, vc, user), a in rows.items() if a.increments()]
    vcs = [UpdateOne({"_id": f"{day}|{vc}"}, {"$inc": a.increments(), "$setOnInsert": {"day": day, "vc": vc}},
                     upsert=True) for (day, vc), a in by_vc.items() if a.increments()]
    return users, vcs


def report_queries(first: str, last: str, filters: Sequence[RowFilter]) -> list[tuple[Doc, frozenset[str] | None]]:
    """Each filter's reads: a query that is an equality prefix and a range of days of one index, and the VCs
    its rows must be in (None: any). A user's rows are read by user and kept in the VCs asked (the embedded
    server reads user, VC and days together, and any ``$in``, by scanning the collection), so the extra rows
    read are that user's own in the days asked; several VCs without a user are a read each."""
    out: list[tuple[Doc, frozenset[str] | None]] = []
    days = {"day": {"$gte": first, "$lte": last}}
    for f in filters:
        if f.user is not None:
            out.append(({"user": f.user, **days}, None if f.vcs is None else frozenset(f.vcs)))
        elif f.vcs is None:
            out.append((days, None))
        else:
            out += [({"vc": vc, **days}, None) for vc in f.vcs]
    return out


async def _insert_or_add(col: AsyncCollection[Doc], docs: dict[str, tuple[Doc, Amounts]]) -> None:
    ids = [i for i, (_, a) in docs.items() if a.increments()]
    for start in range(0, len(ids), BULK):
        batch = ids[start:start + BULK]
        try:
            await col.insert_many([{"_id": i, **docs[i][0], **docs[i][1].model_dump()} for i in batch], ordered=False)
        except BulkWriteError as e:
            errors = e.details.get("writeErrors", [])
            if any(err.get("code") != DUPLICATE_KEY for err in errors):
                raise
            there = [batch[int(err["index"])] for err in errors]
            await col.bulk_write([UpdateOne({"_id": i}, {"$inc": docs[i][1].increments()}) for i in there],
                                 ordered=False)


class UsageStore:
    def __init__(self, db: AsyncDatabase[Doc], profiles: ProfileStore) -> None:
        self.by_user: AsyncCollection[Doc] = db["usage_by_user"]
        self.by_vc: AsyncCollection[Doc] = db["usage_by_vc"]
        self.jobs: AsyncCollection[Doc] = db["jobs"]
        self.profiles = profiles

    async def ensure_indexes(self) -> None:
        # a report's reads: one user's rows, one or more VCs' rows, everyone's; each a range of days
        await self.by_user.create_index([("user", ASCENDING), ("day", ASCENDING)], name="usage_user_day")
        await self.by_user.create_index([("vc", ASCENDING), ("day", ASCENDING)], name="usage_vc_day")
        await self.by_user.create_index([("day", ASCENDING)], name="usage_day")
        await self.by_vc.create_index([("vc", ASCENDING), ("day", ASCENDING)], name="usage_vc_day")
        await self.by_vc.create_index([("day", ASCENDING)], name="usage_day")

    async def _runs(self, job: JobRecord, attempts: Sequence[int]) -> dict[RunKey, TaskTotals]:
        """The profiles' totals of every run of the job's tasks in those attempts."""
        out: dict[RunKey, TaskTotals] = {}
        for attempt in attempts:
            for p in await self.profiles.of_job(job.id, attempt):
                out[(attempt, p.role, p.index, p.task_attempt)] = p.totals
        return out

    async def record_job(self, job: JobRecord, archived: Sequence[AttemptRecord], *, atomic: bool) -> bool:
        """Add an ended job's usage to the rollups, once; whether this call added it. ``archived``: its
        earlier attempts (``Store.attempts_of``)."""
        if await self.jobs.find_one({"_id": job.id, MARK: True}, {"_id": 1}) is not None:
            return False  # counted already (a retry): no need to read its profiles
        ops = await self.increments_of(job, archived)

        async def work(session: AsyncClientSession | None) -> bool:
            marked = await self.jobs.update_one({"_id": job.id, MARK: {"$ne": True}}, {"$set": {MARK: True}},
                                                session=session)
            if marked.modified_count != 1:
                return False
            await self.add(ops, session)
            return True

        if not atomic:
            return await work(None)
        async with self.jobs.database.client.start_session() as session:
            return await session.with_transaction(work)

    async def increments_of(self, job: JobRecord, archived: Sequence[AttemptRecord]) -> UsageIncrements:
        """What the ended ``job`` adds to the rollups (its earlier attempts ``archived``): read from its profiles,
        so computed before the transaction that adds it."""
        attempts = sorted({a.attempt for a in archived} | {job.attempt})
        return _ops(merged(job_days(job, archived, await self._runs(job, attempts))))

    async def add(self, ops: UsageIncrements, session: AsyncClientSession | None) -> None:
        """Write the increments (in ``session``'s transaction: the one that marks the job)."""
        users, vcs = ops
        if users:
            await self.by_user.bulk_write(users, ordered=False, session=session)
        if vcs:
            await self.by_vc.bulk_write(vcs, ordered=False, session=session)

    async def backfill(self, chunks: AsyncIterator[Sequence[tuple[JobRecord, Sequence[AttemptRecord]]]],
                       meta: AsyncCollection[Doc], *, atomic: bool) -> int:
        """Add the usage of jobs that ended before the rollups, a chunk at a time in the order of their ids (each
        job with its earlier attempts): a chunk's amounts and the id of its last job (``BACKFILL`` in ``meta``,
        where :meth:`backfilled_to` reads it) written in one transaction (``atomic``; otherwise the id first: a
        crash then leaves that chunk out, never adds it twice). Jobs are not marked: an ended job without the mark
        was never counted, and one that ends meanwhile is marked as it is counted. How many jobs were added."""
        added = 0
        async for chunk in chunks:
            runs: dict[str, dict[RunKey, TaskTotals]] = {job.id: {} for job, _ in chunk}
            for p in await self.profiles.of_jobs(list(runs)):
                runs[p.job_id][(p.attempt, p.role, p.index, p.task_attempt)] = p.totals
            rows = merged(r for job, archived in chunk for r in job_days(job, archived, runs[job.id]))
            await self._add_chunk(rows, max(job.id for job, _ in chunk), meta, atomic=atomic)
            added += len(chunk)
        return added

    async def _add_chunk(self, rows: dict[tuple[str, str, str], Amounts], last: str, meta: AsyncCollection[Doc], *,
                         atomic: bool) -> None:
        users, vcs = _ops(rows)

        async def work(session: AsyncClientSession | None) -> None:
            await meta.update_one({"_id": BACKFILL}, {"$set": {"last": last}}, upsert=True, session=session)
            for col, ops in ((self.by_user, users), (self.by_vc, vcs)):
                if ops:
                    await col.bulk_write(ops, ordered=False, session=session)

        if not atomic:
            await work(None)
            return
        async with self.jobs.database.client.start_session() as session:
            await session.with_transaction(work)

    @staticmethod
    async def backfilled_to(meta: AsyncCollection[Doc]) -> str:
        """The id of the last job the backfill added ("" before it began)."""
        doc = await meta.find_one({"_id": BACKFILL})
        return str(doc["last"]) if doc else ""

    async def add_jobs(self, jobs: Sequence[JobRecord]) -> None:
        """Count many ended jobs stored at once (imports, benchmarks: no profiles, every attempt in its
        ``archived``), their increments merged into one per document: the documents not there yet inserted
        whole (an insert costs the embedded server a fraction of an upsert), the others moved."""
        rows = merged([r for j in jobs if j.state.is_final for r in job_days(j, j.archived, {})])
        by_vc: dict[tuple[str, str], Amounts] = {}
        for (day, vc, _), a in rows.items():
            by_vc[(day, vc)] = by_vc[(day, vc)].plus(a) if (day, vc) in by_vc else a
        users = {f"{day}|{vc}|{user}": ({"day": day, "vc": vc, "user": user}, a) for (day, vc, user), a in rows.items()}
        vcs = {f"{day}|{vc}": ({"day": day, "vc": vc}, a) for (day, vc), a in by_vc.items()}
        await _insert_or_add(self.by_user, users)
        await _insert_or_add(self.by_vc, vcs)

    async def rows(self, days: DayRange, filters: Sequence[RowFilter], *, by_vc: bool) -> list[ReportRow]:
        """The rows of the days that the filters select (each read one range of one index:
        :func:`report_queries`; a row two filters select is shown once), as the report shows them."""
        first, last = days.bounds()
        col = self.by_vc if by_vc else self.by_user
        seen: dict[str, ReportRow] = {}
        for query, vcs in report_queries(first, last, filters):
            async for d in col.find(query, {**_AMOUNTS, "day": 1, "vc": 1, "user": 1}):
                if vcs is not None and d["vc"] not in vcs:
                    continue
                amounts = Amounts.model_validate({k: d[k] for k in _AMOUNTS if k in d})
                seen[str(d["_id"])] = report_row(str(d["day"]), str(d["vc"]), None if by_vc else str(d["user"]),
                                                 amounts)
        return list(seen.values())

