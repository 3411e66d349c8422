"""The counts behind deep pages (:mod:`shared.db.lists.buckets`), in the collection ``job_list_counts``.

An ended job is counted when the store marks it ``counted`` (the flag the per-VC tallies use), in the
same transaction as the flag, and uncounted when it is deleted, in the same transaction as the delete:
so the counts hold exactly the jobs marked counted, whatever crash or retry comes between two writes.
(A server without transactions, a standalone mongod, gets the same writes one after the other: a crash
between them leaves a count one off, which shifts deep pages by one job.) The jobs not counted yet, the
active ones, are read from the partial index of uncounted jobs when a deep page is asked for.

Beside them, for ``GET /api/v2/jobs``'s orders by a field of few values (:data:`DIRECTORIES`: the user, retries,
the task and GPU totals, the priority class), one document per field, ``V|<field>``, counting the counted jobs
per value (``v``) and per state and value (``vs``), moved in the same transaction: the values an order visits
and how many jobs each holds (:mod:`shared.db.listorder`), read by id whatever the history; an ended job's
values never change again.
"""

from __future__ import annotations

import base64
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pymongo import UpdateOne
from pymongo.asynchronous.client_session import AsyncClientSession
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import BulkWriteError

from shared.db.lists.buckets import (
    EVERYONE,
    LEVEL_BITS,
    Locus,
    combined,
    doc_id,
    documents,
    increments,
    merged_increments,
    newer,
    pick,
    span,
    tally,
)

Doc = dict[str, Any]
T = TypeVar("T")
BULK = 1000  # counter documents per bulk write (imports, the schema migration)
DUPLICATE_KEY = 11000
VALUE_FIELDS = ("retries", "task_count", "gpu_count", "job_priority")  # the orders by a counted value
DIRECTORIES = ("user", *VALUE_FIELDS)  # fields whose values are counted: one document each
ENDED_FIELDS = {"created_ms": 1, "user": 1, "state": 1, "counted": 1, **dict.fromkeys(VALUE_FIELDS, 1)}
VALUE_PREFIX = "V|"
Value = int | str | None


def value_key(value: Value) -> str:
    """A value as a key of a counting document (no ``.`` or ``$``: base64 for text)."""
    if value is None:
        return "n"
    if isinstance(value, int):
        return f"i{value}"
    return "s" + base64.urlsafe_b64encode(value.encode()).decode().rstrip("=")


def key_value(key: str) -> Value:
    if key == "n":
        return None
    if key[0] == "i":
        return int(key[1:])
    return base64.urlsafe_b64decode(key[1:] + "=" * (-len(key[1:]) % 4)).decode()


def value_increments(docs: Iterable[Doc], delta: int = 1) -> Counter[tuple[str, Value, str]]:
    """``(field, value, state) -> n`` of the jobs' :data:`DIRECTORIES` (``job_priority`` absent: None)."""
    out: Counter[tuple[str, Value, str]] = Counter()
    for doc in docs:
        for name in DIRECTORIES:
            out[(name, doc.get(name, 0 if name in ("retries", "task_count", "gpu_count") else None),
                 str(doc.get("state")))] += delta
    return out


def _value_ops(incs: Counter[tuple[str, Value, str]]) -> list[UpdateOne]:
    """One ``$inc`` per field's document ``V|<field>``: ``v.<value>`` (every job) and ``vs.<state>.<value>``."""
    by_field: dict[str, Counter[str]] = {}
    for (name, value, state), n in incs.items():
        if n:
            key = value_key(value)
            by_field.setdefault(name, Counter()).update({f"v.{key}": n, f"vs.{state}.{key}": n})
    return [UpdateOne({"_id": f"{VALUE_PREFIX}{name}"}, {"$inc": dict(inc)}, upsert=True)
            for name, inc in by_field.items()]


def _ops(incs: dict[str, dict[str, int]] | dict[str, Counter[str]]) -> list[UpdateOne]:
    return [UpdateOne({"_id": doc}, {"$inc": dict(inc)}, upsert=True) for doc, inc in incs.items()]


