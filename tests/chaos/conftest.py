"""The chaos run happens once per module; every test then asserts one property of what it recorded."""

from __future__ import annotations

from collections.abc import AsyncIterator

import docker
import pytest

from tests.chaos.scenario import ChaosReport, run_chaos


@pytest.fixture(scope="module")
async def chaos(tmp_path_factory: pytest.TempPathFactory, docker_client: docker.DockerClient) -> AsyncIterator[
        ChaosReport]:
    """Run the whole chaos schedule (a few minutes) and measure the end state before any cleanup."""
    report, teardown = await run_chaos(tmp_path_factory.mktemp("chaos"), docker_client)
    try:
        yield report
    finally:
        await teardown()
