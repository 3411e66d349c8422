"""The Docker engine behind :class:`ContainerDriver`.

The docker SDK is synchronous: each call goes through ``asyncio.to_thread``; exits come from the
engine's event stream, read in one thread and handed to the event loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

import docker
import docker.errors
import structlog
from docker.types import DeviceRequest
from docker.utils import parse_repository_tag

from services.launcher.driver import ContainerExit, ContainerInfo, ContainerSpec, RegistryAuth
from shared.envvars import CODE_MOUNT
from shared.errors import DriverError

log = structlog.get_logger("paiq.launcher.docker")

LABEL_PREFIX = "paiq."
EXIT_IMAGE_PULL = 254
EXIT_ENGINE_FAILURE = 125


class DockerDriver:
    def __init__(self, client: docker.DockerClient) -> None:
        self._client = client
        self._streams: list[Any] = []

    @classmethod
    def from_url(cls, url: str | None) -> DockerDriver:
        client = docker.DockerClient(base_url=url) if url else docker.from_env()
        return cls(client)

    async def has_image(self, image: str) -> bool:
        try:
            await asyncio.to_thread(self._client.images.get, image)
        except docker.errors.ImageNotFound:
            return False
        return True

    async def pull(self, image: str, auth: RegistryAuth | None) -> None:
        repo, tag = parse_repository_tag(image)
        auth_config = None
        if auth is not None:
            auth_config = {"username": auth.username, "password": auth.password.get_secret_value(),
                           "serveraddress": auth.server}
        try:
            await asyncio.to_thread(self._client.images.pull, repo, tag=tag or "latest",
                                    auth_config=auth_config)
        except docker.errors.APIError as e:
            raise DriverError(f"pull of {image} failed", exit_code=EXIT_IMAGE_PULL,
                              reason=_pull_reason(image, e, authenticated=auth is not None)) from e

    async def run(self, spec: ContainerSpec) -> str:
        kwargs = create_args(spec)
        try:
            container = await asyncio.to_thread(self._client.containers.create, spec.image, **kwargs)
        except docker.errors.APIError as e:
            raise DriverError(f"create {spec.name} failed", exit_code=EXIT_ENGINE_FAILURE,
                              reason=f"the engine refused to create the container: {_explain(e)}") from e
        try:
            await asyncio.to_thread(container.start)
        except docker.errors.APIError as e:
            await self.remove(str(container.id))
            raise DriverError(f"start {spec.name} failed", exit_code=EXIT_ENGINE_FAILURE,
                              reason=f"the engine could not start the container: {_explain(e)}") from e
        return str(container.id)

    async def find(self, name: str) -> ContainerInfo | None:
        try:
            container = await asyncio.to_thread(self._client.containers.get, name)
        except docker.errors.NotFound:
            return None
        return _info(container.attrs)

    async def list_managed(self, node_id: str) -> list[ContainerInfo]:
        containers = await asyncio.to_thread(
            self._client.containers.list, all=True, filters={"label": f"{LABEL_PREFIX}node={node_id}"})
        return [_info(c.attrs) for c in containers]

    async def exits(self) -> AsyncIterator[ContainerExit]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[dict[str, Any] | BaseException] = asyncio.Queue()
        stream = await asyncio.to_thread(
            self._client.events, decode=True,
            filters={"type": "container", "event": "die", "label": f"{LABEL_PREFIX}job"})
        self._streams.append(stream)

        def pump() -> None:
            try:
                for item in stream:
                    loop.call_soon_threadsafe(queue.put_nowait, item)
            except Exception as e:
                loop.call_soon_threadsafe(queue.put_nowait, e)

        threading.Thread(target=pump, name="docker-events", daemon=True).start()
        while True:
            item = await queue.get()
            if isinstance(item, BaseException):
                raise DriverError("the engine's event stream ended", exit_code=EXIT_ENGINE_FAILURE,
                                  reason=str(item)) from item
            attrs = (item.get("Actor") or {}).get("Attributes") or {}
            cid = str(item.get("id") or (item.get("Actor") or {}).get("ID"))
            info = await self._inspect(cid)
            yield ContainerExit(
                id=cid,
                labels={k: v for k, v in attrs.items() if k.startswith(LABEL_PREFIX)},
                exit_code=int(attrs.get("exitCode", info.exit_code if info else -1) or 0),
                oom_killed=bool(info and info.oom_killed),
            )

    async def _inspect(self, container_id: str) -> ContainerInfo | None:
        try:
            attrs = await asyncio.to_thread(self._client.api.inspect_container, container_id)
        except docker.errors.NotFound:
            return None
        return _info(attrs)

    async def stop(self, container_id: str, grace_seconds: int) -> None:
        try:
            await asyncio.to_thread(self._client.api.stop, container_id, timeout=grace_seconds)
        except docker.errors.NotFound:
            return

    async def logs_tail(self, container_id: str, lines: int) -> str:
        try:
            raw = await asyncio.to_thread(self._client.api.logs, container_id, tail=lines)
        except docker.errors.NotFound:
            return ""
        return bytes(raw).decode(errors="replace")

    async def remove(self, container_id: str) -> None:
        try:
            await asyncio.to_thread(self._client.api.remove_container, container_id, force=True)
        except docker.errors.NotFound:
            return
        except docker.errors.APIError as e:
            if e.status_code != 409:  # removal already in progress
                raise

    async def close(self) -> None:
        for stream in self._streams:
            stream.close()
        await asyncio.to_thread(self._client.close)


def create_args(spec: ContainerSpec) -> dict[str, Any]:
    """What the engine is asked for one task (pure, so the GPU requests are tested without GPUs)."""
    kwargs: dict[str, Any] = {
        "name": spec.name,
        "entrypoint": ["/bin/sh", "-c"],
        "command": [spec.command],
        "environment": spec.env,
        "labels": spec.labels,
        "network_mode": spec.network_mode,
        "nano_cpus": spec.cpus * 1_000_000_000,
        "mem_limit": f"{spec.memory_mb}m",
        "memswap_limit": f"{spec.memory_mb}m",
        "shm_size": f"{spec.shm_mb}m",
        "init": True,
        "privileged": False,
        "working_dir": spec.working_dir,
        "detach": True,
    }
    if spec.code_dir:
        kwargs["volumes"] = {spec.code_dir: {"bind": CODE_MOUNT, "mode": "ro"}}
    if spec.gpus:
        kwargs["device_requests"] = [DeviceRequest(
            driver="nvidia", device_ids=[str(g) for g in spec.gpus], capabilities=[["gpu"]])]
    return kwargs


def _info(attrs: dict[str, Any]) -> ContainerInfo:
    state = attrs.get("State") or {}
    return ContainerInfo(
        id=attrs["Id"],
        name=str(attrs.get("Name", "")).lstrip("/"),
        labels={k: v for k, v in ((attrs.get("Config") or {}).get("Labels") or {}).items()
                if k.startswith(LABEL_PREFIX)},
        running=bool(state.get("Running")),
        exit_code=None if state.get("Running") else state.get("ExitCode"),
        oom_killed=bool(state.get("OOMKilled")),
    )


def _explain(e: docker.errors.APIError) -> str:
    return str(e.explanation or e)


def _pull_reason(image: str, e: docker.errors.APIError, *, authenticated: bool) -> str:
    text = _explain(e)
    lowered = text.lower()
    if "unauthorized" in lowered or "authentication required" in lowered or "no basic auth" in lowered:
        who = ("the credentials in authFile were refused" if authenticated
               else "the registry requires a login (set authFile)")
        return f"image {image} could not be pulled: {who}"
    if "not found" in lowered or "manifest unknown" in lowered:
        return f"image {image} does not exist in its registry"
    return f"image {image} could not be pulled: {text}"
