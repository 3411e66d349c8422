"""Records that expire (sessions, idempotency records, notification deliveries, rate windows), removed by
paiq a window of time at a time (issue 37).

Not by the server's TTL indexes: SecantusDB's TTL monitor decodes every document of every collection that has
one, under its global lock, every 60 s, so its cost grew with what is kept (a week of deliveries, a day of
idempotency records) and the API waited behind it. Here each call deletes a closed range of the expiry
index, ``[from, to)``, from where the last call stopped (kept in ``meta``) towards now, a window at a time:
the window grows while windows hold few records and shrinks when one held many, so a call's cost stays near
:data:`BATCH` records whatever the backlog, and each delete runs under a deadline the server keeps
(``maxTimeMS``), so a call the client gave up on is not left running while the next one starts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pymongo
import structlog
from pymongo import ASCENDING
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import PyMongoError

from shared.records import now_ms

Doc = dict[str, object]
BATCH = 500  # about how many records one window should hold
FIRST_WINDOW = timedelta(seconds=1)
MAX_WINDOW = timedelta(hours=6)
WINDOWS_PER_CALL = 32
CALL_SECONDS = 10.0  # each delete's deadline, kept by the server
# Where a collection's purge starts the first time: its records older than this went by the TTL index it had
# until now (the server ran that every minute), or never existed.
FIRST_LOOK_BACK = timedelta(hours=1)
INDEX_NAME = "expiry"
log = structlog.get_logger("paiq.expiry")


@dataclass(frozen=True)
class Expiring:
    """A collection whose records go ``keep`` after the time in ``field`` (a date; ``keep`` zero: the field
    is the expiry itself)."""

    collection: AsyncCollection[Doc]
    field: str
    keep: timedelta = timedelta(0)


def next_window(window: timedelta, removed: int) -> timedelta:
    """The next window's span after one of ``window`` removed ``removed`` records (pure)."""
    if removed > BATCH:
        return max(FIRST_WINDOW, window / 2)
    if removed < BATCH // 4:
        return min(MAX_WINDOW, window * 2)
    return window


async def ensure_expiry_index(target: Expiring) -> None:
    """A plain index on the expiry field, named :data:`INDEX_NAME`; a TTL index on it (an older paiq's) goes."""
    col = target.collection
    for name, info in (await col.index_information()).items():
        if info.get("key") == [(target.field, ASCENDING)] and name != INDEX_NAME:
            await col.drop_index(name)
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
        """Remove the records expired by ``at_ms`` (now), up to :data:`WINDOWS_PER_CALL` windows a collection;
        how many went."""
        now = datetime.fromtimestamp((now_ms() if at_ms is None else at_ms) / 1000, UTC)
        removed = 0
        for target in self.targets:
            removed += await self._purge(target, now)
        return removed

    async def _purge(self, target: Expiring, now: datetime) -> int:
        name = target.collection.name
        key = f"expiry:{name}"
        cut = now - target.keep  # records whose field is before this have expired
        position = await self.meta.find_one({"_id": key})
        kept = position.get("to") if position else None
        start = _aware(kept) if isinstance(kept, datetime) else cut - FIRST_LOOK_BACK
        window = self._window.get(name, FIRST_WINDOW)
        removed = 0
        for _ in range(WINDOWS_PER_CALL):
            if start >= cut:
                break
            end = min(cut, start + window)
            try:
                with pymongo.timeout(CALL_SECONDS):
                    result = await target.collection.delete_many({target.field: {"$gte": start, "$lt": end}})
            except PyMongoError as e:
                if not e.timeout:
                    raise
                # Too much in one window (what it removed stays removed): a smaller one next time.
                log.warning("a purge of expired records ran out of time; the next tries a smaller window",
                            collection=name, window_s=window.total_seconds())
                window = max(FIRST_WINDOW, window / 8)
                break
            removed += result.deleted_count
            window = next_window(window, result.deleted_count)
            start = end
            await self.meta.update_one({"_id": key}, {"$max": {"to": start}}, upsert=True)
        self._window[name] = window
        return removed


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=UTC)
