"""One contract, two buses: the in-process bus and RabbitMQ must behave the same to a handler."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

import aio_pika
import pytest
from pymongo.errors import ServerSelectionTimeoutError

from shared import vitals
from shared.bus.amqp import open_amqp_bus
from shared.bus.base import MAX_HANDLER_ATTEMPTS, Bus, Router
from shared.bus.memory import MemoryBus
from shared.errors import StoreError
from shared.events import (
    CloudEvent,
    JobSubmitted,
    JobSubmittedData,
    LaunchTasks,
    LaunchTasksData,
    NodeRegistered,
    NodeRegisteredData,
)
from tests.infra import unique

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
        bus = MemoryBus(retry_delay=0.01)

        async def memory_dead() -> list[bytes]:
            return list(bus.dead_letters)

        yield Contract(bus, prefix, memory_dead)
        await bus.close()
        return
    async with open_amqp_bus(amqp_url, f"{prefix}.events", prefix, retry_delay=0.01) as amqp:
        connection = await aio_pika.connect_robust(amqp_url)
        channel = await connection.channel()

        async def rabbit_dead() -> list[bytes]:
            queue = await channel.declare_queue(f"{prefix}.dead", durable=True, passive=True)
            out = []
            while (msg := await queue.get(no_ack=True, fail=False)) is not None:
                out.append(msg.body)
            return out

        yield Contract(amqp, prefix, rabbit_dead)
        for name in ("a", "b", "node", "dead", "poison"):
            await channel.queue_delete(f"{prefix}.{name}")
        await channel.exchange_delete(f"{prefix}.events")
        await channel.exchange_delete(f"{prefix}.dead")
        await connection.close()


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
    got: list[str] = []

    async def on_launch(evt: LaunchTasks) -> Sequence[CloudEvent]:
        got.append(evt.data.node_id)
        return []

    router = Router()
    router.on(LaunchTasks, on_launch)
    await contract.bus.subscribe(f"{contract.prefix}.node", ["node.n1.#"], router)
    await contract.bus.publish([
        LaunchTasks(data=LaunchTasksData(job_id="j", attempt=0, node_id=n, tasks=())) for n in ("n2", "n1", "n3")])

    async def arrived() -> bool:
        return got == ["n1"]

    await eventually(arrived)
    await asyncio.sleep(0.2)
    assert got == ["n1"]


async def test_a_failing_handler_is_retried_then_succeeds(contract: Contract) -> None:
    calls: list[int] = []

    async def flaky(evt: JobSubmitted) -> Sequence[CloudEvent]:
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError("transient")
        return []

    router = Router()
    router.on(JobSubmitted, flaky)
    await contract.bus.subscribe(f"{contract.prefix}.a", ["job.submitted"], router)
    await contract.bus.publish([submitted("j")])

    async def three() -> bool:
        return len(calls) == 3

    await eventually(three)
    await asyncio.sleep(0.2)
    assert len(calls) == 3
    assert await contract.dead_letters() == []


async def test_a_handler_that_keeps_failing_is_dead_lettered(contract: Contract) -> None:
    calls: list[int] = []

    async def broken(evt: JobSubmitted) -> Sequence[CloudEvent]:
        calls.append(1)
        raise RuntimeError("permanent")

    router = Router()
    router.on(JobSubmitted, broken)
    await contract.bus.subscribe(f"{contract.prefix}.a", ["job.submitted"], router)
    await contract.bus.publish([submitted("poison-job")])
    dead: list[bytes] = []

    async def dead_lettered() -> bool:
        dead.extend(await contract.dead_letters())
        return len(dead) == 1

    await eventually(dead_lettered)
    assert len(calls) == MAX_HANDLER_ATTEMPTS
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

    router = Router()
    router.on(JobSubmitted, database_away)
    await contract.bus.subscribe(f"{contract.prefix}.a", ["job.submitted"], router)
    await contract.bus.publish([submitted("outage-job")])

    async def handled() -> bool:
        return len(calls) == outage_rounds + 1

    await eventually(handled, limit_s=30)
    await asyncio.sleep(0.2)
    assert len(calls) == outage_rounds + 1
    assert await contract.dead_letters() == []


async def test_a_cancelled_subscription_leaves_messages_for_the_next_consumer(contract: Contract) -> None:
    """What a scheduler that lost its lease does: stop consuming; its queue keeps what arrives meanwhile."""
    got: list[str] = []

    async def take(evt: JobSubmitted) -> Sequence[CloudEvent]:
        got.append(evt.data.job_id)
        return []

    router = Router()
    router.on(JobSubmitted, take)
    queue = f"{contract.prefix}.a"
    subscription = await contract.bus.subscribe(queue, ["job.submitted"], router)
    await contract.bus.publish([submitted("first")])

    async def first() -> bool:
        return got == ["first"]

    await eventually(first)
    await subscription.cancel()
    await contract.bus.publish([submitted("while-away")])
    await asyncio.sleep(0.3)
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
        for name in ("a", "dead"):
            await channel.queue_delete(f"{prefix}.{name}")
        await channel.exchange_delete(f"{prefix}.events")
        await channel.exchange_delete(f"{prefix}.dead")
        await connection.close()
