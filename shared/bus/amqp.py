"""The RabbitMQ bus (aio-pika): durable topic exchange, publisher confirms, manual acks, dead letters.

Topology, for an exchange ``paiq.events`` and queue prefix ``paiq``:
- ``paiq.events`` (topic, durable): every event, routing key = event type or ``node.<id>.<verb>``;
- ``paiq.dead`` (fanout, durable) and queue ``paiq.dead``: messages that are not valid events, or
  whose handler kept failing, kept for an operator to look at;
- one durable queue per service, dead-lettering into ``paiq.dead``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aio_pika
import structlog
from aio_pika.abc import (
    AbstractChannel,
    AbstractExchange,
    AbstractIncomingMessage,
    AbstractQueue,
    AbstractRobustConnection,
)
from pydantic import ValidationError

from shared.bus.base import MAX_HANDLER_ATTEMPTS, Outages, Router
from shared.errors import BusError
from shared.events import CloudEvent, dump_event, parse_event
from shared.metrics import DEAD_LETTERED, EVENTS_HANDLED
from shared.vitals import is_outage

log = structlog.get_logger("paiq.bus")

_ATTEMPT_HEADER = "x-paiq-attempt"
# A publish not confirmed within this fails (BusError) instead of waiting out a broker outage.
PUBLISH_SECONDS = 10.0


class AmqpBus:
    def __init__(self, connection: AbstractRobustConnection, publish_channel: AbstractChannel,
                 exchange: AbstractExchange, dead_exchange_name: str, *, prefetch: int,
                 retry_delay: float) -> None:
        self._connection = connection
        self._publish_channel = publish_channel
        self._exchange = exchange
        self._dead = dead_exchange_name
        self._prefetch = prefetch
        self._retry_delay = retry_delay
        self._consume_channels: list[AbstractChannel] = []
        self._outages = Outages()

    async def publish(self, events: Sequence[CloudEvent]) -> None:
        """Publish and await every confirm. Events of one job (subject) go out one after another, in
        order; different jobs' events are confirmed concurrently."""
        by_subject: dict[str, list[CloudEvent]] = {}
        for event in events:
            by_subject.setdefault(event.subject, []).append(event)

        async def in_order(group: list[CloudEvent]) -> None:
            for event in group:
                await self._publish_raw(self._exchange, dump_event(event), event, event.routing_key, {})

        await asyncio.gather(*(in_order(group) for group in by_subject.values()))

    async def _publish_raw(self, exchange: AbstractExchange, body: bytes, event: CloudEvent | None,
                           routing_key: str, headers: dict[str, Any]) -> None:
        message = aio_pika.Message(
            body,
            delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
            content_type="application/cloudevents+json",
            message_id=event.id if event else None,
            type=getattr(event, "type", None) if event else None,
            headers=headers,
        )
        try:
            await exchange.publish(message, routing_key=routing_key, timeout=PUBLISH_SECONDS)
        except Exception as e:  # aio-pika raises several kinds for a nack or a lost channel
            raise BusError(f"publishing {routing_key} was not confirmed: {e!r}") from e

    async def check(self) -> None:
        """Connected, and every consuming channel open (aio-pika's robust connection restores them after a
        broker restart: queues, bindings, prefetch and consumers)."""
        if not self._connection.connected.is_set():
            raise BusError("not connected to RabbitMQ; reconnecting")
        closed = sum(1 for ch in self._consume_channels if ch.is_closed)
        if closed:
            raise BusError(f"{closed} of {len(self._consume_channels)} consuming channels are closed")

    async def subscribe(self, queue: str, bindings: Sequence[str], router: Router, *,
                        durable: bool = True) -> _AmqpSubscription:
        channel = await self._connection.channel(publisher_confirms=True)
        await channel.set_qos(prefetch_count=self._prefetch)
        self._consume_channels.append(channel)
        exchange = await channel.get_exchange(self._exchange.name, ensure=False)
        q = await channel.declare_queue(
            queue,
            durable=durable,
            exclusive=not durable,
            auto_delete=not durable,
            arguments={"x-dead-letter-exchange": self._dead},
        )
        for key in bindings:
            await q.bind(exchange, routing_key=key)

        async def on_message(message: AbstractIncomingMessage) -> None:
            await self._deliver(channel, queue, router, message)

        tag = await q.consume(on_message, no_ack=False)
        return _AmqpSubscription(self, channel, q, tag)

    async def _deliver(self, channel: AbstractChannel, queue: str, router: Router,
                       message: AbstractIncomingMessage) -> None:
        try:
            event = parse_event(message.body)
        except ValidationError as e:
            log.error("dead-lettered a message that is not a valid event", queue=queue, error=str(e))
            DEAD_LETTERED.labels(queue).inc()
            await message.reject(requeue=False)
            return
        raw_attempt = (message.headers or {}).get(_ATTEMPT_HEADER, 1)
        attempt = raw_attempt if isinstance(raw_attempt, int) else 1
        try:
            replies = await router.dispatch(event)
            await self.publish(replies)
            EVENTS_HANDLED.labels(queue, event.routing_key, "ok").inc()
            self._outages.handled(queue)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # any handler failure is retried, then dead-lettered
            EVENTS_HANDLED.labels(queue, event.routing_key, "failed").inc()
            if is_outage(e):
                # The database or the broker is away: not the message's fault, so it is never dead-lettered
                # for it. Back to the queue after a pause (the same attempt; over a lost channel the broker
                # redelivers it anyway).
                await self._outages.wait(queue, event.routing_key, e)
                with contextlib.suppress(Exception):
                    await message.nack(requeue=True)
                return
            if attempt >= MAX_HANDLER_ATTEMPTS:
                log.error("handler kept failing; message dead-lettered", queue=queue,
                          event_type=event.routing_key, attempts=attempt, error=repr(e))
                await message.reject(requeue=False)
                DEAD_LETTERED.labels(queue).inc()
                return
            log.warning("handler failed; will retry", queue=queue, event_type=event.routing_key,
                        attempt=attempt, error=repr(e))
            await asyncio.sleep(self._retry_delay * attempt)
            # Re-queue at the back with the attempt counted (a plain nack would loop without a count).
            await self._publish_raw(channel.default_exchange, message.body, event, queue,
                                    {_ATTEMPT_HEADER: attempt + 1})
            await message.ack()
            return
        await message.ack()

    async def close(self) -> None:
        for ch in self._consume_channels:
            await ch.close()
        await self._connection.close()

    async def _unsubscribe(self, channel: AbstractChannel) -> None:
        if channel in self._consume_channels:
            self._consume_channels.remove(channel)
            await channel.close()  # what it had not acknowledged goes back to the queue


