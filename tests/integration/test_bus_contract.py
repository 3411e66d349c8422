"""One contract, two buses: the in-process bus and RabbitMQ must behave the same to a handler."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

import aio_pika
import pytest
from aio_pika.abc import AbstractChannel
from pymongo.errors import ServerSelectionTimeoutError

from shared.bus.amqp import open_amqp_bus
from shared.bus.base import MAX_HANDLER_ATTEMPTS, Bus, Router
from shared.bus.memory import MemoryBus
from shared.errors import BusError, StoreError
from shared.events import (
    CloudEvent,
    JobSubmitted,
    JobSubmittedData,
    LaunchTasks,
    LaunchTasksData,
    NodeRegistered,
    NodeRegisteredData,
)
from shared.ops import vitals
from tests.infra import rabbitmqctl, unique

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


class Contract:
    def __init__(self, bus: Bus, prefix: str, dead: Callable[[], Awaitable[list[bytes]]]) -> None:
        self.bus = bus
        self.prefix = prefix
        self.dead_letters = dead


@pytest.fixture(params=["memory", "rabbitmq"])
async def contract(request: pytest.FixtureRequest, amqp_url: str) -> AsyncIterator[Contract]:
    prefix = unique("contract-")
    if request.param == "memory":
        bus = MemoryBus()

        async def memory_dead() -> list[bytes]:
            return list(bus.dead_letters)

        yield Contract(bus, prefix, memory_dead)
        await bus.close()
        return
    async with open_amqp_bus(amqp_url, f"{prefix}.events", prefix) as amqp:
        connection = await aio_pika.connect_robust(amqp_url)
        channel = await connection.channel()

        async def rabbit_dead() -> list[bytes]:
            queue = await channel.declare_queue(f"{prefix}.dead", durable=True, passive=True)
            out = []
            while (msg := await queue.get(no_ack=True, fail=False)) is not None:
                out.append(msg.body)
            return out

        yield Contract(amqp, prefix, rabbit_dead)
        await remove_topology(channel, prefix, ("a", "b", "node", "dead", "poison"))
        await connection.close()


async def remove_topology(channel: AbstractChannel, prefix: str, queues: Sequence[str]) -> None:
    """Delete what a test's bus declared on the shared broker: its queues and both exchanges."""
    for name in queues:
        await channel.queue_delete(f"{prefix}.{name}")
    for exchange in ("events", "dead"):
        await channel.exchange_delete(f"{prefix}.{exchange}")


def submitted(job: str) -> JobSubmitted:
    return JobSubmitted(subject=job, data=JobSubmittedData(job_id=job, user="u", virtual_cluster="default"))


async def eventually(check: Callable[[], Awaitable[bool]], limit_s: float = 10) -> None:
    deadline = asyncio.get_running_loop().time() + limit_s
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)


async def test_events_reach_every_bound_queue_and_replies_are_published(contract: Contract) -> None:
    seen_a: list[str] = []
    seen_b: list[str] = []

    async def on_submitted(evt: JobSubmitted) -> Sequence[CloudEvent]:
        seen_a.append(evt.data.job_id)
        return [NodeRegistered(data=NodeRegisteredData(node_id=f"for-{evt.data.job_id}"))]

    async def on_node(evt: NodeRegistered) -> Sequence[CloudEvent]:
        seen_b.append(evt.data.node_id)
        return []

    ra, rb = Router(), Router()
    ra.on(JobSubmitted, on_submitted)
    rb.on(NodeRegistered, on_node)
    await contract.bus.subscribe(f"{contract.prefix}.a", ["job.*"], ra)
    await contract.bus.subscribe(f"{contract.prefix}.b", ["node.registered"], rb)
    await contract.bus.publish([submitted("j1"), submitted("j2")])

    async def done() -> bool:
        return sorted(seen_b) == ["for-j1", "for-j2"]

    await eventually(done)
    assert sorted(seen_a) == ["j1", "j2"]


