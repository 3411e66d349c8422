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

import structlog
from pydantic import ValidationError

from shared.bus.base import AfterFailure, Outages, Router, after_failure, said_failure, topic_matches
from shared.events import CloudEvent, dump_event, parse_event
from shared.runtime.metrics import DEAD_LETTERED, EVENTS_HANDLED

log = structlog.get_logger("paiq.bus")


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
                        durable: bool = True) -> _MemorySubscription:
        """A queue consumed again (after :meth:`_MemorySubscription.cancel`) keeps what arrived meanwhile."""
        q = self._queues.get(queue)
        if q is None or q.consumer is not None:
            q = self._queues[queue] = _Queue(queue, tuple(bindings), router)
        q.router = router
        q.consumer = asyncio.create_task(self._consume(q), name=f"bus:{queue}")
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

    async def _consume(self, q: _Queue) -> None:
        slots = asyncio.Semaphore(self._prefetch)
        while True:
            body, attempt = await q.inbox.get()
            await slots.acquire()
            task = asyncio.create_task(self._deliver(q, body, attempt))
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)
            task.add_done_callback(lambda _: slots.release())
            task.add_done_callback(lambda _: self._progress.set())

    async def _deliver(self, q: _Queue, body: bytes, attempt: int) -> None:
        try:
            event = parse_event(body)
        except ValidationError as e:
            log.error("dead-lettered a message that is not a valid event", queue=q.name, error=str(e))
            DEAD_LETTERED.labels(q.name).inc()
            self.dead_letters.append(body)
            return
        while True:
            try:
                replies = await q.router.dispatch(event)
                await self.publish(replies)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                EVENTS_HANDLED.labels(q.name, event.routing_key, "failed").inc()
                action = after_failure(e, attempt)
                if action is AfterFailure.HOLD:
                    await self._outages.wait(q.name, event.routing_key, e)
                    if q.consumer is None:  # unsubscribed meanwhile: the next consumer gets it
                        q.inbox.put_nowait((body, attempt))
                        return
                    continue
                said_failure(action, q.name, event.routing_key, attempt, e)
                if action is AfterFailure.DEAD_LETTER:
                    self.dead_letters.append(body)
                    return
                q.inbox.put_nowait((body, attempt + 1))
                return
            EVENTS_HANDLED.labels(q.name, event.routing_key, "ok").inc()
            self._outages.handled(q.name)
            return
