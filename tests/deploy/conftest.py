"""The compose stack, up once per module: built images, healthy services, and always brought down."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import docker
import pytest

from services.cli.client import PaiqClient, paiq_client
from tests.deploy.compose import ComposeStack, build_images, stack_settings
from tests.infra import unique


@pytest.fixture(scope="module")
def compose_stack(tmp_path_factory: pytest.TempPathFactory,
                  docker_client: docker.DockerClient) -> Iterator[ComposeStack]:
    workdir = tmp_path_factory.mktemp("compose")
    stack = ComposeStack(project=unique("paiqtest"), workdir=workdir,
                         settings=stack_settings(workdir / "fs"), client=docker_client)
    stack.timings["build"] = build_images()
    try:
        stack.up()
        yield stack
    finally:
        stack.force_cleanup()
        print(f"\ncompose stack {stack.project}: " + ", ".join(f"{k} {v:.1f}s" for k, v in stack.timings.items()))


@pytest.fixture
def compose_user() -> str:
    return unique("u")


@pytest.fixture
async def compose_api(compose_stack: ComposeStack, compose_user: str) -> AsyncIterator[PaiqClient]:
    """``compose_user`` on the stack's published API, created by the configured administrator."""
    user, password = compose_user, unique("pw")
    async with paiq_client(compose_stack.api) as anonymous:
        admin = anonymous.with_token((await anonymous.login(
            compose_stack.settings["PAIQ_ADMIN_USER"], compose_stack.settings["PAIQ_ADMIN_PASSWORD"]))["token"])
        await admin.put_user(user, password)
        yield anonymous.with_token((await anonymous.login(user, password))["token"])