async def test_node_commands_reach_only_that_node(contract: Contract) -> None:
    got: list[tuple[str, str]] = []

    async def on_launch(evt: LaunchTasks) -> Sequence[CloudEvent]:
        got.append((evt.data.node_id, evt.data.job_id))
        return []

    router = Router()
    router.on(LaunchTasks, on_launch)
    await contract.bus.subscribe(f"{contract.prefix}.node", ["node.n1.#"], router)
    await contract.bus.publish([
        LaunchTasks(data=LaunchTasksData(job_id="j", attempt=0, node_id=n, tasks=())) for n in ("n2", "n1", "n3")])
    # n1's second command, published after the others: once it arrived, they would have too
    await contract.bus.publish([LaunchTasks(data=LaunchTasksData(job_id="later", attempt=0, node_id="n1", tasks=()))])

    async def arrived() -> bool:
        return ("n1", "later") in got

    await eventually(arrived)
    assert sorted(got) == [("n1", "j"), ("n1", "later")]


class Anchor:
    """A second event type on the same queue, handled after the ones under test: once it is handled, the
    consumer had every chance to deliver the first message again, so "no more deliveries" is a fact."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def on_node(self, evt: NodeRegistered) -> Sequence[CloudEvent]:
        self.seen.append(evt.data.node_id)
        return []

    async def drop(self, contract: Contract) -> None:
        await contract.bus.publish([NodeRegistered(data=NodeRegisteredData(node_id="anchor"))])

        async def handled() -> bool:
            return self.seen == ["anchor"]

        await eventually(handled)


async def test_a_failing_handler_is_retried_then_succeeds(contract: Contract) -> None:
    calls: list[int] = []
    anchor = Anchor()

    async def flaky(evt: JobSubmitted) -> Sequence[CloudEvent]:
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError("transient")
        return []

    router = Router()
    router.on(JobSubmitted, flaky)
    router.on(NodeRegistered, anchor.on_node)
    await contract.bus.subscribe(f"{contract.prefix}.a", ["job.submitted", "node.registered"], router)
    await contract.bus.publish([submitted("j")])

    async def three() -> bool:
        return len(calls) == 3

    await eventually(three)
    await anchor.drop(contract)
    assert len(calls) == 3, "handled once it succeeded, never again"
    assert await contract.dead_letters() == []


async def test_a_handler_that_keeps_failing_is_dead_lettered_without_waiting(contract: Contract) -> None:
    """Every failure gives the message straight back (no consumer sleeps holding a prefetch slot): its
    MAX_HANDLER_ATTEMPTS deliveries take well under a second, then it is dead-lettered, and a message
    behind it is handled meanwhile."""
    calls: list[float] = []
    anchor = Anchor()
    loop = asyncio.get_running_loop()

    async def broken(evt: JobSubmitted) -> Sequence[CloudEvent]:
        calls.append(loop.time())
        raise RuntimeError("permanent")

    router = Router()
    router.on(JobSubmitted, broken)
    router.on(NodeRegistered, anchor.on_node)
    await contract.bus.subscribe(f"{contract.prefix}.a", ["job.submitted", "node.registered"], router)
    await contract.bus.publish([submitted("poison-job")])
    dead: list[bytes] = []

    async def dead_lettered() -> bool:
        dead.extend(await contract.dead_letters())
        return len(dead) == 1

    await eventually(dead_lettered)
    await anchor.drop(contract)
    assert len(calls) == MAX_HANDLER_ATTEMPTS, "delivered exactly MAX_HANDLER_ATTEMPTS times"
    assert calls[-1] - calls[0] < 1.0, f"redeliveries waited: {calls[-1] - calls[0]:.2f}s"
    assert b"poison-job" in dead[0]


async def test_a_handler_failing_on_an_outage_is_never_dead_lettered(contract: Contract,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The database away is not the message's fault: it is tried again past MAX_HANDLER_ATTEMPTS, and
    handled once the database answers."""
    monkeypatch.setattr(vitals, "RETRY_MAX_SECONDS", 0.2)
    calls: list[int] = []
    outage_rounds = MAX_HANDLER_ATTEMPTS + 2

    async def database_away(evt: JobSubmitted) -> Sequence[CloudEvent]:
        calls.append(1)
        if len(calls) <= outage_rounds:
            raise StoreError("updating job j failed") from ServerSelectionTimeoutError("no servers")
        return []

    anchor = Anchor()
    router = Router()
    router.on(JobSubmitted, database_away)
    router.on(NodeRegistered, anchor.on_node)
    await contract.bus.subscribe(f"{contract.prefix}.a", ["job.submitted", "node.registered"], router)
    await contract.bus.publish([submitted("outage-job")])

    async def handled() -> bool:
        return len(calls) == outage_rounds + 1

    await eventually(handled, limit_s=30)
    await anchor.drop(contract)
    assert len(calls) == outage_rounds + 1
    assert await contract.dead_letters() == []


