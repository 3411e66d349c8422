"""The event stream as consumers see it: their own queue on RabbitMQ, the webhook example, the SSE feed."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import aio_pika
import docker
import jsonschema
import pytest
from aiohttp import web

from services.cli.client import PaiqClient, paiq_client
from shared.eventdocs import SCHEMA_DIR
from tests.e2e.conftest import job_config, logged_in
from tests.e2e.feedwatch import connected_feed
from tests.infra import ADMIN_PASSWORD, ADMIN_USER, REPO, Platform, start_platform, stop_platform, unique, wait_final

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

# A job's events in the order of its changes. The launch command goes to its node at once, beside the journaled
# job.scheduled (shared/db/journal.py): before the task starts, not necessarily after job.scheduled.
LIFECYCLE = ["job.submitted", "job.scheduled", "task.started", "task.exited", "job.completed"]


@pytest.fixture(scope="module")
def rabbit_platform(tmp_path_factory: pytest.TempPathFactory, mongo_uri: str, amqp_url: str,
                    docker_client: docker.DockerClient) -> Iterator[Platform]:
    """The four services over RabbitMQ: what external consumers bind to."""
    p = start_platform("separate", tmp_path_factory.mktemp("rabbit"), mongo_uri=mongo_uri, amqp_url=amqp_url)
    try:
        yield p
    finally:
        stop_platform(p, docker_client)


@pytest.fixture
async def rabbit_api(rabbit_platform: Platform, user: str) -> AsyncIterator[PaiqClient]:
    async with paiq_client(rabbit_platform.api) as anonymous:
        admin = anonymous.with_token((await anonymous.login(ADMIN_USER, ADMIN_PASSWORD))["token"])
        yield await logged_in(admin, user)


def lifecycle(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The lifecycle events, each statement once. Delivery is at least once: a statement can come again (the
    same type and data: a launcher's pass reporting an exit the status service has not taken in yet, a launch
    delivered again), and a consumer counts by what the data names, as the docs tell it to."""
    chain: list[dict[str, Any]] = []
    said: set[str] = set()
    for event in (e for e in events if e["type"] != "task.progress"):
        statement = json.dumps([event["type"], event["data"]], sort_keys=True)
        if statement not in said:
            said.add(statement)
            chain.append(event)
    return chain


def validate(event: dict[str, Any]) -> None:
    jsonschema.validate(event, json.loads((SCHEMA_DIR / f"{event['type']}.json").read_text()))


async def test_a_consumer_queue_gets_every_lifecycle_event_in_order_each_matching_its_schema(
        rabbit_platform: Platform, rabbit_api: PaiqClient, user: str, amqp_url: str) -> None:
    connection = await aio_pika.connect_robust(amqp_url)
    async with connection:
        channel = await connection.channel()
        exchange = await channel.get_exchange(rabbit_platform.env["PAIQ_EXCHANGE"])
        queue = await channel.declare_queue(exclusive=True)
        await queue.bind(exchange, routing_key="#")
        await rabbit_api.submit(user, json.dumps(job_config("observed", command="echo hi")).encode())
        await wait_final(rabbit_api, user, "observed")
        mine: list[dict[str, Any]] = []
        # The API can show the job final before the status service's job.completed reaches the queue: the
        # queue is consumed (each message as it arrives) until that event, for at most 30 s.
        async with asyncio.timeout(30), queue.iterator() as messages:
            async for message in messages:
                await message.ack()
                event = json.loads(message.body)
                if event.get("subject", "").startswith(f"{user}~observed~"):  # none: about no job
                    mine.append(event)
                    if event["type"] == "job.completed":
                        break
    types = [e["type"] for e in mine]
    # The launcher may say what a task does before it starts (pulling a `latest` image), and after it
    # started, that ssh into it is unavailable (busybox has no sshd).
    progress = [i for i, t in enumerate(types) if t == "task.progress"]
    assert all(types.index("node.launch") < i < types.index("task.started") or
               mine[i]["data"]["detail"].startswith("ssh unavailable: ") for i in progress), types
    for event in mine:
        validate(event)
    chain = lifecycle([e for e in mine if e["type"] != "node.launch"])
    assert [e["type"] for e in chain] == LIFECYCLE, types
    assert types.index("job.submitted") < types.index("node.launch") < types.index("task.started"), types
    # Each lifecycle event follows from the one before, so their times rise. A task's progress is said beside
    # that chain (the ssh check runs after the start is reported, and can end after job.completed was made
    # but before it was published), so its time need not fall between its neighbours'.
    times = [e["time"] for e in chain]
    assert times == sorted(times)
    assert mine[-1]["data"]["state"] == "SUCCEEDED"


