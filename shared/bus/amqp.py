"""The RabbitMQ bus (aio-pika): durable topic exchange, publisher confirms, manual acks, dead letters.

Topology, for an exchange ``paiq.events`` and queue prefix ``paiq``:
- ``paiq.events`` (topic, durable): every event, routing key = event type or ``node.<id>.<verb>``;
- ``paiq.dead`` (fanout, durable) and queue ``paiq.dead``: messages that are not valid events, or
  whose handler kept failing, kept for an operator to look at;
- one quorum queue per service (and per launcher node), dead-lettering into ``paiq.dead``: the broker
  counts each message's deliveries (``x-delivery-count``) and dead-letters it past its delivery limit,
  also when a handler kills its process, which no code in that process could count;
- a classic exclusive queue per live event-stream client (non-durable; nothing to count there but this
  process's own returns).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Sequence
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

from shared.bus.base import MAX_HANDLER_ATTEMPTS, Outages, Router, count_dead_letters_of
from shared.bus.delivery import deliver
from shared.errors import BusError
from shared.events import CloudEvent, dump_event

log = structlog.get_logger("paiq.bus")

# Set by a quorum queue on a message it delivers again: how often it was given back before.
_DELIVERY_COUNT_HEADER = "x-delivery-count"
# A publish not confirmed within this fails (BusError) instead of waiting out a broker outage.
PUBLISH_SECONDS = 10.0
# Consuming a queue (channel, declaration, bindings, consumer): past this, BusError. Seen hanging in a chaos
# run (a scheduler that led again never got its consumer); the broker's calls, unlike the database's, may
# be cancelled.
SUBSCRIBE_SECONDS = 15.0


class AmqpBus:
    def __init__(self, connection: AbstractRobustConnection, exchange: AbstractExchange, dead_exchange_name: str, *,
                 prefetch: int) -> None:
        """``exchange``: the topic exchange, declared on the channel (with publisher confirms) that
        publishes."""
        self._connection = connection
        self._exchange = exchange
        self._dead = dead_exchange_name
        self._prefetch = prefetch
        self._consume_channels: list[AbstractChannel] = []
        self._outages = Outages()
        # Returns to this process's classic (exclusive) queues, by (queue, message id): the broker counts
        # nothing there, and no other consumer can receive those messages.
        self._returns: dict[tuple[str, str], int] = {}

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
                        durable: bool = True, prefetch: int | None = None,
                        retired: Sequence[str] = ()) -> _AmqpSubscription:
        if durable:
            count_dead_letters_of(queue)
        try:
            async with asyncio.timeout(SUBSCRIBE_SECONDS):
                return await self._subscribe(queue, bindings, router, durable=durable,
                                             prefetch=prefetch or self._prefetch, retired=retired)
        except TimeoutError as e:
            raise BusError(f"consuming queue {queue} did not start within {SUBSCRIBE_SECONDS:g} s") from e

    async def _subscribe(self, queue: str, bindings: Sequence[str], router: Router, *,
                         durable: bool, prefetch: int, retired: Sequence[str] = ()) -> _AmqpSubscription:
        channel = await self._connection.channel(publisher_confirms=True)
        await channel.set_qos(prefetch_count=prefetch)  # per channel, and each subscription has its own
        self._consume_channels.append(channel)
        exchange = await channel.get_exchange(self._exchange.name, ensure=False)
        q = await self._declare(channel, queue, durable=durable)
        for key in bindings:
            await q.bind(exchange, routing_key=key)
        for key in retired:  # RabbitMQ takes the removal of a binding it does not have
            await q.unbind(exchange, routing_key=key)

        async def on_message(message: AbstractIncomingMessage) -> None:
            await self._deliver(channel, queue, router, message, counted=durable)

        tag = await q.consume(on_message, no_ack=False)
        return _AmqpSubscription(self, channel, q, tag)

    async def _declare(self, channel: AbstractChannel, queue: str, *, durable: bool) -> AbstractQueue:
        """A service's queue is a quorum queue with a delivery limit; one of the same name declared
        otherwise (the classic queues of an older paiq) is replaced when it is empty and idle, and
        otherwise named in a clear error."""
        if not durable:
            return await channel.declare_queue(queue, exclusive=True, auto_delete=True,
                                               arguments={"x-dead-letter-exchange": self._dead})
        arguments: dict[str, Any] = {"x-queue-type": "quorum", "x-delivery-limit": MAX_HANDLER_ATTEMPTS - 1,
                                     "x-dead-letter-exchange": self._dead}
        try:
            return await channel.declare_queue(queue, durable=True, arguments=arguments)
        except aio_pika.exceptions.ChannelPreconditionFailed as e:
            precondition = e  # the broker closed that channel; look at the queue on a fresh one
        await channel.reopen()
        old = await channel.declare_queue(queue, passive=True)
        messages, consumers = old.declaration_result.message_count, old.declaration_result.consumer_count
        if messages or consumers:
            raise BusError(
                f"queue {queue} exists with other arguments than paiq's (a classic queue of an older paiq?) and "
                f"holds {messages} messages for {consumers} consumers: stop every paiq service, let them "
                f"drain or move them, then `rabbitmqctl delete_queue {queue}` ({precondition})")
        await old.delete(if_unused=True, if_empty=True)
        log.warning("replaced an empty queue declared with other arguments by a quorum queue", queue=queue)
        return await channel.declare_queue(queue, durable=True, arguments=arguments)

    def _attempt(self, queue: str, message: AbstractIncomingMessage, *, counted: bool) -> int:
        """Which delivery of this message this is, from 1."""
        if counted:
            returned = (message.headers or {}).get(_DELIVERY_COUNT_HEADER, 0)
            return (returned if isinstance(returned, int) else 0) + 1
        return self._returns.get((queue, message.message_id or ""), 0) + 1

    async def _deliver(self, channel: AbstractChannel, queue: str, router: Router,
                       message: AbstractIncomingMessage, *, counted: bool) -> None:
        attempt = self._attempt(queue, message, counted=counted)
        outcome = _AmqpOutcome(channel, message, (queue, message.message_id or ""), attempt,
                               None if counted else self._returns)
        await deliver(queue, message.body, attempt, router=router, publish=self.publish, outages=self._outages,
                      outcome=outcome)

    async def close(self) -> None:
        for ch in self._consume_channels:
            await ch.close()
        await self._connection.close()

    async def _unsubscribe(self, channel: AbstractChannel) -> None:
        if channel in self._consume_channels:
            self._consume_channels.remove(channel)
            await channel.close()  # what it had not acknowledged goes back to the queue


@dataclass
class _AmqpOutcome:
    """A delivered message settled on its channel. ``returns``: this process's count of the returns of a
    classic queue's messages (None for a quorum queue's, which the broker counts)."""

    channel: AbstractChannel
    message: AbstractIncomingMessage
    key: tuple[str, str]  # (queue, message id)
    attempt: int
    returns: dict[tuple[str, str], int] | None

    async def acknowledge(self) -> None:
        self._forget()
        await _settle(self.message.ack())

    async def give_back(self) -> None:
        if self.returns is not None:
            self.returns[self.key] = self.attempt
        await _settle(self.message.nack(requeue=True))

    async def dead_letter(self) -> None:
        self._forget()
        await _settle(self.message.reject(requeue=False))

    def released(self) -> bool:
        return self.channel.is_closed  # the broker went away with the channel: it delivers the message again

    def _forget(self) -> None:
        if self.returns is not None:
            self.returns.pop(self.key, None)


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
async def open_amqp_bus(url: str, exchange: str, queue_prefix: str, *,
                        prefetch: int = 16) -> AsyncIterator[AmqpBus]:
    try:
        connection = await aio_pika.connect_robust(url)
    except Exception as e:
        raise BusError(f"cannot connect to RabbitMQ at {_redact(url)}: {e}") from e
    dead_name = f"{queue_prefix}.dead"
    try:
        channel = await connection.channel(publisher_confirms=True)
        ex = await channel.declare_exchange(exchange, aio_pika.ExchangeType.TOPIC, durable=True)
        dead = await channel.declare_exchange(dead_name, aio_pika.ExchangeType.FANOUT, durable=True)
        dead_queue = await channel.declare_queue(dead_name, durable=True)
        await dead_queue.bind(dead)
    except BaseException:  # a broker that refuses the topology, or a stop meanwhile: no connection left behind
        with contextlib.suppress(Exception):
            await connection.close()
        raise
    bus = AmqpBus(connection, ex, dead_name, prefetch=prefetch)
    try:
        yield bus
    finally:
        await bus.close()


async def _settle(outcome: Awaitable[None]) -> None:
    """Ack, nack or reject; over a channel that is gone meanwhile the broker delivers the message again."""
    try:
        await outcome
    except Exception as e:  # aio-pika raises several kinds for a closed channel
        log.info("could not settle a message; the broker delivers it again", error=repr(e))


def _redact(url: str) -> str:
    """amqp://user:secret@host/ -> amqp://user:***@host/ (never log a broker password)."""
    scheme, sep, rest = url.partition("://")
    creds, at, host = rest.rpartition("@")
    if not at or ":" not in creds:
        return url
    return f"{scheme}{sep}{creds.split(':', 1)[0]}:***@{host}"
