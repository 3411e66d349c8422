"""One message delivered to its handler, as both buses do it: parse, dispatch, publish the replies, then
settle by the one rule (:func:`shared.bus.base.after_failure`). What settling means is each bus's own: an
:class:`Outcome`."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

import structlog
from pydantic import ValidationError

from shared.bus.base import AfterFailure, Outages, Router, after_failure, said_failure
from shared.events import CloudEvent, parse_event
from shared.ops.metrics import DEAD_LETTERED, EVENTS_HANDLED

_log = structlog.get_logger("paiq.bus")

Publish = Callable[[Sequence[CloudEvent]], Awaitable[None]]


class Outcome(Protocol):
    """How a bus settles one message it delivered."""

    async def acknowledge(self) -> None:
        """The handler returned and its replies were published: the message is done."""

    async def give_back(self) -> None:
        """The handler failed (not an outage) before its last attempt: back to the queue, counted."""

    async def dead_letter(self) -> None:
        """Not a valid event, or its last attempt failed: to the dead letters."""

    def released(self) -> bool:
        """After an outage's wait: whether the consumer went away meanwhile (then the message is left to
        the next one: the broker delivers it again, or the bus puts it back); else it is tried again."""


async def deliver(queue: str, body: bytes, attempt: int, *, router: Router, publish: Publish, outages: Outages,
                  outcome: Outcome) -> None:
    """Deliver ``body`` (its ``attempt``-th delivery, from 1) to ``router`` and settle it by ``outcome``."""
    try:
        event = parse_event(body)
    except ValidationError as e:
        _log.error("dead-lettered a message that is not a valid event", queue=queue, error=str(e))
        DEAD_LETTERED.labels(queue).inc()
        await outcome.dead_letter()
        return
    while True:
        try:
            await publish(await router.dispatch(event))
        except asyncio.CancelledError:
            raise
        except Exception as e:
            EVENTS_HANDLED.labels(queue, event.routing_key, "failed").inc()
            action = after_failure(e, attempt)
            if action is AfterFailure.HOLD:
                await outages.wait(queue, event.routing_key, e)
                if outcome.released():
                    return
                continue
            said_failure(action, queue, event.routing_key, attempt, e)
            await (outcome.dead_letter() if action is AfterFailure.DEAD_LETTER else outcome.give_back())
            return
        EVENTS_HANDLED.labels(queue, event.routing_key, "ok").inc()
        outages.handled(queue)
        await outcome.acknowledge()
        return
