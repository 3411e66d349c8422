"""The notifier's intake: the changes users are told of, read from the journal (:mod:`shared.db.journal`) in
order, from where the notifier stopped.

One notify process at a time reads (the lease ``notify-intake``); its place is ``meta``'s ``notify-intake``,
moved on once a batch's deliveries are written (written at most once a second while changes come, and when
they stop). A notifier killed at any moment reads those changes again when it is back: each delivery's id is
derived from the change and the recipient, so what was written before is not written twice, and nothing
committed is missed (a change can only be late). A notifier that starts on a journal it never read starts at
its newest entry; one that was away longer than the journal keeps (``PAIQ_EVENT_RETENTION_HOURS``) says how
many changes it missed and goes on from the oldest kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack

import pymongo
import structlog
from pymongo.errors import PyMongoError

from shared.db.journal import JournalEntry
from shared.db.store import Store
from shared.events import CloudEvent, parse_event
from shared.ops.vitals import Vitals

log = structlog.get_logger("paiq.notify")

LEASE = "notify-intake"
LOOP = "notify-intake"
RELEASE_SECONDS = 2.0
CURSOR_ID = "notify-intake"
LEASE_SECONDS = 10
BATCH = 256
IDLE_SECONDS = 2.0  # between two tries to lead
LOOK_SECONDS = LEASE_SECONDS / 2  # the longest the leader waits for a change its process's relay did not tell it
SAVE_SECONDS = 1.0  # its place is written at most this often, while changes come and once they stop
MAX_TRIES = 5  # an entry whose handling keeps failing (not an outage) is passed over after this many
CHANGES = frozenset({"task.started", "job.completed", "job.retrying"})


class Intake:
    def __init__(self, store: Store, handle: Callable[[CloudEvent], Awaitable[Sequence[CloudEvent]]], vitals: Vitals,
                 *, concurrency: int, instance: str | None = None) -> None:
        self.store = store
        self.vitals = vitals
        self.handle = handle
        self.instance = instance or f"notify-{uuid.uuid4().hex[:12]}"
        self.concurrency = concurrency
        self.leading = False
        self._lease_at = 0.0
        self._at: int | None = None  # its place, while it leads (read again after a lease that ran out)
        self._state_at = float("-inf")  # when it last read the journal's state (monotonic)
        self._saved = 0  # its place as last written
        self._saved_at = float("-inf")  # when (monotonic)
        self._tries: dict[str, int] = {}

    async def start(self, stack: AsyncExitStack) -> None:
        """Run the intake until ``stack`` closes, then give its lease up. Its place is made now if it has none
        (the journal's newest), so that every change after the notifier's first start is told."""
        await self.cursor()
        stack.push_async_callback(self.release)  # once the loop has stopped (last in, first out)
        self.vitals.background(stack, LOOP, self.run)

    async def release(self) -> None:
        """Another notify process may read at once (bounded: a process stopping without its database does not
        wait for it)."""
        if self.leading:
            self.leading = False
            if self.store.gone is not None:
                return  # its place as last saved: the changes since are read again by whoever leads next
            with contextlib.suppress(PyMongoError), pymongo.timeout(RELEASE_SECONDS):  # the driver's deadline
                if self._at is not None and self._saved < self._at:
                    await self._save(self._at, time.monotonic())
                await self.store.release_lease(LEASE, self.instance)

    async def run(self) -> None:
        """The loop: each batch a round of the process's vitals (a process that stops lets it end rather than
        cancel its database calls)."""
        while True:
            async with self.vitals.round(LOOP):
                try:
                    busy = await self._lead() and await self.round()
                except BaseException:
                    self._at = None  # a batch that failed half-way: read the place again
                    raise
            self.vitals.ok(LOOP)
            if not self.leading or self._at is None:
                await asyncio.sleep(IDLE_SECONDS)
            elif not busy:
                await self.store.journal.tail.wait_past(self._at, LOOK_SECONDS)

    async def _lead(self) -> bool:
        now = asyncio.get_running_loop().time()
        if not self.leading or now - self._lease_at > LEASE_SECONDS / 2:  # renewed half-way
            ran_out = not self.leading or now - self._lease_at >= LEASE_SECONDS  # another may have read meanwhile
            self.leading = await self.store.hold_lease(LEASE, self.instance, LEASE_SECONDS * 1000)
            self._lease_at = now
            if ran_out or not self.leading:
                self._at = None
        return self.leading

    async def cursor(self) -> int:
        """Where the intake stands: the last number it handled (made at the journal's newest the first time)."""
        doc = await self.store.meta.find_one({"_id": CURSOR_ID})
        if doc is not None:
            return int(doc["seq"])
        last = (await self.store.journal.state()).last
        await self.store.meta.update_one({"_id": CURSOR_ID}, {"$setOnInsert": {"seq": last}}, upsert=True)
        return int((await self.store.meta.find_one({"_id": CURSOR_ID}) or {"seq": last})["seq"])

    async def round(self) -> bool:
        """Handle the next batch; whether there was one."""
        if self._at is None:
            self._at = await self.cursor()
        cursor, through = self._at, self.store.journal.tail.last  # numbered, as this process's relay told it
        looked = time.monotonic()
        if looked - self._state_at >= LOOK_SECONDS:  # time to look (a relay's word missed: late, never lost)
            state = await self.store.journal.state()
            self._state_at = looked
            if cursor < state.first - 1:
                log.warning("the notifier was away longer than the journal keeps its events: changes after it "
                            "were not told", missed=state.first - 1 - cursor,
                            retention_setting="PAIQ_EVENT_RETENTION_HOURS")
                cursor = self._at = state.first - 1
            through = state.last
        entries = await self.store.journal.read(cursor, BATCH, through=through)
        if not entries:
            # The changes stopped: where it got to, unless written within SAVE_SECONDS (changes that come a few
            # at a time stop after each relay round; the next look, LOOK_SECONDS on, writes it then).
            if self._saved < cursor and looked - self._saved_at >= SAVE_SECONDS:
                await self._save(cursor, looked)
            return False
        await self._handle([e for e in entries if e.type in CHANGES])
        self._at = entries[-1].seq
        if looked - self._saved_at >= SAVE_SECONDS:
            await self._save(self._at, looked)
        return True

    async def _save(self, at: int, now: float) -> None:
        """Write its place: at most every SAVE_SECONDS while changes come, so that a burst costs a write a second,
        not one a batch. Killed before, the next leader handles that second's changes again, which writes no
        delivery twice (each one's id is derived from its change and recipient)."""
        await self.store.meta.update_one({"_id": CURSOR_ID}, {"$max": {"seq": at}}, upsert=True)
        self._saved, self._saved_at = at, now

    async def _handle(self, entries: list[JournalEntry]) -> None:
        """Each entry's deliveries written, ``concurrency`` at a time (their writes batched together). An
        entry that fails is tried again with the batch, up to MAX_TRIES, then passed over and said."""
        slots = asyncio.Semaphore(self.concurrency)

        async def one(entry: JournalEntry) -> BaseException | None:
            async with slots:
                try:
                    await self.handle(parse_event(entry.body))
                except Exception as e:
                    return e
                self._tries.pop(entry.id, None)
                return None

        failures = [(e, f) for e, f in zip(entries, await asyncio.gather(*(one(e) for e in entries)), strict=True)
                    if f is not None]
        for entry, error in failures:
            tries = self._tries[entry.id] = self._tries.get(entry.id, 0) + 1
            if tries >= MAX_TRIES:
                log.error("a change could not be notified; passed over", event_id=entry.id, job_id=entry.job,
                          event_type=entry.type, tries=tries, error=repr(error))
                self._tries.pop(entry.id, None)
        again = [error for entry, error in failures if self._tries.get(entry.id)]
        if again:
            raise again[0]  # the batch again, after the loop's backoff (an outage waits it out)