class ListCounts:
    def __init__(self, db: AsyncDatabase[Doc]) -> None:
        self.col: AsyncCollection[Doc] = db["job_list_counts"]
        self.jobs: AsyncCollection[Doc] = db["jobs"]

    async def _atomically(self, atomic: bool, work: Callable[[AsyncClientSession | None], Awaitable[T]]) -> T:
        if not atomic:
            return await work(None)
        async with self.jobs.database.client.start_session() as session:
            return await session.with_transaction(work)

    async def count(self, job_id: str, created_ms: int, user: str, state: str, *, atomic: bool) -> bool:
        """Mark an ended job counted and count it (once: a job already marked is left alone); whether this
        call counted it. The mark moves the job's ``version``, so that a writer holding an older read of it
        cannot put the mark back."""
        ops = _ops(increments(created_ms, user, state, 1))

        async def work(session: AsyncClientSession | None) -> bool:
            marked = await self.jobs.update_one({"_id": job_id, "counted": False},
                                                {"$set": {"counted": True}, "$inc": {"version": 1}}, session=session)
            if marked.modified_count != 1:
                return False
            values = await self.jobs.find_one({"_id": job_id}, ENDED_FIELDS, session=session)
            await self.col.bulk_write(ops + _value_ops(value_increments([values] if values else [])), ordered=False,
                                      session=session)
            return True

        return await self._atomically(atomic, work)

    async def add_ended(self, doc: Doc, session: AsyncClientSession | None) -> None:
        """Count the ended job ``doc`` (its :data:`ENDED_FIELDS` at least), in ``session``'s transaction: the one
        that marks it ``counted``."""
        ops = _ops(increments(int(doc["created_ms"]), str(doc["user"]), str(doc["state"]), 1))
        await self.col.bulk_write(ops + _value_ops(value_increments([doc])), ordered=False, session=session)

    async def delete_job(self, job_id: str, *, atomic: bool) -> bool:
        """Delete the job's document, and its counts if it was counted; whether it was there."""
        async def work(session: AsyncClientSession | None) -> bool:
            doc = await self.jobs.find_one({"_id": job_id}, ENDED_FIELDS, session=session)
            if doc is None:
                return False
            deleted = (await self.jobs.delete_one({"_id": job_id}, session=session)).deleted_count == 1
            if deleted and doc.get("counted"):
                incs = increments(int(doc["created_ms"]), str(doc["user"]), str(doc["state"]), -1)
                await self.col.bulk_write(_ops(incs) + _value_ops(value_increments([doc], -1)), ordered=False,
                                          session=session)
            return deleted

        return await self._atomically(atomic, work)

    async def add(self, jobs: Iterable[tuple[int, str, str]]) -> None:
        """Count many jobs ``(created_ms, user, state)`` stored as counted already (imports, the migration):
        the documents not there yet inserted whole (an insert costs the embedded server a fraction of an
        upsert), the others moved."""
        incs = merged_increments(jobs)
        docs = documents(incs)
        for start in range(0, len(docs), BULK):
            try:
                await self.col.insert_many(docs[start:start + BULK], ordered=False)
            except BulkWriteError as e:
                errors = e.details.get("writeErrors", [])
                if any(err.get("code") != DUPLICATE_KEY for err in errors):
                    raise
                there = {docs[start + int(err["index"])]["_id"] for err in errors}
                await self.col.bulk_write(_ops({d: incs[d] for d in there}), ordered=False)

    async def add_values(self, docs: Iterable[Doc]) -> None:
        """Count the values of many jobs stored as counted already (imports): one upsert per field."""
        if ops := _value_ops(value_increments(docs)):
            await self.col.bulk_write(ops, ordered=False)

    async def values(self, field: str, state: str | None = None) -> dict[Value, int]:
        """The values of ``field`` that counted jobs (in ``state``) hold, with how many hold each: one document,
        read by its id (a range of ids would cost the embedded server the whole collection)."""
        doc = await self.col.find_one({"_id": f"{VALUE_PREFIX}{field}"}) or {}
        counts = doc.get("v", {}) if state is None else doc.get("vs", {}).get(state, {})
        return {key_value(k): int(n) for k, n in counts.items() if int(n) > 0}

    async def recount(self, renew: Callable[[], Awaitable[object]]) -> int:
        """Count every job marked counted, from nothing (the schema migration: reads the whole history once,
        calling ``renew`` every :data:`BULK` jobs to keep its lease)."""
        await self.col.delete_many({})
        ended: list[tuple[int, str, str]] = []
        values: Counter[tuple[str, Value, str]] = Counter()
        async for d in self.jobs.find({"counted": True}, ENDED_FIELDS):
            ended.append((int(d["created_ms"]), str(d["user"]), str(d["state"])))
            values.update(value_increments([d]))
            if len(ended) % BULK == 0:
                await renew()
        await self.add(ended)
        if ops := _value_ops(values):
            await self.col.bulk_write(ops, ordered=False)
        return len(ended)

    async def recount_values(self, renew: Callable[[], Awaitable[object]]) -> int:
        """Count the values of every job marked counted, from nothing (the schema migration to version 5, over a
        history whose deep pages' counts are there already: reads the whole history once)."""
        await self.col.delete_many({"_id": {"$in": [f"{VALUE_PREFIX}{name}" for name in DIRECTORIES]}})
        values: Counter[tuple[str, Value, str]] = Counter()
        done = 0
        async for d in self.jobs.find({"counted": True}, ENDED_FIELDS):
            values.update(value_increments([d]))
            done += 1
            if done % BULK == 0:
                await renew()
        if ops := _value_ops(values):
            await self.col.bulk_write(ops, ordered=False)
        return done

    async def view(self, user: str | None, state: str | None) -> ListView:
        """The counts of one list (every job, a user's, a state's, or a user's in a state), with its jobs
        not counted yet read from the partial index of uncounted jobs (active work)."""
        extra = [int(d["created_ms"]) async for d in self.jobs.find({"counted": False}, ENDED_FIELDS)
                 if (user is None or d.get("user") == user) and (state is None or d.get("state") == state)]
        return ListView(self.col, user or EVERYONE, state, extra)


