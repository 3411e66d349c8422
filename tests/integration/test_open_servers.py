"""A service refuses to run beside a database or a broker that lets anyone in (docs, Security): a MongoDB
that answers a read without a login, a RabbitMQ that still admits ``guest``. Real servers: an unauthenticated
SecantusDB, the test run's broker with ``guest`` given back for the test."""

from __future__ import annotations

import asyncio
import gc
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import aio_pika
import pytest
from pymongo import AsyncMongoClient
from pymongo.errors import PyMongoError

from shared.db.embedded import _server_binary, free_port
from shared.runtime.exposure import OpenServerError, refuse_guest_broker, refuse_open_database
from tests.infra import rabbitmqctl, unique
from tests.integration.test_startup_failures import run_service

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture
async def open_database(tmp_path: Path) -> AsyncIterator[str]:
    """A SecantusDB started without --auth that has a user: a URI with a login that works, and a server that
    would serve anyone all the same."""
    port = free_port()
    proc = subprocess.Popen([_server_binary(), "--host", "127.0.0.1", "--port", str(port),  # noqa: ASYNC220
                             "--storage-path", str(tmp_path / "db")], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(
            f"mongodb://127.0.0.1:{port}/?directConnection=true", serverSelectionTimeoutMS=200)
        for _ in range(150):
            try:
                await client.admin.command("createUser", "paiq", pwd="secret-of-paiq", roles=["root"])
                break
            except PyMongoError:
                await asyncio.sleep(0.1)
        await client.close()
        yield f"mongodb://paiq:secret-of-paiq@127.0.0.1:{port}/?authSource=admin&directConnection=true"
    finally:
        proc.terminate()
        await asyncio.to_thread(proc.wait, 10)


@pytest.fixture
def guest_admitted(amqp_url: str) -> Iterator[str]:
    """The test broker with its guest account given back (as a fresh RabbitMQ has it), admitted to a virtual host
    of this test's own: its URL. The other tests' services, starting meanwhile on the run's virtual host, find a
    guest that host refuses (not admitted: they start)."""
    vhost = unique("guest-admitted-")
    rabbitmqctl("add_vhost", vhost)
    rabbitmqctl("add_user", "guest", "guest")
    try:
        rabbitmqctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
        yield f"{amqp_url.rstrip('/')}/{vhost}"
    finally:
        rabbitmqctl("delete_user", "guest")
        rabbitmqctl("delete_vhost", vhost)


async def test_a_database_that_answers_without_a_login_stops_every_service(open_database: str, tmp_path: Path,
                                                                          amqp_url: str) -> None:
    with pytest.raises(OpenServerError, match="answers without a login"):
        await refuse_open_database(open_database, "paiq")
    code, out = await run_service("scheduler", tmp_path, PAIQ_MONGODB_URI=open_database, PAIQ_AMQP_URL=amqp_url)
    where = urlsplit(open_database).netloc.rpartition("@")[2]
    assert code != 0 and f"paiq scheduler: the MongoDB at {where} answers without a login" in out, out
    assert "secret-of-paiq" not in out and "Traceback" not in out


async def test_a_broker_that_admits_guest_stops_every_service(guest_admitted: str, tmp_path: Path,
                                                              mongo_uri: str) -> None:
    with pytest.raises(OpenServerError, match="admits its guest account"):
        await refuse_guest_broker(guest_admitted)
    code, out = await run_service("status", tmp_path, PAIQ_MONGODB_URI=mongo_uri, PAIQ_AMQP_URL=guest_admitted,
                                  PAIQ_MONGODB_DATABASE=unique("open_"))
    assert code != 0 and "admits its guest account: a process on its host could publish" in out, out
    assert "rabbitmqctl delete_user guest" in out and "Traceback" not in out


async def test_a_guest_the_virtual_host_refuses_is_not_admitted(guest_admitted: str, amqp_url: str) -> None:
    """guest logs in but may not open this virtual host (the broker answers the open with a close): refused, as
    every service starting on the run's virtual host while the test above gives guest back sees it."""
    await refuse_guest_broker(amqp_url)


async def test_the_servers_the_tests_run_pass(mongo_uri: str, amqp_url: str) -> None:
    """The embedded database refuses a stranger, and the test broker has no guest: nothing is refused."""
    await refuse_open_database(mongo_uri, "paiq")
    await refuse_guest_broker(amqp_url)


async def test_a_refused_guest_probe_leaves_no_connection_behind(amqp_url: str) -> None:
    """The probe that guest is refused (every service's start) closes what it opened: aio-pika's ``connect``
    drops the connection it could not open unclosed, and its finaliser then schedules a close nobody awaits
    (a warning in the service's log, an error in a test that collects it)."""
    await refuse_guest_broker(amqp_url)
    gc.collect()
    left = [c for c in gc.get_objects() if isinstance(c, aio_pika.Connection) and c.url.user == "guest"
            and not c.is_closed]
    assert left == []
