"""What the launcher needs from a container engine, as a small protocol over pydantic values."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, SecretBytes, SecretStr

from services.launcher.engine.enginestats import Counters
from shared.errors import DriverError
from shared.lifecycle import exitcodes


class RegistryAuth(BaseModel):
    model_config = ConfigDict(frozen=True)
    server: str
    username: str
    password: SecretStr
    source: str = "authFile"  # where the user gave them, as a refused login names it


class PullError(DriverError):
    """An image could not be pulled; ``login_refused`` when the registry refused the credentials."""

    def __init__(self, message: str, *, reason: str, login_refused: bool) -> None:
        super().__init__(message, exit_code=exitcodes.IMAGE_PULL_FAILED, reason=reason)
        self.login_refused = login_refused


class ContainerFile(BaseModel):
    """A file put into a container after it is created and before it starts (owned by root; its
    directories made 0700 under /root, 0755 elsewhere). Secret: never in a repr or a log."""

    model_config = ConfigDict(frozen=True)
    path: str  # absolute
    mode: int
    content: SecretBytes


class ContainerSpec(BaseModel):
    model_config = ConfigDict(frozen=True)
    name: str
    image: str
    command: str = Field(repr=False)  # a v2 job's holds its secrets, rendered
    command_args: tuple[str, ...] = ()  # $0, $1, ... of `/bin/sh -c command`
    env: dict[str, str]
    labels: dict[str, str]
    cpus: int
    memory_mb: int
    shm_mb: int
    gpus: tuple[int, ...] = ()
    code_dir: str = ""
    working_dir: str = "/pai"
    network_mode: str = "host"  # or the task network's name
    published_ports: tuple[int, ...] = ()  # bridge networking: each published 1:1 (tcp and udp)
    publish_ip: str = ""  # where they are published (the node's address); "": every address of the host
    pids_limit: int = 0  # processes and threads at most (0: no limit)
    log_max_bytes: int = 0  # the engine's own log file of the container (0: the engine's default)
    files: tuple[ContainerFile, ...] = ()
    # Host directories bound into the container: (host path, container path, read only).
    binds: tuple[tuple[str, str, bool], ...] = ()


class ContainerInfo(BaseModel):
    model_config = ConfigDict(frozen=True)
    id: str
    name: str
    labels: dict[str, str] = Field(default_factory=dict)
    running: bool
    status: str = ""  # the engine's word: created, running, exited, ...
    exit_code: int | None = None
    oom_killed: bool = False


class ContainerExit(BaseModel):
    model_config = ConfigDict(frozen=True)
    id: str
    labels: dict[str, str]
    exit_code: int
    oom_killed: bool = False


class LogLine(BaseModel):
    """One line a container wrote (the engine's timestamp in ns since the epoch; text ends with \\n)."""

    model_config = ConfigDict(frozen=True)
    stream: Literal["stdout", "stderr"]
    ts_ns: int
    text: str


class ContainerDriver(Protocol):
    async def image_id(self, image: str) -> str | None:
        """The ID of the node's image ``image`` names; None when the node lacks it."""

    async def ensure_network(self, name: str) -> str:
        """The gateway address of the task network ``name`` (made when missing; DriverError when one of that
        name exists that does not isolate its containers)."""

    async def pull(self, image: str, auth: RegistryAuth | None) -> None:
        """Pull ``image``; raises DriverError (exit code 254) when it cannot."""

    async def run(self, spec: ContainerSpec) -> str:
        """Create a container, put its ``files`` into it, start it; its id. Idempotent by name: if a
        container of that name exists already, its id (started, with its files, if it never was).
        Raises DriverError when the engine refuses."""

    async def find(self, name: str) -> ContainerInfo | None: ...

    async def first_file(self, container_id: str, paths: tuple[str, ...]) -> str | None:
        """The first of ``paths`` that exists in the container's file system (its image's and its own)."""

    async def list_managed(self, node_id: str) -> list[ContainerInfo]: ...

    async def list_running(self, node_id: str) -> list[ContainerInfo]:
        """The node's paiq containers running now (one listing, nothing inspected)."""

    async def written(self, node_id: str) -> dict[str, int]:
        """Bytes each running container of the node has written to its own file system (its writable
        layer; not its mounts, not its logs), by container id: one listing, the engine measuring each."""

    async def counters(self, container_id: str) -> Counters | None:
        """The container's counters now (CPU time, memory, network, block I/O); None when it is not
        running or gone."""

    def exits(self) -> AsyncIterator[ContainerExit]:
        """Every exit of a paiq container from now on, from the engine's event stream."""

    def follow_logs(self, container_id: str, since_ns: int = 0) -> AsyncIterator[LogLine]:
        """Every line the container wrote after ``since_ns``, then new ones until it stops."""

    async def stop(self, container_id: str, grace_seconds: int) -> None:
        """SIGTERM, then SIGKILL after ``grace_seconds``."""

    async def logs_tail(self, container_id: str, lines: int, *, stderr_only: bool = False) -> str: ...

    async def remove(self, container_id: str) -> None: ...

    async def close(self) -> None: ...
