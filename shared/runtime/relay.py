"""The journal's relay: numbers what writers stored (:mod:`shared.db.journal`), publishes it on the bus in
that order, and tells readers how far it got.

Every control-plane process runs one (submit, scheduler, status, notify; ``paiq up`` one for all; a node's
launcher none, so that a busy or stalled node never holds the journal back); the one holding the lease
``journal`` works, the others stand by and follow: they learn the last number from the leader's
``journal.numbered`` (and, should one be missed, from the journal's state at their next look). A writer
wakes its own process's relay when its transaction commits (:meth:`Relay.written`), and a relay that does not
lead passes the wake-up on to the leader with ``journal.written``; without either, the leader looks every
``IDLE_LOOK_SECONDS``.

Publishing is at least once: the leader publishes a numbered batch, then records that it did; killed in
between, the next leader publishes it again, with the same event ids. Each job's events are published in
the order of its changes (:func:`shared.db.journal.numbering_order`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Sequence
from contextlib import AsyncExitStack

import pymongo
import structlog
from pymongo.asynchronous.client_session import AsyncClientSession
from pymongo.errors import PyMongoError

from shared.bus.base import Bus, Router
from shared.db.journal import JournalEntry, JournalMovedError, JournalState, numbering_order
from shared.db.store import Store
from shared.errors import LeaseLostError
from shared.events import CloudEvent, JournalNumbered, JournalNumberedData, JournalWritten, parse_event
from shared.faults import fault_point
from shared.ops.vitals import Vitals
from shared.records import now_ms

log = structlog.get_logger("paiq.journal")

LEASE = "journal"
RELAY_LOOP = "journal-relay"
LEASE_SECONDS = 10
BATCH = 500
BUSY_LOOK_SECONDS = 0.05  # while entries keep coming
COALESCE_SECONDS = 0.02  # between two rounds that both had work
IDLE_LOOK_SECONDS = 5.0  # the longest a leader waits without a wake-up (one lost: a writer killed before it woke)
PURGE_EVERY_SECONDS = 60.0
RELEASE_SECONDS = 2.0


class Relay:
    def __init__(self, store: Store, bus: Bus, *, retention_ms: int, instance: str | None = None) -> None:
        self.store = store
        self.bus = bus
        self.tail = store.journal.tail
        self.instance = instance or f"relay-{uuid.uuid4().hex[:12]}"
        self.retention_ms = retention_ms
        self.leading = False
        self._wake = asyncio.Event()
        self._lease_until = 0.0
        self._settled = False  # while it leads: all it numbered is published (an idle look reads no state)
        self._known: JournalState | None = None  # while it leads: the journal's state as it wrote it (else read)
        self._purged = 0.0
        self._vitals: Vitals | None = None
        store.journal.listeners.append(self.written)

    # --- wake-ups ------------------------------------------------------------------------------

    def written(self) -> None:
        """A writer of this process committed journal entries."""
        self._wake.set()
        if not self.leading:
            with contextlib.suppress(RuntimeError):  # no running loop: a test's store without a relay's bus
                asyncio.get_running_loop().create_task(self._poke())

    async def _poke(self) -> None:
        with contextlib.suppress(Exception):  # a wake-up only: the leader looks by itself soon enough
            await self.bus.publish([JournalWritten()])

    async def _woken(self, evt: JournalWritten) -> Sequence[CloudEvent]:
        if self.leading:
            self._wake.set()
        return []

    async def _numbered(self, evt: JournalNumbered) -> Sequence[CloudEvent]:
        self.tail.advanced(evt.data.last)
        return []

    async def attach(self, stack: AsyncExitStack, vitals: Vitals, queue_prefix: str) -> None:
        """Listen for wake-ups (a queue of this process, gone with it) and run the relay's loop."""
        router = Router()
        router.on(JournalWritten, self._woken)
        router.on(JournalNumbered, self._numbered)
        subscription = await self.bus.subscribe(f"{queue_prefix}.journal.{self.instance}",
                                                ["journal.written", "journal.numbered"], router, durable=False)
        stack.push_async_callback(subscription.cancel)
        self._vitals = vitals
        stack.push_async_callback(self.release)  # once the loop has stopped (the stack closes last in, first out)
        vitals.background(stack, RELAY_LOOP, self.run)

    async def release(self) -> None:
        """Give the lease up, so that another process leads at once rather than when it runs out (bounded: a
        process stopping because its database is gone does not wait for it)."""
        if self.leading:
            self.leading = False
            with contextlib.suppress(PyMongoError), pymongo.timeout(RELEASE_SECONDS):  # the driver's deadline
                await self.store.release_lease(LEASE, self.instance)

    # --- the loop ------------------------------------------------------------------------------

    async def run(self) -> None:
        """The loop: a round whenever woken (or every look), each a round of the process's vitals, so that a
        process that stops lets the round in flight end rather than cancel its database calls."""
        assert self._vitals is not None
        while True:
            async with self._vitals.round(RELAY_LOOP):
                busy = await self.round()
            self._vitals.ok(RELAY_LOOP)
            if busy:  # under a burst, rounds a little apart take more each: fewer transactions for as many events
                await asyncio.sleep(COALESCE_SECONDS)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):  # asyncio.timeout: see JournalTail.wait_past
                async with asyncio.timeout(BUSY_LOOK_SECONDS if busy else IDLE_LOOK_SECONDS):
                    await self._wake.wait()

    async def round(self) -> bool:
        """One look: lead if the lease is free (or ours), then number, publish and purge; else follow. Whether
        there was work (look again soon)."""
        now = time.monotonic()
        if now >= self._lease_until - LEASE_SECONDS / 2:  # renew half-way
            if now >= self._lease_until:  # not held, or run out: another may have led meanwhile, and left
                self._settled, self._known = False, None  # numbered entries unpublished; numbers given
            held = await self.store.hold_lease(LEASE, self.instance, LEASE_SECONDS * 1000)
            if held != self.leading:
                log.info("leading the journal" if held else "another process leads the journal",
                         instance=self.instance)
            self.leading = held
            self._lease_until = now + LEASE_SECONDS if held else 0.0
        if not self.leading:
            self.tail.advanced((await self.store.journal.state()).last)
            return False
        try:
            numbered = await self._number()
        except LeaseLostError:
            self.leading, self._lease_until = False, 0.0
            return False
        except JournalMovedError:  # numbered by another meanwhile (its lease and ours overlapped): read it again
            log.warning("the journal was numbered by another process meanwhile; reading its state again",
                        instance=self.instance)
            return True
        busy = False
        if numbered is not None:
            state, batch = numbered
            self._settled = False
            published, done = await self._publish(state, batch)
            if published or batch:
                await self.bus.publish([JournalNumbered(data=JournalNumberedData(last=state.last))])
            self._settled, self._known = True, state.model_copy(update={"published": done})
            self.tail.advanced(state.last)
            busy = len(batch) > 0 or published > 0
        if self.retention_ms and now - self._purged >= PURGE_EVERY_SECONDS:
            self._purged = now
            self._known = None  # the first kept moves
            await self._purge()
        return busy

    async def _number(self) -> tuple[JournalState, list[JournalEntry]] | None:
        """Number what waits (in one transaction, fenced by the lease); the journal's state after, and the
        entries just numbered (with their bodies: published from here, not read again). None: nothing waits
        and all this leader numbered is published."""
        waiting = await self.store.journal.waiting(BATCH, bodies=True)
        if not waiting:
            return None if self._settled else (await self.store.journal.state(), [])
        ordered = numbering_order(waiting)
        # What it wrote last, while it led throughout, is not read again (in a transaction, which the journal's
        # state moved on by another fails; without transactions, read each time).
        known = self._known if await self.store.supports_transactions() else None

        async def write(session: AsyncClientSession | None) -> tuple[JournalState, int]:
            await self.store.check_lease(LEASE, self.instance, session)
            before = known if known is not None else await self.store.journal.state(session)
            return before, await self.store.journal.number(ordered, before.last, session, known=known is not None)

        # A commit that raises may still have numbered them: the next look reads the state.
        self._settled, self._known = False, None
        before, last = await self.store.atomically(write, True, journaled=False)  # numbers, not entries: none to wake
        entries = [JournalEntry.of({**d, "seq": before.last + i}) for i, d in enumerate(ordered, 1)]
        return before.model_copy(update={"last": last}), entries

    async def _publish(self, state: JournalState, batch: list[JournalEntry]) -> tuple[int, int]:
        """Publish what is numbered and not yet published, in order, a batch at a time; how many, and the last
        number published. The batch just numbered is published as it is in hand; what an earlier leader left
        unpublished is read back first."""
        done, count = state.published, 0
        if batch and done == batch[0].seq - 1:  # nothing left before it: the usual round
            await self.bus.publish([_event(e) for e in batch if not e.published])
            fault_point("journal-published")
            await self.store.journal.mark_published(batch[-1].seq)
            return len(batch), batch[-1].seq
        while done < state.last:
            entries = await self.store.journal.read(done, BATCH, through=state.last)
            if not entries:
                break
            await self.bus.publish([_event(e) for e in entries if not e.published])
            fault_point("journal-published")
            done = entries[-1].seq
            count += len(entries)
            await self.store.journal.mark_published(done)
        return count, done

    async def _purge(self) -> None:
        removed = await self.store.journal.purge(now_ms() - self.retention_ms)
        if removed:
            log.info("removed journal entries past their retention", entries=removed,
                     retention_hours=round(self.retention_ms / 3_600_000, 2))


def _event(entry: JournalEntry) -> CloudEvent:
    event: CloudEvent = parse_event(entry.body)
    return event


async def start_relay(stack: AsyncExitStack, store: Store, bus: Bus, vitals: Vitals, *, queue_prefix: str,
                      retention_hours: float) -> Relay:
    """This process's relay, running until ``stack`` closes."""
    relay = Relay(store, bus, retention_ms=int(retention_hours * 3_600_000))
    await relay.attach(stack, vitals, queue_prefix)
    return relay