async def test_a_cancelled_subscription_leaves_messages_for_the_next_consumer(contract: Contract) -> None:
    """What a scheduler that lost its lease does: stop consuming; its queue keeps what arrives meanwhile."""
    got: list[str] = []

    async def take(evt: JobSubmitted) -> Sequence[CloudEvent]:
        got.append(evt.data.job_id)
        return []

    witnessed: list[str] = []

    async def witness(evt: JobSubmitted) -> Sequence[CloudEvent]:
        witnessed.append(evt.data.job_id)
        return []

    router, witness_router = Router(), Router()
    router.on(JobSubmitted, take)
    witness_router.on(JobSubmitted, witness)
    queue = f"{contract.prefix}.a"
    subscription = await contract.bus.subscribe(queue, ["job.submitted"], router)
    await contract.bus.subscribe(f"{contract.prefix}.b", ["job.submitted"], witness_router)
    await contract.bus.publish([submitted("first")])

    async def first() -> bool:
        return got == ["first"] and witnessed == ["first"]

    await eventually(first)
    await subscription.cancel()
    await contract.bus.publish([submitted("while-away")])

    async def routed() -> bool:  # the same message reached the other queue's consumer: it was in ours too
        return witnessed == ["first", "while-away"]

    await eventually(routed)
    assert got == ["first"], "a cancelled subscription consumed"
    await contract.bus.subscribe(queue, ["job.submitted"], router)

    async def both() -> bool:
        return got == ["first", "while-away"]

    await eventually(both)


async def test_rabbitmq_dead_letters_a_message_that_is_not_an_event(amqp_url: str) -> None:
    prefix = unique("garbage-")
    handled: list[str] = []

    async def on_submitted(evt: JobSubmitted) -> Sequence[CloudEvent]:
        handled.append(evt.data.job_id)
        return []

    router = Router()
    router.on(JobSubmitted, on_submitted)
    async with open_amqp_bus(amqp_url, f"{prefix}.events", prefix) as bus:
        await bus.subscribe(f"{prefix}.a", ["job.submitted"], router)
        connection = await aio_pika.connect_robust(amqp_url)
        channel = await connection.channel()
        exchange = await channel.get_exchange(f"{prefix}.events")
        await exchange.publish(aio_pika.Message(b'{"type": "job.submitted", "data": 42}'), routing_key="job.submitted")
        await bus.publish([submitted("after-garbage")])
        dead_queue = await channel.declare_queue(f"{prefix}.dead", durable=True, passive=True)
        dead: list[bytes] = []

        async def dead_lettered() -> bool:
            msg = await dead_queue.get(no_ack=True, fail=False)
            if msg is not None:
                dead.append(msg.body)
            return bool(dead) and handled == ["after-garbage"]

        await eventually(dead_lettered)
        assert dead == [b'{"type": "job.submitted", "data": 42}']
        await remove_topology(channel, prefix, ("a", "dead"))
        await connection.close()


