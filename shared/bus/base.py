"""What every bus implementation offers, and the router that dispatches events to typed handlers."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from enum import StrEnum
from typing import Any, Protocol, TypeVar

import structlog

from shared.events import CloudEvent
from shared.ops.metrics import DEAD_LETTERED
from shared.ops.vitals import backoff, describe, is_outage

_log = structlog.get_logger("paiq.bus")

E = TypeVar("E", bound=CloudEvent)
Handler = Callable[[E], Awaitable[Sequence[CloudEvent]]]

# How often a message is delivered to a handler that raises before it goes to the dead-letter exchange.
# Over RabbitMQ the broker counts (a quorum queue's delivery limit is this minus one), so a message whose
# handler kills its process, which no handler code can count, is dead-lettered too.
MAX_HANDLER_ATTEMPTS = 5


class AfterFailure(StrEnum):
    """What a bus does with a message whose handler raised."""

    HOLD = "hold"  # an outage (database or broker away): keep the message, try again in place after a backoff
    REQUEUE = "requeue"  # back to the queue at once, its delivery counted; delivered again, to any consumer
    DEAD_LETTER = "dead-letter"  # the last attempt failed: to the dead-letter exchange, for an operator


def count_dead_letters_of(queue: str) -> None:
    """Export the queue's dead-letter count from its first consumer on, at 0: Prometheus's ``increase()``
    cannot see the first dead letter of a series that appears at 1 (the PaiqMessagesDeadLettered alert)."""
    DEAD_LETTERED.labels(queue)


def after_failure(error: Exception, attempt: int) -> AfterFailure:
    """The one rule of both buses. ``attempt`` counts deliveries of this message, from 1.

    An outage is not the message's fault and never uses up its attempts; waiting in place, rather than
    requeueing, keeps it from being counted by the broker and from circling while nothing can succeed
    (every other message fails the same way). Any other failure is given straight back to the queue:
    no consumer sleeps holding a prefetch slot that the next message could use."""
    if is_outage(error):
        return AfterFailure.HOLD
    if attempt >= MAX_HANDLER_ATTEMPTS:
        return AfterFailure.DEAD_LETTER
    return AfterFailure.REQUEUE


class UnroutedEventError(Exception):
    """A queue received an event type it has no handler for (a binding without a handler)."""


class Router:
    """Maps event types to handlers. A handler returns the events to publish; the bus does the rest."""

    def __init__(self) -> None:
        self._handlers: dict[str, Callable[[Any], Awaitable[Sequence[CloudEvent]]]] = {}

    def on(self, event_type: type[E], handler: Handler[E]) -> None:
        literal = event_type.model_fields["type"].default
        self._handlers[str(literal)] = handler

    @property
    def event_types(self) -> tuple[str, ...]:
        """The event types it has handlers for: the bindings of a queue that takes just those."""
        return tuple(self._handlers)

    async def dispatch(self, event: CloudEvent) -> Sequence[CloudEvent]:
        handler = self._handlers.get(getattr(event, "type", ""))
        if handler is None:
            raise UnroutedEventError(getattr(event, "type", "?"))
        structlog.contextvars.bind_contextvars(event_id=event.id, event_type=getattr(event, "type", "?"),
                                               job_id=event.subject or None)
        try:
            return await handler(event)
        finally:
            structlog.contextvars.unbind_contextvars("event_id", "event_type", "job_id")


def said_failure(action: AfterFailure, queue: str, event_type: str, attempt: int, error: Exception) -> None:
    """The log line (and the dead-letter count) of a failed delivery given back or dead-lettered, as both
    buses say it; an outage's are :class:`Outages`'."""
    if action is AfterFailure.DEAD_LETTER:
        _log.error("handler kept failing; message dead-lettered", queue=queue, event_type=event_type,
                   attempts=attempt, error=repr(error))
        DEAD_LETTERED.labels(queue).inc()
    elif action is AfterFailure.REQUEUE:
        _log.warning("handler failed; message given back to the queue", queue=queue, event_type=event_type,
                     attempt=attempt, error=repr(error))


class Outages:
    """Handler failures in a row that were outages (the database or the broker away), shared by both
    buses: such a message is held and tried again after a backoff as often as it takes, never
    dead-lettered for it; the first failure and the recovery are logged, not each round."""

    def __init__(self) -> None:
        self.streak = 0

    async def wait(self, queue: str, event_type: str, error: Exception) -> None:
        self.streak += 1
        if self.streak == 1:
            _log.warning("handler waits out an outage; its message is held and tried again", queue=queue,
                         event_type=event_type, error=describe(error))
        await asyncio.sleep(backoff(self.streak))

    def handled(self, queue: str) -> None:
        if self.streak:
            _log.info("handlers work again after an outage", queue=queue, failures=self.streak)
            self.streak = 0


class Subscription(Protocol):
    async def cancel(self) -> None:
        """Stop consuming; messages not yet handled stay in the queue for the next consumer."""


class Bus(Protocol):
    async def check(self) -> None:
        """Raise :class:`shared.errors.BusError` while events can be neither published nor consumed."""

    async def publish(self, events: Sequence[CloudEvent]) -> None:
        """Publish events durably (returns once the broker confirmed every one)."""

    async def subscribe(self, queue: str, bindings: Sequence[str], router: Router, *,
                        durable: bool = True, prefetch: int | None = None, retired: Sequence[str] = ()) -> Subscription:
        """Consume ``queue`` (bound to the routing-key patterns ``bindings``, and no longer to ``retired``: what
        an older paiq bound it to) with ``router``, at most ``prefetch`` messages in hand at once (None: the
        bus's own prefetch).

        A message is acknowledged only after its handler returned and the returned events were
        published. A message that is not a valid event goes straight to the dead-letter exchange; one
        whose handler raises is dealt with by :func:`after_failure`: held through an outage, else given
        back to the queue at once and dead-lettered after ``MAX_HANDLER_ATTEMPTS`` deliveries.
        A non-durable queue belongs to this subscriber alone and vanishes with it.
        """


async def consume(stack: AsyncExitStack, bus: Bus, queue: str, bindings: Sequence[str], router: Router, *,
                  prefetch: int | None = None, retired: Sequence[str] = ()) -> None:
    """Consume ``queue`` (:meth:`Bus.subscribe`) while ``stack`` is open: the subscription is cancelled when it
    closes, before what was entered on it earlier, so that a service stopped in process takes no more messages
    (and one started again on the same bus takes its queue over)."""
    subscription = await bus.subscribe(queue, bindings, router, prefetch=prefetch, retired=retired)
    stack.push_async_callback(subscription.cancel)


def topic_matches(pattern: str, key: str) -> bool:
    """AMQP topic matching: ``*`` is exactly one word, ``#`` zero or more words."""
    return _match(pattern.split("."), key.split("."))


def _match(pat: list[str], words: list[str]) -> bool:
    if not pat:
        return not words
    head, rest = pat[0], pat[1:]
    if head == "#":
        return any(_match(rest, words[i:]) for i in range(len(words) + 1))
    if not words:
        return False
    return (head in {"*", words[0]}) and _match(rest, words[1:])