@dataclass
class _AmqpSubscription:
    bus: AmqpBus
    channel: AbstractChannel
    queue: AbstractQueue
    tag: str

    async def cancel(self) -> None:
        with contextlib.suppress(Exception):  # the broker may be away: closing the channel is what counts
            await self.queue.cancel(self.tag)
        await self.bus._unsubscribe(self.channel)


@asynccontextmanager
async def open_amqp_bus(url: str, exchange: str, queue_prefix: str, *, prefetch: int = 16,
                        retry_delay: float = 0.5) -> AsyncIterator[AmqpBus]:
    try:
        connection = await aio_pika.connect_robust(url)
    except Exception as e:
        raise BusError(f"cannot connect to RabbitMQ at {_redact(url)}: {e}") from e
    channel = await connection.channel(publisher_confirms=True)
    ex = await channel.declare_exchange(exchange, aio_pika.ExchangeType.TOPIC, durable=True)
    dead_name = f"{queue_prefix}.dead"
    dead = await channel.declare_exchange(dead_name, aio_pika.ExchangeType.FANOUT, durable=True)
    dead_queue = await channel.declare_queue(dead_name, durable=True)
    await dead_queue.bind(dead)
    bus = AmqpBus(connection, channel, ex, dead_name, prefetch=prefetch, retry_delay=retry_delay)
    try:
        yield bus
    finally:
        await bus.close()


def _redact(url: str) -> str:
    """amqp://user:secret@host/ -> amqp://user:***@host/ (never log a broker password)."""
    scheme, sep, rest = url.partition("://")
    creds, at, host = rest.rpartition("@")
    if not at or ":" not in creds:
        return url
    return f"{scheme}{sep}{creds.split(':', 1)[0]}:***@{host}"
