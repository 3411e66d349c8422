"""Fixtures of the integration tests that drive the real Docker engine through the launcher's driver: the
driver, and a node id of the test's own whose containers are removed after it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import docker
import pytest

from services.launcher.engine.docker_driver import DockerDriver
from tests.infra import unique


@pytest.fixture
async def driver(docker_client: docker.DockerClient) -> AsyncIterator[DockerDriver]:
    d = DockerDriver.from_url(None)
    yield d
    await d.close()


@pytest.fixture
def node_id(docker_client: docker.DockerClient) -> Iterator[str]:
    node = unique("node-")
    yield node
    for c in docker_client.containers.list(all=True, filters={"label": f"paiq.node={node}"}):
        c.remove(force=True)
