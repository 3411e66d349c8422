"""The Docker engine behind :class:`ContainerDriver`.

The docker SDK is synchronous: each call runs on the driver's own threads (:mod:`.enginethreads`), never
on the event loop's default executor, which the database client and the API need; each but a pull fails
after ``CALL_TIMEOUT_S`` when the engine does not answer. Exits come from the engine's event stream, and a
followed container's log from its own, each read in a thread of its own and handed to the event loop.
"""

from __future__ import annotations

import asyncio
import functools
import io
import tarfile
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import PurePosixPath
from typing import Any, TypeVar

import docker
import docker.errors
import requests.exceptions
import structlog
from docker.models.containers import _create_container_args  # type: ignore[attr-defined]  # the SDK's own, private
from docker.types import CancellableStream, DeviceRequest, LogConfig, Mount
from docker.utils import convert_filters, parse_repository_tag

from services.launcher.engine.driver import (
    ContainerExit,
    ContainerFile,
    ContainerInfo,
    ContainerSpec,
    LogLine,
    PullError,
    RegistryAuth,
)
from services.launcher.engine.enginestats import Counters, counters
from services.launcher.engine.enginestreams import LogPump, open_stream
from services.launcher.engine.enginethreads import EngineThreads
from services.launcher.engine.tasklabels import TaskLabels
from shared.errors import DriverError, EngineUnreachableError
from shared.lifecycle import exitcodes
from shared.tasks.envvars import CODE_MOUNT

log = structlog.get_logger("paiq.launcher.docker")

EXIT_ENGINE_FAILURE = exitcodes.ENGINE_FAILURE
CALL_THREADS = 16  # engine calls in flight at once; more (a burst of launches) wait their turn
PULL_THREADS = 4  # pulls of distinct images at once, apart: a pull may take minutes, the calls' threads never
STATS_THREADS = 64  # stats requests of one sampling round in flight at once (each waits about a second)
# A call the engine has not answered by then fails (requests' ReadTimeout; a launch's is retried by the next
# reconcile pass), and frees its thread; a stop waits its grace on top. A pull has no deadline (the SDK sets
# none: a big layer may take many minutes); a stream's headers have this one, its body none.
CALL_TIMEOUT_S = 60
T = TypeVar("T")


