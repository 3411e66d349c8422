"""Session-wide real components: MongoDB-wire server, RabbitMQ, Docker engine."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterator

import docker
import pytest

from shared.embedded_mongo import embedded_mongo


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
    return os.environ.get("PAIQ_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")


@pytest.fixture(scope="session")
def docker_client() -> Iterator[docker.DockerClient]:
    client = docker.from_env()
    client.ping()
    yield client
    client.close()