async def test_rabbitmq_dead_letters_a_message_whose_consumer_keeps_dying(amqp_url: str) -> None:
    """The case no handler code can count: its process dies holding the message (OOM, segfault, kill -9).
    The service queue is a quorum queue with a delivery limit: the broker itself gives up after
    MAX_HANDLER_ATTEMPTS deliveries and dead-letters it, instead of killing every consumer in turn."""
    prefix = unique("dying-")
    router = Router()
    router.on(JobSubmitted, lambda evt: asyncio.sleep(0, result=[]))
    async with open_amqp_bus(amqp_url, f"{prefix}.events", prefix) as bus:
        subscription = await bus.subscribe(f"{prefix}.a", ["job.submitted"], router)
        await subscription.cancel()  # declared as the service declares it; nobody consumes now
        await bus.publish([submitted("kills-its-consumer")])
        deliveries = 0
        while True:
            consumer = await aio_pika.connect(amqp_url)  # a process that takes the message and dies
            channel = await consumer.channel()
            queue = await channel.declare_queue(f"{prefix}.a", passive=True)
            message = None
            for _ in range(50):
                if (message := await queue.get(no_ack=False, fail=False)) is not None:
                    break
                await asyncio.sleep(0.05)
            await consumer.close()  # without acknowledging
            if message is None:
                break
            deliveries += 1
            assert b"kills-its-consumer" in message.body
            assert deliveries <= MAX_HANDLER_ATTEMPTS, "the broker kept delivering past its limit"
        assert deliveries == MAX_HANDLER_ATTEMPTS
        connection = await aio_pika.connect(amqp_url)
        channel = await connection.channel()
        dead_queue = await channel.declare_queue(f"{prefix}.dead", durable=True, passive=True)
        dead = await dead_queue.get(no_ack=True, fail=False)
        assert dead is not None and b"kills-its-consumer" in dead.body
        await remove_topology(channel, prefix, ("a", "dead"))
        await connection.close()


async def test_rabbitmq_replaces_an_older_paiqs_empty_classic_queue_and_names_a_full_one(amqp_url: str) -> None:
    """Upgrading from a paiq whose service queues were classic: an empty, idle one becomes a quorum queue
    by itself; one still holding messages is left alone and named in the error, with what to do."""
    prefix = unique("upgrade-")
    connection = await aio_pika.connect(amqp_url)
    channel = await connection.channel()
    for name in ("empty", "full"):
        await channel.declare_queue(f"{prefix}.{name}", durable=True,
                                    arguments={"x-dead-letter-exchange": f"{prefix}.dead"})
    await channel.default_exchange.publish(aio_pika.Message(b"left by the old version"), routing_key=f"{prefix}.full")
    router = Router()
    router.on(JobSubmitted, lambda evt: asyncio.sleep(0, result=[]))
    try:
        async with open_amqp_bus(amqp_url, f"{prefix}.events", prefix) as bus:
            await bus.subscribe(f"{prefix}.empty", ["job.submitted"], router)
            types = dict(line.split("\t") for line in
                         rabbitmqctl("list_queues", "name", "type", "--quiet", "--no-table-headers").splitlines()
                         if line.startswith(prefix))
            assert types[f"{prefix}.empty"] == "quorum"
            with pytest.raises(BusError) as refused:
                await bus.subscribe(f"{prefix}.full", ["job.submitted"], router)
            assert f"queue {prefix}.full" in str(refused.value) and "holds 1 messages" in str(refused.value)
            assert "rabbitmqctl delete_queue" in str(refused.value)
        kept = await channel.declare_queue(f"{prefix}.full", passive=True)
        assert kept.declaration_result.message_count == 1, "the old queue's message was kept"
    finally:
        await remove_topology(channel, prefix, ("empty", "full", "dead"))
        await connection.close()
