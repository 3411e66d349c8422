"""The event stream as consumers see it: their own queue on RabbitMQ, the webhook example, the SSE feed."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
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

LIFECYCLE = ["job.submitted", "job.scheduled", "node.launch", "task.started", "task.exited", "job.completed"]


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
    delivered again), and a consumer counts by what the data names, as the README tells it to."""
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
                if event["subject"].startswith(f"{user}~observed~"):
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
    chain = lifecycle(mine)
    assert [e["type"] for e in chain] == LIFECYCLE, types
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
