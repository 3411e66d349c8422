"""What every bus implementation offers, and the router that dispatches events to typed handlers."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar

import structlog

from shared.events import CloudEvent
from shared.vitals import backoff, describe

_log = structlog.get_logger("paiq.bus")

E = TypeVar("E", bound=CloudEvent)
Handler = Callable[[E], Awaitable[Sequence[CloudEvent]]]

# How often a handler that raised is tried again before its message goes to the dead-letter exchange.
MAX_HANDLER_ATTEMPTS = 5


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


class Outages:
    """Handler failures in a row that were outages (the database or the broker away), shared by both
    buses: such a message is requeued after a backoff as often as it takes, never dead-lettered for it;
    the first failure and the recovery are logged, not each round."""

    def __init__(self) -> None:
        self.streak = 0

    async def wait(self, queue: str, event_type: str, error: Exception) -> None:
        self.streak += 1
        if self.streak == 1:
            _log.warning("handler waits out an outage; message requeued", queue=queue, event_type=event_type,
                         error=describe(error))
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
                        durable: bool = True) -> Subscription:
        """Consume ``queue`` (bound to the routing-key patterns ``bindings``) with ``router``.

        A message is acknowledged only after its handler returned and the returned events were
        published. A message that is not a valid event goes straight to the dead-letter exchange; one
        whose handler keeps raising goes there after ``MAX_HANDLER_ATTEMPTS`` tries.
        A non-durable queue belongs to this subscriber alone and vanishes with it.
        """


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
