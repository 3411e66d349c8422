"""The journal: every job and task event, stored with the change that causes it, numbered, and published
from there (issue 36: a crash between a change and its event loses nothing).

A writer of a job puts the events of its change into ``journal`` in the same transaction as the job
(:meth:`Journal.record`): each entry the event's JSON, its job, the job's version after the change and its
place in the change (``v``, ``n``), and ``q``, the time it waits to be numbered. One process at a time,
holding the lease ``journal`` (:mod:`shared.runtime.relay`), numbers waiting entries (``seq``, 1, 2, 3, ...
with no gap) in the order they became visible, each job's in the order of its changes, and publishes them
on the bus in that order; readers (the live feed, ``paiq events --since``, the notifier) read by ``seq`` and
resume after the last number they saw. Entries of events that arrived from the bus and were journaled by
their consumer (a launcher's ``task.*``, folded into the job by the status service) are marked published and
only numbered. Commands to nodes are not journaled: they carry tasks' environments, and the launchers'
reconcile repairs a lost one.

Every query reads a bounded range of an index (SecantusDB reads a whole open range before applying
``limit``, and scans the collection for ``$exists``): pending entries by ``q`` (present only while an entry
waits), numbered ones (old ones, and numbers by time) by closed ranges of ``seq``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict
from pymongo import ASCENDING, UpdateOne
from pymongo.asynchronous.client_session import AsyncClientSession
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import BulkWriteError, DuplicateKeyError

from shared.events import CloudEvent, dump_event
from shared.faults import fault_point
from shared.records import now_ms

Doc = dict[str, Any]
META_ID = "journal"
DUPLICATE_KEY = 11000
JOURNALED = ("job.", "task.")  # the public events; node.* commands and notify.* are not journaled


def journaled(event: CloudEvent) -> bool:
    """Whether ``event`` is one the journal keeps (a job's or a task's)."""
    return event.routing_key.startswith(JOURNALED) and getattr(event, "type", "").startswith(JOURNALED)


def split(events: Iterable[CloudEvent]) -> tuple[list[CloudEvent], list[CloudEvent]]:
    """``events`` as (journaled, published directly: commands to nodes and the like)."""
    kept: list[CloudEvent] = []
    direct: list[CloudEvent] = []
    for e in events:
        (kept if journaled(e) else direct).append(e)
    return kept, direct


def entry(event: CloudEvent, *, version: int, n: int, published: bool, at_ms: int) -> Doc:
    """The journal's document of ``event``: the ``n``-th event of the change that made its job's version
    ``version``. ``published``: it is on the bus already (it came from there)."""
    doc: Doc = {"_id": event.id, "job": event.subject, "v": version, "n": n, "type": getattr(event, "type", ""),
                "at": at_ms, "q": at_ms, "body": dump_event(event).decode()}
    if published:
        doc["pub"] = True
    return doc


def numbering_order(pending: Sequence[Doc]) -> list[Doc]:
    """The order in which waiting entries are numbered (pure): as they became visible (``q``, then id), except
    that each job's entries keep the order of its changes (``v``, then ``n``), which writers on different
    machines' clocks may have stamped otherwise. Each job keeps the places its entries hold in the visible
    order; they are filled with its entries sorted by change."""
    visible = sorted(pending, key=lambda d: (d["q"], d["_id"]))
    places: dict[str, list[int]] = {}
    for i, d in enumerate(visible):
        places.setdefault(str(d.get("job") or ""), []).append(i)
    ordered: list[Doc] = list(visible)
    for job, slots in places.items():
        if not job or len(slots) < 2:
            continue
        for slot, d in zip(slots, sorted((visible[i] for i in slots), key=lambda d: (d["v"], d["n"])), strict=True):
            ordered[slot] = d
    return ordered


class JournalEntry(BaseModel):
    """A numbered entry as readers get it."""

    model_config = ConfigDict(frozen=True)
    seq: int
    id: str
    job: str
    type: str
    at_ms: int
    body: str  # the CloudEvent, JSON
    published: bool = False  # on the bus before it was numbered

    @classmethod
    def of(cls, doc: Doc) -> JournalEntry:
        return cls(seq=int(doc["seq"]), id=str(doc["_id"]), job=str(doc.get("job") or ""), type=str(doc["type"]),
                   at_ms=int(doc["at"]), body=str(doc["body"]), published=bool(doc.get("pub")))


class JournalState(BaseModel):
    """Where the journal stands (``meta``'s ``journal``): the last number given, the last published, the
    first still kept (older ones were removed by retention)."""

    model_config = ConfigDict(frozen=True)
    last: int = 0
    published: int = 0
    first: int = 1


class JournalMovedError(Exception):
    """The journal was numbered past what its numberer knew (another numbered meanwhile): nothing is written."""

    def __init__(self, known: int) -> None:
        super().__init__(f"the journal was numbered past {known} by another")


class JournalTail:
    """How far the journal is numbered, as this process knows it, and a wake-up for its readers."""

    def __init__(self) -> None:
        self.last = 0
        self._moved = asyncio.Event()

    def advanced(self, last: int) -> None:
        if last > self.last:
            self.last = last
            self.wake()

    def wake(self) -> None:
        """Wake every reader waiting now (to look again, or to end)."""
        moved, self._moved = self._moved, asyncio.Event()
        moved.set()

    async def wait_past(self, seq: int, within_s: float) -> bool:
        """Wait (at most ``within_s`` seconds) until something past ``seq`` is numbered; whether it is."""
        if self.last > seq:
            return True
        # asyncio.timeout, not wait_for: Python 3.11's wait_for drops a cancellation that meets the event being
        # set (a shutdown's wake-up), and the reader's task then never ends
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within_s):
                await self._moved.wait()
        return self.last > seq


class Journal:
    def __init__(self, db: AsyncDatabase[Doc]) -> None:
        self.entries: AsyncCollection[Doc] = db["journal"]
        self.meta: AsyncCollection[Doc] = db["meta"]
        # Told when a writer of this process committed entries (the relay: shared.runtime.relay).
        self.listeners: list[Callable[[], None]] = []
        self.tail = JournalTail()  # how far it is numbered, as this process knows (readers wait on it)

    def touched(self) -> None:
        """A writer committed entries: wake whoever numbers them."""
        fault_point("journal-committed")
        for listener in self.listeners:
            listener()

    async def ensure_indexes(self) -> None:
        # Two indexes only (each costs every write): readers, retention and times go by closed ranges of numbers
        # (times rise with numbers: found by a binary search); what waits to be numbered by q.
        await self.entries.create_index([("seq", ASCENDING)])
        await self.entries.create_index([("q", ASCENDING)])

    # --- writers ---------------------------------------------------------------------------

    async def record(self, events: Sequence[CloudEvent], *, version: int, session: AsyncClientSession | None,
                     published: Sequence[bool] | None = None) -> None:
        """Store ``events``, the change that made their job's version ``version``, in ``session``'s
        transaction (None: no transaction, on a server without them)."""
        if not events:
            return
        at = now_ms()
        flags = published or [False] * len(events)
        docs = [entry(e, version=version, n=n, published=p, at_ms=at) for n, (e, p) in enumerate(zip(events, flags,
                                                                                                   strict=True))]
        await self._insert(docs, session)

    async def record_changes(self, changes: Sequence[tuple[Sequence[CloudEvent], int]], *,
                             session: AsyncClientSession | None) -> None:
        """Store the events of many changes (each: its events and the version it made) in one insert."""
        at = now_ms()
        docs = [entry(e, version=version, n=n, published=False, at_ms=at)
                for events, version in changes for n, e in enumerate(events)]
        if docs:
            await self._insert(docs, session)

    async def _insert(self, docs: list[Doc], session: AsyncClientSession | None) -> None:
        try:
            await self.entries.insert_many(docs, ordered=True, session=session)
        except BulkWriteError as e:  # an event journaled already: said as for one insert, which callers handle
            if e.details.get("writeErrors") and all(w.get("code") == DUPLICATE_KEY
                                                     for w in e.details["writeErrors"]):
                raise DuplicateKeyError(str(e), DUPLICATE_KEY, e.details) from e
            raise

    # --- the numberer (one process at a time: the lease ``journal``) -----------------------------

    async def waiting(self, limit: int = 500, *, bodies: bool = False) -> list[Doc]:
        """Entries not numbered yet, oldest first (an open range of ``q``: only waiting entries have one)."""
        fields = None if bodies else {"body": 0}
        return [d async for d in self.entries.find({"q": {"$gte": 0}}, fields).sort("q", ASCENDING).limit(limit)]

    async def state(self, session: AsyncClientSession | None = None) -> JournalState:
        doc = await self.meta.find_one({"_id": META_ID}, session=session)
        return JournalState.model_validate({k: v for k, v in (doc or {}).items() if k != "_id"})

    async def number(self, batch: Sequence[Doc], after: int, session: AsyncClientSession | None, *,
                     known: bool = False) -> int:
        """Give ``batch`` (in :func:`numbering_order`) the numbers after ``after``; the last one given. In the
        caller's transaction, with the lease checked there (:mod:`shared.runtime.relay`). ``known``: ``after``
        is the last number as the caller last wrote it, not read in this transaction: the journal's state is
        moved on only from there, else :class:`JournalMovedError` (and the transaction goes)."""
        if not batch:
            return after
        writes = [UpdateOne({"_id": d["_id"], "q": {"$gte": 0}}, {"$set": {"seq": after + i}, "$unset": {"q": ""}})
                  for i, d in enumerate(batch, 1)]
        await self.entries.bulk_write(writes, ordered=True, session=session)
        last = after + len(batch)
        if known:  # from ``after`` only (a journal never numbered has no document yet: made here)
            try:
                await self.meta.update_one({"_id": META_ID, "last": after}, {"$set": {"last": last}}, upsert=True,
                                           session=session)
            except DuplicateKeyError as e:  # there, at another number
                raise JournalMovedError(after) from e
        else:
            await self.meta.update_one({"_id": META_ID}, {"$max": {"last": last}}, upsert=True, session=session)
        return last

    async def mark_published(self, seq: int) -> None:
        await self.meta.update_one({"_id": META_ID}, {"$max": {"published": seq}}, upsert=True)

    # --- readers -----------------------------------------------------------------------------

    async def read(self, after: int, limit: int = 500, through: int | None = None) -> list[JournalEntry]:
        """The numbered entries after ``after`` (at most ``limit``, and none past ``through``), in order: a
        closed range of numbers, so the cost is what is read, never the journal's length."""
        last = after + limit if through is None else min(after + limit, through)
        if last <= after:
            return []
        found = [JournalEntry.of(d) async for d in self.entries.find({"seq": {"$gt": after, "$lte": last}})]
        return sorted(found, key=lambda e: e.seq)

    async def number_of(self, event_id: str) -> int | None:
        """The number of the event ``event_id`` (a consumer may resume after an event it names by its id)."""
        doc = await self.entries.find_one({"_id": event_id}, {"seq": 1})
        return int(doc["seq"]) if doc is not None and doc.get("seq") is not None else None

    async def number_at(self, time_ms: int) -> int:
        """The last number given before ``time_ms``: a binary search over the numbers, by point reads (each
        entry's time, and numbers rise with time but for the clocks of different writers)."""
        state = await self.state()
        lo, hi = state.first - 1, state.last  # the answer is in [lo, hi]
        cache: dict[int, int] = {}

        async def at(seq: int) -> int:
            if seq not in cache:
                doc = await self.entries.find_one({"seq": seq}, {"at": 1})
                cache[seq] = int(doc["at"]) if doc is not None else 0
            return cache[seq]

        while lo < hi:
            mid = (lo + hi + 1) // 2
            if await at(mid) < time_ms:
                lo = mid
            else:
                hi = mid - 1
        return lo

    # --- retention -------------------------------------------------------------------------------

    async def purge(self, before_ms: int, limit: int = 500) -> int:
        """Remove up to ``limit`` of the oldest numbered entries made before ``before_ms`` (a closed range of
        numbers from the first kept), and move the first kept on; how many went."""
        state = await self.state()
        upto = min(state.first + limit - 1, state.published)
        if upto < state.first:
            return 0
        old = [d async for d in self.entries.find({"seq": {"$gte": state.first, "$lte": upto}}, {"at": 1, "seq": 1})]
        times = sorted((int(d["seq"]), int(d["at"])) for d in old)
        # up to the first entry young enough to keep (times rise with numbers, but for writers' clocks)
        cut = next((i for i, (_, t) in enumerate(times) if t >= before_ms), len(times))
        if cut == 0:
            return 0
        last_gone = times[cut - 1][0]
        result = await self.entries.delete_many({"seq": {"$gte": state.first, "$lte": last_gone}})
        await self.meta.update_one({"_id": META_ID}, {"$max": {"first": last_gone + 1}}, upsert=True)
        return int(result.deleted_count)
