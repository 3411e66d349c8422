"""An in-process bus with the broker's semantics: topic routing, at-least-once, counted redeliveries,
dead letters (the rule of both buses: :func:`shared.bus.base.after_failure`).

Messages travel as JSON bytes, exactly as over RabbitMQ, so a handler never shares objects with the
publisher and an invalid message is caught the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from shared.bus.base import Outages, Router, count_dead_letters_of, topic_matches
from shared.bus.delivery import deliver
from shared.events import CloudEvent, dump_event


@dataclass
class _Queue:
    name: str
    bindings: tuple[str, ...]
    router: Router
    inbox: asyncio.Queue[tuple[bytes, int]] = field(default_factory=asyncio.Queue)
    consumer: asyncio.Task[None] | None = None


@dataclass
class _MemorySubscription:
    queue: _Queue

    async def cancel(self) -> None:
        consumer, self.queue.consumer = self.queue.consumer, None
        if consumer is not None:
            consumer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await consumer


class MemoryBus:
    def __init__(self, *, prefetch: int = 16) -> None:
        self._queues: dict[str, _Queue] = {}
        self._prefetch = prefetch
        self._inflight: set[asyncio.Task[None]] = set()
        self._progress = asyncio.Event()  # a delivery ended (see drained)
        self.dead_letters: list[bytes] = []
        self._outages = Outages()

    async def publish(self, events: Sequence[CloudEvent]) -> None:
        for event in events:
            body = dump_event(event)
            for q in self._queues.values():
                if any(topic_matches(b, event.routing_key) for b in q.bindings):
                    q.inbox.put_nowait((body, 1))

    async def check(self) -> None:
        """In-process: always usable."""

    async def subscribe(self, queue: str, bindings: Sequence[str], router: Router, *,
                        durable: bool = True, prefetch: int | None = None,
                        retired: Sequence[str] = ()) -> _MemorySubscription:
        """A queue consumed again (after :meth:`_MemorySubscription.cancel`) keeps what arrived meanwhile."""
        if durable:
            count_dead_letters_of(queue)
        q = self._queues.get(queue)
        if q is None or q.consumer is not None:
            q = self._queues[queue] = _Queue(queue, tuple(bindings), router)
        q.router = router
        q.consumer = asyncio.create_task(self._consume(q, prefetch or self._prefetch), name=f"bus:{queue}")
        return _MemorySubscription(q)

    async def drained(self, limit_s: float = 30) -> None:
        """Return once every message published so far to a consumed queue has been handled (or
        dead-lettered): each such inbox empty and no delivery in flight. What a test waits for before it
        checks that something did *not* happen: the consumers had every chance to act."""
        async with asyncio.timeout(limit_s):
            while True:
                self._progress.clear()
                if not self._inflight and all(q.consumer is None or q.inbox.empty() for q in self._queues.values()):
                    return
                await self._progress.wait()  # set whenever a delivery ends

    async def close(self) -> None:
        for q in self._queues.values():
            if q.consumer:
                q.consumer.cancel()
        for t in list(self._inflight):
            t.cancel()
        for q in self._queues.values():
            if q.consumer:
                with contextlib.suppress(asyncio.CancelledError):
                    await q.consumer
        self._queues.clear()

    async def _consume(self, q: _Queue, prefetch: int) -> None:
        slots = asyncio.Semaphore(prefetch)
        while True:
            body, attempt = await q.inbox.get()
            await slots.acquire()
            task = asyncio.create_task(self._deliver(q, body, attempt))
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)
            task.add_done_callback(lambda _: slots.release())
            task.add_done_callback(lambda _: self._progress.set())

    async def _deliver(self, q: _Queue, body: bytes, attempt: int) -> None:
        await deliver(q.name, body, attempt, router=q.router, publish=self.publish, outages=self._outages,
                      outcome=_MemoryOutcome(q, body, attempt, self.dead_letters))


@dataclass
class _MemoryOutcome:
    """A delivered message settled in process: given back to its queue's inbox, or to the dead letters."""

    queue: _Queue
    body: bytes
    attempt: int
    dead_letters: list[bytes]

    async def acknowledge(self) -> None:
        """Nothing to do: the message was taken from the inbox when it was delivered."""

    async def give_back(self) -> None:
        self.queue.inbox.put_nowait((self.body, self.attempt + 1))

    async def dead_letter(self) -> None:
        self.dead_letters.append(self.body)

    def released(self) -> bool:
        if self.queue.consumer is not None:
            return False
        self.queue.inbox.put_nowait((self.body, self.attempt))  # unsubscribed meanwhile: the next consumer gets it
        return True
