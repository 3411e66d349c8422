"""Session-wide real components: MongoDB-wire server, RabbitMQ, Docker engine."""

from __future__ import annotations

import contextlib
import os
import socket
import urllib.parse
from collections.abc import AsyncIterator, Iterator

import docker
import pytest

from shared.db.embedded import embedded_mongo

if os.environ.get("PAIQ_TEST_CPU_REPORT"):  # each test file's CPU, written for python -m tests.cpuuse
    from tests.cpuuse import pytest_runtest_protocol, pytest_sessionfinish  # noqa: F401


@contextlib.asynccontextmanager
async def mongo_server() -> AsyncIterator[str]:
    """PAIQ_TEST_MONGODB_URI (e.g. a real mongod) when set, else a private in-memory SecantusDB."""
    configured = os.environ.get("PAIQ_TEST_MONGODB_URI")
    if configured:
        yield configured
        return
    async with embedded_mongo(None) as uri:
        yield uri


@pytest.fixture(scope="session")
async def mongo_uri() -> AsyncIterator[str]:
    async with mongo_server() as uri:
        yield uri


@pytest.fixture(scope="session")
def amqp_url() -> str:
    """PAIQ_TEST_AMQP_URL (tests/run.sh starts a node of its own, with a user of its own, and sets it).
    Unset, or a broker whose AMQP port does not accept connections, fails the tests that need it, saying so."""
    url = os.environ.get("PAIQ_TEST_AMQP_URL")
    if not url:
        pytest.fail("PAIQ_TEST_AMQP_URL is not set; run the tests with tests/run.sh, which starts a broker of its "
                    "own (paiq never logs in as RabbitMQ's guest)", pytrace=False)
    parts = urllib.parse.urlsplit(url)
    try:
        socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 5672), timeout=5).close()
    except OSError as e:
        pytest.fail(f"RabbitMQ at {parts.hostname}:{parts.port} does not accept connections ({e}); "
                    "run the tests with tests/run.sh, which starts a broker of its own", pytrace=False)
    return url


@pytest.fixture(scope="session")
def docker_client() -> Iterator[docker.DockerClient]:
    client = docker.from_env()
    client.ping()
    yield client
    client.close()
