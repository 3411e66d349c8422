"""What the launcher needs from a container engine, as a small protocol over pydantic values."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field, SecretStr


class RegistryAuth(BaseModel):
    model_config = ConfigDict(frozen=True)
    server: str
    username: str
    password: SecretStr


class ContainerSpec(BaseModel):
    model_config = ConfigDict(frozen=True)
    name: str
    image: str
    command: str
    env: dict[str, str]
    labels: dict[str, str]
    cpus: int
    memory_mb: int
    shm_mb: int
    gpus: tuple[int, ...] = ()
    code_dir: str = ""
    working_dir: str = "/pai"
    network_mode: str = "host"


class ContainerInfo(BaseModel):
    model_config = ConfigDict(frozen=True)
    id: str
    name: str
    labels: dict[str, str] = Field(default_factory=dict)
    running: bool
    exit_code: int | None = None
    oom_killed: bool = False


class ContainerExit(BaseModel):
    model_config = ConfigDict(frozen=True)
    id: str
    labels: dict[str, str]
    exit_code: int
    oom_killed: bool = False


class ContainerDriver(Protocol):
    async def has_image(self, image: str) -> bool: ...

    async def pull(self, image: str, auth: RegistryAuth | None) -> None:
        """Pull ``image``; raises DriverError (exit code 254) when it cannot."""

    async def run(self, spec: ContainerSpec) -> str:
        """Create and start a container; its id. Raises DriverError when the engine refuses."""

    async def find(self, name: str) -> ContainerInfo | None: ...

    async def list_managed(self, node_id: str) -> list[ContainerInfo]: ...

    def exits(self) -> AsyncIterator[ContainerExit]:
        """Every exit of a paiq container from now on, from the engine's event stream."""

    async def stop(self, container_id: str, grace_seconds: int) -> None: ...

    async def logs_tail(self, container_id: str, lines: int) -> str: ...

    async def remove(self, container_id: str) -> None: ...

    async def close(self) -> None: ...