async def test_the_webhook_notifier_posts_signed_job_completions(
        rabbit_platform: Platform, rabbit_api: PaiqClient, user: str, amqp_url: str, tmp_path: Path) -> None:
    received: list[tuple[bytes, str]] = []

    async def hook(request: web.Request) -> web.Response:
        received.append((await request.read(), request.headers.get("X-Paiq-Signature", "")))
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    secret = unique("s")
    queue_name = unique("notifier-")
    env = {**os.environ, "WEBHOOK_SECRET": secret}
    with (tmp_path / "notifier.log").open("wb") as notifier_log:
        notifier = subprocess.Popen(  # noqa: ASYNC220 - a child that runs beside the test, not awaited
            [sys.executable, "examples/webhook_notifier.py", "--url", f"http://127.0.0.1:{port}/hook",
             "--amqp-url", amqp_url, "--exchange", rabbit_platform.env["PAIQ_EXCHANGE"], "--queue", queue_name],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=notifier_log)
    try:
        assert notifier.stdout is not None
        assert (await asyncio.to_thread(notifier.stdout.readline)).strip() == b"ready"
        await rabbit_api.submit(user, json.dumps(job_config("notify-me", command="exit 4")).encode())
        await wait_final(rabbit_api, user, "notify-me")
        for _ in range(100):
            if any(f"{user}~notify-me~".encode() in body for body, _ in received):
                break
            await asyncio.sleep(0.1)
    finally:
        notifier.terminate()
        notifier.wait(10)
        if notifier.stdout is not None:
            notifier.stdout.close()
        await runner.cleanup()
        connection = await aio_pika.connect_robust(amqp_url)
        async with connection:
            await (await connection.channel()).queue_delete(queue_name)
    [(body, sig)] = [(b, s) for b, s in received if f"{user}~notify-me~".encode() in b]
    assert hmac.compare_digest(sig, "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest())
    event = json.loads(body)
    validate(event)
    assert event["type"] == "job.completed" and event["data"]["state"] == "FAILED" and event["data"]["exit_code"] == 4


async def test_the_live_feed_streams_one_jobs_events_and_nothing_of_others(platform: Platform, api: PaiqClient,
                                                                           user: str) -> None:
    seen: list[dict[str, Any]] = []
    # connected before the job exists
    follower = await connected_feed(platform.api, seen, user=user, job="fed",
                                    until=lambda event: event["type"] == "job.completed")
    await api.submit(user, json.dumps(job_config("other", command="true")).encode())
    await api.submit(user, json.dumps(job_config("fed", command="true")).encode())
    await asyncio.wait_for(follower, 60)
    assert [e["type"] for e in lifecycle(seen)] == [
        "job.submitted", "job.scheduled", "task.started", "task.exited", "job.completed"]
    assert all(e["subject"].startswith(f"{user}~fed~") for e in seen)
    for event in seen:
        validate(event)


async def _until(done: Callable[[], bool], limit_s: float) -> None:
    for _ in range(int(limit_s * 10)):
        if done():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"not seen within {limit_s:g} s")


async def _stream(platform: Platform, got: list[tuple[int, dict[str, Any]]], user: str,
                  last_id: str | None = None, stop: asyncio.Event | None = None) -> None:
    """Read the event stream of ``user``'s jobs into ``got`` as (number, event) until ``stop`` is set."""
    import aiohttp

    headers = {"Last-Event-ID": last_id} if last_id else {}
    timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
    async with aiohttp.ClientSession(timeout=timeout) as session, session.get(
            f"{platform.api}/api/v1/events", params={"user": user}, headers=headers) as resp:
        assert resp.status == 200, await resp.text()
        seq = 0
        async for raw in resp.content:
            line = raw.decode().rstrip("\n")
            if line.startswith("id: "):
                seq = int(line[4:])
            elif line.startswith("data: "):
                got.append((seq, json.loads(line[6:])))
            if stop is not None and stop.is_set():
                return


async def test_a_stream_client_away_for_10_s_during_a_burst_gets_every_event_once_with_last_event_id(
        platform: Platform, api: PaiqClient, user: str) -> None:
    """docs, The event stream: a dashboard that reconnects with Last-Event-ID misses nothing and gets nothing
    twice. It reads the stream, goes away while ten jobs run (one submitted a second), and comes back."""
    before: list[tuple[int, dict[str, Any]]] = []
    stop = asyncio.Event()
    reader = asyncio.create_task(_stream(platform, before, user, stop=stop))
    await asyncio.sleep(1)
    await api.submit(user, json.dumps(job_config("first", command="true")).encode())
    await _until(lambda: any(e["type"] == "job.submitted" for _, e in before), 60)
    stop.set()
    reader.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await reader
    last = max(seq for seq, _ in before)
    names = [f"burst{i}" for i in range(10)]
    for name in names:  # the client is away meanwhile: about 10 s
        await api.submit(user, json.dumps(job_config(name, command="sleep 0.5")).encode())
        await asyncio.sleep(1)
    for name in names:
        await wait_final(api, user, name, 120)
    after: list[tuple[int, dict[str, Any]]] = []
    stop = asyncio.Event()
    reader = asyncio.create_task(_stream(platform, after, user, last_id=str(last), stop=stop))
    try:
        await _until(lambda: set(names) <= {e["subject"].split("~")[1] for _, e in after
                                            if e["type"] == "job.completed"}, 60)
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
    assert all(seq > last for seq, _ in after), "nothing from before the number the client gave"
    ids = [e["id"] for _, e in after]
    assert len(ids) == len(set(ids)), "no event twice"
    numbers = [seq for seq, _ in after]
    assert numbers == sorted(numbers), "in the journal's order"
    for name in names:
        types = [e["type"] for _, e in after if e["subject"].split("~")[1] == name and e["type"] != "task.progress"]
        assert types == ["job.submitted", "job.scheduled", "task.started", "task.exited", "job.completed"], (name,
                                                                                                            types)