@dataclass
class ListView:
    """One list's counts: the positions of its jobs in creation time."""

    col: AsyncCollection[Doc]
    owner: str
    state: str | None
    extra: list[int]  # the creation times of its jobs not counted yet
    docs: dict[str, Doc | None] = field(default_factory=dict)

    async def _counts(self, level: int, near_ms: int) -> dict[int, int]:
        """The level's buckets with their jobs, in the document that holds ``near_ms``."""
        key = doc_id(level, self.owner, near_ms)
        if key not in self.docs:
            self.docs[key] = await self.col.find_one({"_id": key})
        return combined(self.docs[key], self.state, tally(self.extra, level, near_ms))

    async def locate(self, position: int) -> Locus | None:
        """The fine bucket that holds ``position`` (0: the newest job); None past the list's end."""
        remaining, near_ms, outer = position, 0, (0, 0)
        for level in range(len(LEVEL_BITS)):
            picked = pick(await self._counts(level, near_ms), remaining)
            if picked is None:
                if level == 0:
                    return None
                # The levels disagree (a count moved between two reads): read the whole bucket above.
                return Locus(outer[0], outer[1], remaining)
            bucket, before = picked
            remaining -= before
            outer = span(level, bucket)
            near_ms = outer[0]
        return Locus(outer[0], outer[1], remaining)

    async def newer_than_bucket(self, created_ms: int) -> int:
        """How many of the list's jobs were created in fine buckets newer than the one of ``created_ms``."""
        total = 0
        for level, bits in enumerate(LEVEL_BITS):
            total += newer(await self._counts(level, created_ms), created_ms >> bits)
        return total
