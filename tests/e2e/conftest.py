from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import docker
import pytest

from services.cli.client import PaiqClient, paiq_client
from tests.infra import (
    ADMIN_PASSWORD,
    ADMIN_USER,
    Platform,
    Registry,
    push_image,
    run_registry,
    start_platform,
    stop_platform,
    unique,
)

# For a module whose tests exercise the REST API's own handling of requests (refusals, limits, routes): the same
# submit code answers them in both shapes, so they run on `paiq up` alone, what most users run (the shapes'
# differences, the bus and the processes behind the API, are what the other modules' tests cover in both).
ALL_IN_ONE_ONLY = pytest.mark.parametrize("platform", ["all-in-one"], indirect=True, scope="module")


@pytest.fixture(scope="module", params=["all-in-one", "separate"])
def platform(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, mongo_uri: str,
             amqp_url: str, docker_client: docker.DockerClient) -> Iterator[Platform]:
    """paiq as users run it: ``paiq up`` alone, or four service processes over RabbitMQ and MongoDB."""
    shape = str(request.param)
    p = start_platform(shape, tmp_path_factory.mktemp(shape), mongo_uri=mongo_uri, amqp_url=amqp_url)
    try:
        yield p
    finally:
        stop_platform(p, docker_client)


@pytest.fixture
async def admin(platform: Platform) -> AsyncIterator[PaiqClient]:
    """A client logged in as the platform's configured administrator."""
    async with paiq_client(platform.api) as anonymous:
        token = (await anonymous.login(ADMIN_USER, ADMIN_PASSWORD))["token"]
        yield anonymous.with_token(token)


async def logged_in(admin: PaiqClient, user: str, password: str = "secret-pass") -> PaiqClient:
    """Create ``user`` (as the admin) and return a client with that user's token."""
    await admin.put_user(user, password)
    return admin.with_token((await admin.with_token(None).login(user, password))["token"])


async def token_of(platform: Platform, user: str, password: str = "secret-pass") -> str:
    """A new token of ``user`` (``POST /api/v1/token``), for requests a test writes by hand."""
    status, body, _ = await raw(platform, "POST", "/api/v1/token", json={"username": user, "password": password})
    assert status == 200, body
    return str(body["token"])


@pytest.fixture
async def admin_token(platform: Platform) -> str:
    return await token_of(platform, ADMIN_USER, ADMIN_PASSWORD)


@pytest.fixture
async def api(admin: PaiqClient, user: str) -> PaiqClient:
    """A client logged in as the test's own fresh user."""
    return await logged_in(admin, user)


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    with run_registry(tmp_path_factory.mktemp("registry")) as reg:
        yield reg


@pytest.fixture
def user() -> str:
    return unique("u")


@pytest.fixture
def registry_image(registry: Registry, docker_client: docker.DockerClient) -> str:
    """An image that is in the registry and not on the engine."""
    image = registry.image(f"paiq/{unique('busybox')}:1")
    push_image(docker_client, "local/busybox:latest", image)
    return image


async def raw(platform: Platform, method: str, path: str, **kw: Any) -> tuple[int, Any, dict[str, str]]:
    """One HTTP request to the platform's API as any client sends it: status, body (JSON if it is), headers."""
    async with aiohttp.ClientSession() as s, s.request(method, platform.api + path, **kw) as resp:
        text = await resp.text()
        try:
            body: Any = json.loads(text)
        except ValueError:
            body = text
        return resp.status, body, dict(resp.headers)


def job_config(name: str, *, command: str, image: str = "local/busybox:latest",
               roles: list[dict[str, object]] | None = None, **extra: object) -> dict[str, object]:
    return {
        "jobName": name,
        "image": image,
        "taskRoles": roles or [{"name": "main", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 128,
                                "command": command}],
        **extra,
    }


__all__ = ["Path", "job_config"]
