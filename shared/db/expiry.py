"""Records that expire (sessions, idempotency records, notification deliveries, rate windows), removed by
paiq a bounded batch at a time (issue 37).

Not by the server's TTL indexes: SecantusDB's TTL monitor decodes every document of every collection that has
one, under its global lock, every 60 s, so its cost grew with what is kept (a week of deliveries, a day of
idempotency records) and the API waited behind it. Here a call walks the expiry index from where the last one
stopped (kept in ``meta``; the first time, from the oldest record) towards now, a closed window ``[from, to)``
at a time: it reads how many records the window holds, up to one more than :data:`BATCH` (under a
``maxTimeMS`` deadline, which mongod keeps and SecantusDB 0.7 does not for this read), and deletes the
window's range only when it holds at most a batch, else halves the window and looks again; windows grow while
they hold few. So no delete removes more than :data:`BATCH` records, whatever the backlog or a burst after a
quiet stretch. A call stops after :data:`CALL_BUDGET_SECONDS`; the next goes on from there.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import structlog
from pymongo import ASCENDING
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import ExecutionTimeout, OperationFailure

from shared.records import now_ms

Doc = dict[str, object]
BATCH = 500  # the most records one delete removes
FIRST_WINDOW = timedelta(milliseconds=1)  # the precision of stored dates: the smallest window
START_WINDOW = timedelta(minutes=1)  # a process's first window (halved at once if it holds too many)
MAX_WINDOW = timedelta(hours=6)
CALL_BUDGET_SECONDS = 5.0  # a call stops after this long; the next goes on from where it stopped
SELECT_MS = 5_000  # the server's deadline for finding a window's records
INDEX_NAME = "expiry"
INDEX_NOT_FOUND = 27
log = structlog.get_logger("paiq.expiry")


@dataclass(frozen=True)
class Expiring:
    """A collection whose records go ``keep`` after the time in ``field`` (a date; ``keep`` zero: the field
    is the expiry itself)."""

    collection: AsyncCollection[Doc]
    field: str
    keep: timedelta = timedelta(0)


def next_window(window: timedelta, found: int) -> timedelta:
    """The next window's span after one of ``window`` held ``found`` records (pure)."""
    if found > BATCH // 2:
        return max(FIRST_WINDOW, window / 2)
    if found < BATCH // 8:
        return min(MAX_WINDOW, window * 2)
    return window


async def ensure_expiry_index(target: Expiring) -> None:
    """A plain index on the expiry field, named :data:`INDEX_NAME`; a TTL index on it (an older paiq's) goes."""
    col = target.collection
    for name, info in (await col.index_information()).items():
        if info.get("key") == [(target.field, ASCENDING)] and name != INDEX_NAME:
            try:
                await col.drop_index(name)
            except OperationFailure as e:  # another service starting at the same time dropped it first
                if e.code != INDEX_NOT_FOUND:
                    raise
    await col.create_index([(target.field, ASCENDING)], name=INDEX_NAME)


class ExpiryPurger:
    """Removes what expired from ``targets``; one call at a time per process (callers run it periodically)."""

    def __init__(self, db: AsyncDatabase[Doc], targets: Sequence[Expiring]) -> None:
        self.meta: AsyncCollection[Doc] = db["meta"]
        self.targets = list(targets)
        self._window: dict[str, timedelta] = {}

    async def ensure_indexes(self) -> None:
        for target in self.targets:
            await ensure_expiry_index(target)

    async def purge(self, at_ms: int | None = None) -> int:
        """Remove the records expired by ``at_ms`` (now); how many went."""
        now = datetime.fromtimestamp((now_ms() if at_ms is None else at_ms) / 1000, UTC)
        removed = 0
        for target in self.targets:
            removed += await self._purge(target, now)
        return removed

    async def _purge(self, target: Expiring, now: datetime) -> int:
        col, name, field = target.collection, target.collection.name, target.field
        key = f"expiry:{name}"
        cut = now - target.keep  # records whose field is before this have expired
        position = await self.meta.find_one({"_id": key})
        kept = position.get("to") if position else None
        if isinstance(kept, datetime):
            start = _aware(kept)
        else:
            start = await self._oldest(target, cut)
            await self.meta.update_one({"_id": key}, {"$max": {"to": start}}, upsert=True)
        window = self._window.get(name, START_WINDOW)
        removed, moved = 0, False
        stop_at = time.monotonic() + CALL_BUDGET_SECONDS
        while start < cut and time.monotonic() < stop_at:
            end = min(cut, start + window)
            span = {field: {"$gte": start, "$lt": end}}
            try:  # how many the window holds, up to one more than a batch (a read of the window, deadlined)
                held = len([d async for d in col.find(span, {"_id": 1}, limit=BATCH + 1, max_time_ms=SELECT_MS)])
            except ExecutionTimeout:
                log.warning("finding expired records took too long; trying a smaller window", collection=name,
                            window_s=window.total_seconds())
                window = max(FIRST_WINDOW, window / 8)
                continue
            if held > BATCH and window > FIRST_WINDOW:
                window = max(FIRST_WINDOW, window / 2)  # more than a batch: the same start, a smaller window
                continue
            if held:
                # the window's range, at most a batch (past windows get no new records: writers stamp now or
                # later); by range, which SecantusDB deletes at half the cost of by _id and a quarter of $in
                removed += (await col.delete_many(span)).deleted_count
            window = next_window(window, held)
            start, moved = end, True
            if held:  # where the deletes stopped, at once; past empty windows, once at the end
                await self.meta.update_one({"_id": key}, {"$max": {"to": start}}, upsert=True)
                moved = False
        if moved:
            await self.meta.update_one({"_id": key}, {"$max": {"to": start}}, upsert=True)
        self._window[name] = window
        return removed

    async def _oldest(self, target: Expiring, cut: datetime) -> datetime:
        """Where a collection's first purge starts: its oldest record's time (a read of the whole index, once)."""
        doc = await target.collection.find_one({}, {target.field: 1}, sort=[(target.field, ASCENDING)])
        value = doc.get(target.field) if doc else None
        return min(_aware(value), cut) if isinstance(value, datetime) else cut


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=UTC)