class DockerDriver:
    def __init__(self, client: docker.DockerClient) -> None:
        self._client = client
        self._streams: list[Any] = []
        self._calls = EngineThreads(CALL_THREADS, "paiq-docker")
        self._pulls = EngineThreads(PULL_THREADS, "paiq-docker-pull")
        self._stats = EngineThreads(STATS_THREADS, "paiq-docker-stats")

    @classmethod
    def from_url(cls, url: str | None, *, call_timeout_s: int = CALL_TIMEOUT_S) -> DockerDriver:
        """A driver for the engine at ``url`` (else the environment's, DOCKER_HOST or the local socket).
        EngineUnreachableError, saying where it looked, if no engine answers there."""
        # every thread's call keeps its connection (and the event stream its own)
        pool = CALL_THREADS + PULL_THREADS + STATS_THREADS + 8
        try:
            client = (docker.DockerClient(base_url=url, max_pool_size=pool, timeout=call_timeout_s) if url
                      else docker.from_env(max_pool_size=pool, timeout=call_timeout_s))
        except docker.errors.DockerException as e:
            where = url or "unix:///var/run/docker.sock"
            raise EngineUnreachableError(f"cannot reach the Docker engine at {where} ({_first_cause(e)}): start it, "
                                         "or point PAIQ_DOCKER_URL (or DOCKER_HOST) at one") from None
        return cls(client)

    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` on the engine's threads: when all are taken it waits its turn there."""
        return await asyncio.get_running_loop().run_in_executor(self._calls, functools.partial(fn, *args, **kwargs))

    async def image_id(self, image: str) -> str | None:
        try:
            found = await self._call(self._client.images.get, image)
        except docker.errors.ImageNotFound:
            return None
        except docker.errors.APIError as e:  # e.g. "invalid reference format": no pull can help
            raise PullError(f"image {image} refused", reason=f"image {image} cannot be used: {_explain(e)}",
                            login_refused=False) from None
        return str(found.id)

    async def pull(self, image: str, auth: RegistryAuth | None) -> None:
        repo, tag = parse_repository_tag(image)
        auth_config = None
        if auth is not None:
            auth_config = {"username": auth.username, "password": auth.password.get_secret_value(),
                           "serveraddress": auth.server}
        try:
            await asyncio.get_running_loop().run_in_executor(self._pulls, functools.partial(
                self._client.images.pull, repo, tag=tag or "latest", auth_config=auth_config))
        except docker.errors.APIError as e:
            reason, refused = _pull_reason(image, e, auth)
            raise PullError(f"pull of {image} failed", reason=reason, login_refused=refused) from None

    async def ensure_network(self, name: str) -> str:
        """The gateway address of the task network ``name``, made when missing: a bridge whose containers
        reach one another only through published ports (inter-container traffic off). One made otherwise
        (by hand, or by another program) is refused: its tasks would reach each other's every port."""
        def ensure() -> dict[str, Any]:
            try:
                return dict(self._client.api.inspect_network(name))
            except docker.errors.NotFound:
                pass
            try:
                self._client.api.create_network(name, driver="bridge", check_duplicate=True, options={
                    ICC_OPTION: "false"}, labels={NETWORK_LABEL: "tasks"})
            except docker.errors.APIError as e:
                if e.status_code != 409:  # another launcher of this engine made it meanwhile
                    raise
            return dict(self._client.api.inspect_network(name))

        try:
            attrs = await self._call(ensure)
        except docker.errors.APIError as e:
            raise DriverError(f"task network {name} unavailable", exit_code=EXIT_ENGINE_FAILURE,
                              reason=f"the engine refused the task network {name}: {_explain(e)}") from e
        return network_gateway(name, attrs)

    async def run(self, spec: ContainerSpec) -> str:
        api: Any = self._client.api
        # The SDK's containers.create, less the inspect it makes after (a GET a task, of nothing used here).
        args = _create_container_args({**create_args(spec), "image": spec.image, "version": api._version})
        try:
            container_id = str((await self._call(api.create_container, **args))["Id"])
        except docker.errors.APIError as e:
            if e.status_code == 409:  # the name is taken: this task's container exists already
                return await self._start_existing(spec)
            raise DriverError(f"create {spec.name} failed", exit_code=EXIT_ENGINE_FAILURE,
                              reason=f"the engine refused to create the container: {_explain(e)}") from e
        try:
            await self._put_files(container_id, spec)
            await self._call(api.start, container_id)
        except docker.errors.APIError as e:
            await self.remove(container_id)
            code, reason = start_failure(_explain(e))
            raise DriverError(f"start {spec.name} failed", exit_code=code, reason=reason) from e
        return container_id

    async def _put_files(self, container_id: str, spec: ContainerSpec) -> None:
        api: Any = self._client.api
        if spec.files and not await self._call(api.put_archive, container_id, "/", files_archive(spec.files)):
            raise docker.errors.APIError(f"the engine did not take the files of {spec.name}")

    async def _start_existing(self, spec: ContainerSpec) -> str:
        """The id of the container called ``spec.name``; started, with its files, if it was created and
        never started."""
        name = spec.name
        container = await self._call(self._client.containers.get, name)
        if container.status == "created":
            try:
                await self._put_files(str(container.id), spec)
                await self._call(container.start)
            except docker.errors.APIError as e:
                code, reason = start_failure(_explain(e))
                raise DriverError(f"start {name} failed", exit_code=code, reason=reason) from e
        return str(container.id)

    async def first_file(self, container_id: str, paths: tuple[str, ...]) -> str | None:
        api: Any = self._client.api

        def exists(path: str) -> bool:  # HEAD of the archive route: the file's stat, not its content
            response = api.head(api._url("/containers/{0}/archive", container_id), params={"path": path},
                                timeout=api.timeout)  # the session's own verbs take no default deadline
            if response.status_code == 404:
                return False
            api._raise_for_status(response)
            return True

        for path in paths:
            try:
                if await self._call(exists, path):
                    return path
            except docker.errors.APIError as e:
                raise DriverError(f"stat {path} in {container_id[:12]} failed", exit_code=EXIT_ENGINE_FAILURE,
                                  reason=f"the engine could not look into the container: {_explain(e)}") from e
        return None

    async def find(self, name: str) -> ContainerInfo | None:
        try:
            container = await self._call(self._client.containers.get, name)
        except docker.errors.NotFound:
            return None
        return _info(container.attrs)

    async def list_managed(self, node_id: str) -> list[ContainerInfo]:
        # The engine's summaries, not the SDK's models: those inspect each container after listing,
        # and fail when one is removed in between. Ended ones are inspected for their exit.
        summaries = await self._call(
            self._client.api.containers, all=True, filters={"label": TaskLabels.selector("node", node_id)})
        found: list[ContainerInfo] = []
        for s in summaries:
            if s.get("State") in ("running", "created"):
                found.append(ContainerInfo(
                    id=s["Id"], name=str((s.get("Names") or [""])[0]).lstrip("/"), status=s["State"],
                    running=s["State"] == "running",
                    labels={k: v for k, v in (s.get("Labels") or {}).items() if TaskLabels.is_ours(k)}))
            elif (info := await self._inspect(s["Id"])) is not None:
                found.append(info)
        return found

    async def list_running(self, node_id: str) -> list[ContainerInfo]:
        summaries = await self._call(
            self._client.api.containers, filters={"label": TaskLabels.selector("node", node_id), "status": "running"})
        return [ContainerInfo(id=s["Id"], name=str((s.get("Names") or [""])[0]).lstrip("/"), status="running",
                              running=True,
                              labels={k: v for k, v in (s.get("Labels") or {}).items() if TaskLabels.is_ours(k)})
                for s in summaries]

    async def written(self, node_id: str) -> dict[str, int]:
        summaries = await self._call(
            self._client.api.containers, size=True,
            filters={"label": TaskLabels.selector("node", node_id), "status": "running"})
        return {str(s["Id"]): int(s.get("SizeRw") or 0) for s in summaries}

    async def counters(self, container_id: str) -> Counters | None:
        # The engine answers a stats request on its collector's next tick (about a second), so the calls
        # of a sampling round wait side by side in a pool of their own, never ahead of the launches' calls.
        loop = asyncio.get_running_loop()
        try:
            stats = await loop.run_in_executor(self._stats, lambda: self._client.api.stats(
                container_id, stream=False, one_shot=True))
        except docker.errors.NotFound:
            return None  # removed since the round listed it
        except (docker.errors.APIError, requests.exceptions.RequestException, ValueError) as e:
            # Refused, or no stats in the answer: the engine answers a container being removed with an
            # empty body, which the SDK fails to decode (JSONDecodeError). That costs this sample only.
            log.debug("no stats for a container this round", container=container_id[:12],
                      error=_explain(e) if isinstance(e, docker.errors.APIError) else repr(e))
            return None
        return counters(stats)

    async def exits(self) -> AsyncIterator[ContainerExit]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[dict[str, Any] | BaseException] = asyncio.Queue()
        api: Any = self._client.api  # its private helpers, which the SDK's own streams use
        response = await self._call(open_stream, api, api._url("/events"), {"filters": convert_filters(
            {"type": "container", "event": "die", "label": TaskLabels.selector("job")})})
        stream = CancellableStream(api._stream_helper(response, decode=True), response)
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
                labels={k: v for k, v in attrs.items() if TaskLabels.is_ours(k)},
                exit_code=int(attrs.get("exitCode", info.exit_code if info else -1) or 0),
                oom_killed=bool(info and info.oom_killed),
            )

    async def _inspect(self, container_id: str) -> ContainerInfo | None:
        try:
            attrs = await self._call(self._client.api.inspect_container, container_id)
        except docker.errors.NotFound:
            return None
        return _info(attrs)

    async def stop(self, container_id: str, grace_seconds: int) -> None:
        try:
            await self._call(self._client.api.stop, container_id, timeout=grace_seconds)
        except docker.errors.NotFound:
            return

    async def logs_tail(self, container_id: str, lines: int, *, stderr_only: bool = False) -> str:
        try:
            raw = await self._call(self._client.api.logs, container_id, stdout=not stderr_only,
                                          stderr=True, tail=lines)
        except docker.errors.APIError as e:
            if e.status_code in (404, 409):  # gone, or being removed
                return ""
            raise
        return (raw if isinstance(raw, bytes) else b"".join(raw)).decode(errors="replace")

    async def follow_logs(self, container_id: str, since_ns: int = 0) -> AsyncIterator[LogLine]:
        """The container's lines, stdout and stderr told apart, until it stops.

        The SDK's own log stream drops which stream a frame came from, so the engine's multiplexed
        answer is read here (:func:`_frames`). A dedicated thread blocks on it: one per followed
        container, never the default executor's few workers.
        """
        params: dict[str, Any] = {"stdout": 1, "stderr": 1, "follow": 1, "timestamps": 1}
        if since_ns:
            params["since"] = f"{since_ns // 1_000_000_000}.{since_ns % 1_000_000_000:09d}"
        try:
            api: Any = self._client.api
            response = await self._call(open_stream, api, api._url("/containers/{0}/logs", container_id), params)
        except docker.errors.APIError as e:
            if e.status_code in (404, 409):  # gone, or being removed
                return
            raise
        pump = LogPump(response, since_ns, asyncio.get_running_loop())
        threading.Thread(target=pump.run, name=f"docker-logs-{container_id[:12]}", daemon=True).start()
        try:
            while (item := await pump.queue.get()) is not None:
                if isinstance(item, BaseException):
                    raise DriverError("the container's log stream broke", exit_code=EXIT_ENGINE_FAILURE,
                                      reason=str(item)) from item
                yield item
        finally:
            pump.close()

    async def remove(self, container_id: str) -> None:
        try:
            await self._call(self._client.api.remove_container, container_id, force=True)
        except docker.errors.NotFound:
            return
        except docker.errors.APIError as e:
            if e.status_code != 409:  # removal already in progress
                raise

    async def close(self) -> None:
        """Streams closed, calls still queued cancelled; calls running end in their daemon threads (at
        ``CALL_TIMEOUT_S`` at most, when the engine hangs), never holding the process's exit."""
        for stream in self._streams:
            stream.close()
        for threads in (self._calls, self._pulls, self._stats):
            threads.shutdown(wait=False, cancel_futures=True)
        self._client.close()  # its idle connections closed (no call to the engine)


def create_args(spec: ContainerSpec) -> dict[str, Any]:
    """What the engine is asked for one task (pure, so the GPU requests are tested without GPUs)."""
    kwargs: dict[str, Any] = {
        "name": spec.name,
        "entrypoint": ["/bin/sh", "-c"],
        "command": [spec.command, *spec.command_args],
        "environment": spec.env,
        "labels": spec.labels,
        "network_mode": spec.network_mode,
        # Raw sockets let a task forge packets on the task network (ARP, spoofed sources); ping works
        # without them (Docker allows ICMP echo sockets to every group of a container).
        "cap_drop": ["NET_RAW"],
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
    if spec.binds:  # a bind of a missing host directory fails the start (never created empty)
        kwargs["mounts"] = [Mount(target=inside, source=host, type="bind", read_only=ro)
                            for host, inside, ro in spec.binds]
    if spec.pids_limit:
        kwargs["pids_limit"] = spec.pids_limit
    if spec.published_ports:
        kwargs["ports"] = {f"{p}/{proto}": (spec.publish_ip, p) if spec.publish_ip else p
                           for p in spec.published_ports for proto in ("tcp", "udp")}
    if spec.log_max_bytes:
        kwargs["log_config"] = LogConfig(type="json-file",
                                         config={"max-size": str(spec.log_max_bytes), "max-file": "2"})
    if spec.gpus:
        kwargs["device_requests"] = [DeviceRequest(
            driver="nvidia", device_ids=[str(g) for g in spec.gpus], capabilities=[["gpu"]])]
    return kwargs


ICC_OPTION = "com.docker.network.bridge.enable_icc"
NETWORK_LABEL = "paiq.network"


def network_gateway(name: str, attrs: dict[str, Any]) -> str:
    """The IPv4 gateway of a task network as the engine describes it (pure); DriverError when the network
    is not one paiq may put tasks on (not a bridge, inter-container traffic on, or no IPv4 gateway)."""
    gateways = [str(c.get("Gateway") or "") for c in (attrs.get("IPAM") or {}).get("Config") or []]
    gateway = next((g for g in gateways if g and ":" not in g), "")
    if attrs.get("Driver") != "bridge":
        problem = f"is a {attrs.get('Driver')} network, not a bridge"
    elif str((attrs.get("Options") or {}).get(ICC_OPTION, "true")).lower() != "false":
        problem = "lets its containers reach one another's every port (inter-container traffic on)"
    elif not gateway:
        problem = "has no IPv4 gateway"
    else:
        return gateway
    raise DriverError(f"task network {name} refused", exit_code=EXIT_ENGINE_FAILURE,
                      reason=f"the Docker network {name} {problem}: remove it (docker network rm {name}) and the "
                             "launcher makes it as tasks need it, or name another with PAIQ_TASK_NETWORK")


def files_archive(files: tuple[ContainerFile, ...]) -> bytes:
    """A tar of ``files`` to unpack at ``/``: each file and its directories, owned by root."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        made: set[str] = set()
        for f in files:
            parts = PurePosixPath(f.path).relative_to("/").parts
            for depth in range(1, len(parts)):
                folder = "/".join(parts[:depth])
                if folder not in made:
                    made.add(folder)
                    info = tarfile.TarInfo(folder)
                    info.type, info.mode = tarfile.DIRTYPE, 0o700 if folder.startswith("root") else 0o755
                    tar.addfile(info)
            data = f.content.get_secret_value()
            info = tarfile.TarInfo("/".join(parts))
            info.size, info.mode = len(data), f.mode
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _info(attrs: dict[str, Any]) -> ContainerInfo:
    state = attrs.get("State") or {}
    return ContainerInfo(
        id=attrs["Id"],
        name=str(attrs.get("Name", "")).lstrip("/"),
        labels={k: v for k, v in ((attrs.get("Config") or {}).get("Labels") or {}).items()
                if TaskLabels.is_ours(k)},
        running=bool(state.get("Running")),
        status=str(state.get("Status", "")),
        exit_code=None if state.get("Running") else state.get("ExitCode"),
        oom_killed=bool(state.get("OOMKilled")),
    )


def _first_cause(e: BaseException) -> str:
    """The root of a chain of exceptions, in words: "No such file or directory", not three wrappers' text."""
    root: BaseException = e
    while root.__cause__ or root.__context__:
        root = root.__cause__ or root.__context__  # type: ignore[assignment]
    text = root.strerror if isinstance(root, OSError) and root.strerror else str(root)
    return text.removeprefix("Error while fetching server API version: ")


def _explain(e: docker.errors.APIError) -> str:
    return str(e.explanation or e)


def _pull_reason(image: str, e: docker.errors.APIError, auth: RegistryAuth | None) -> tuple[str, bool]:
    """Why a pull failed, in words (and whether the registry refused a login). Never quotes credentials."""
    text = _explain(e)
    lowered = text.lower()
    if "unauthorized" in lowered or "authentication required" in lowered or "no basic auth" in lowered:
        if auth is not None:
            return f"image {image} could not be pulled: the registry refused the credentials in {auth.source}", True
        return f"image {image} could not be pulled: the registry requires a login (set authFile)", False
    if "not found" in lowered or "manifest unknown" in lowered:
        return f"image {image} does not exist in its registry", False
    return f"image {image} could not be pulled: {text}", False


def start_failure(text: str) -> tuple[int, str]:
    """The exit code and reason of a container the engine created but could not start."""
    lowered = text.lower()
    if "executable file not found" in lowered or ("no such file or directory" in lowered and "exec" in lowered):
        return exitcodes.COMMAND_NOT_FOUND, f"the image has no /bin/sh to run the command: {text}"
    if "permission denied" in lowered and "exec" in lowered:
        return exitcodes.COMMAND_NOT_EXECUTABLE, f"the image's /bin/sh cannot be executed: {text}"
    return EXIT_ENGINE_FAILURE, f"the engine could not start the container: {text}"
