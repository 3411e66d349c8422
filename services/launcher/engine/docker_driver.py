"""The Docker engine behind :class:`ContainerDriver`.

The docker SDK is synchronous: each call goes through ``asyncio.to_thread``; exits come from the
engine's event stream, read in one thread and handed to the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import struct
import tarfile
import threading
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import quote

import docker
import docker.errors
import requests.exceptions
import structlog
from docker.types import CancellableStream, DeviceRequest, LogConfig, Mount
from docker.utils import parse_repository_tag

from services.launcher.engine.driver import (
    ContainerExit,
    ContainerFile,
    ContainerInfo,
    ContainerSpec,
    LogLine,
    PullError,
    RegistryAuth,
)
from services.launcher.engine.tasklabels import TaskLabels
from services.launcher.profiling.enginestats import Counters, counters, engine_time_ns
from shared.errors import DriverError, EngineUnreachableError
from shared.lifecycle import exitcodes
from shared.tasks.envvars import CODE_MOUNT

log = structlog.get_logger("paiq.launcher.docker")

EXIT_ENGINE_FAILURE = exitcodes.ENGINE_FAILURE
STATS_THREADS = 64  # stats requests of one sampling round in flight at once
FRAME_HEADER = struct.Struct(">BxxxL")  # a multiplexed log frame's header: stream (1 stdout, 2 stderr), length


class DockerDriver:
    def __init__(self, client: docker.DockerClient) -> None:
        self._client = client
        self._streams: list[Any] = []
        self._stats_pool = ThreadPoolExecutor(STATS_THREADS, thread_name_prefix="paiq-stats")

    @classmethod
    def from_url(cls, url: str | None) -> DockerDriver:
        """A driver for the engine at ``url`` (else the environment's, DOCKER_HOST or the local socket).
        EngineUnreachableError, saying where it looked, if no engine answers there."""
        pool = STATS_THREADS + 8  # stats calls in flight side by side keep their connections
        try:
            client = (docker.DockerClient(base_url=url, max_pool_size=pool) if url
                      else docker.from_env(max_pool_size=pool))
        except docker.errors.DockerException as e:
            where = url or "unix:///var/run/docker.sock"
            raise EngineUnreachableError(f"cannot reach the Docker engine at {where} ({_first_cause(e)}): start it, "
                                         "or point PAIQ_DOCKER_URL (or DOCKER_HOST) at one") from None
        return cls(client)

    async def has_image(self, image: str) -> bool:
        try:
            await asyncio.to_thread(self._client.images.get, image)
        except docker.errors.ImageNotFound:
            return False
        except docker.errors.APIError as e:  # e.g. "invalid reference format": no pull can help
            raise PullError(f"image {image} refused", reason=f"image {image} cannot be used: {_explain(e)}",
                            login_refused=False) from None
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
            attrs = await asyncio.to_thread(ensure)
        except docker.errors.APIError as e:
            raise DriverError(f"task network {name} unavailable", exit_code=EXIT_ENGINE_FAILURE,
                              reason=f"the engine refused the task network {name}: {_explain(e)}") from e
        return network_gateway(name, attrs)

    async def run(self, spec: ContainerSpec) -> str:
        kwargs = create_args(spec)
        try:
            container = await asyncio.to_thread(self._client.containers.create, spec.image, **kwargs)
        except docker.errors.APIError as e:
            if e.status_code == 409:  # the name is taken: this task's container exists already
                return await self._start_existing(spec)
            raise DriverError(f"create {spec.name} failed", exit_code=EXIT_ENGINE_FAILURE,
                              reason=f"the engine refused to create the container: {_explain(e)}") from e
        try:
            await self._put_files(container, spec)
            await asyncio.to_thread(container.start)
        except docker.errors.APIError as e:
            await self.remove(str(container.id))
            code, reason = start_failure(_explain(e))
            raise DriverError(f"start {spec.name} failed", exit_code=code, reason=reason) from e
        return str(container.id)

    @staticmethod
    async def _put_files(container: Any, spec: ContainerSpec) -> None:
        if spec.files and not await asyncio.to_thread(container.put_archive, "/", files_archive(spec.files)):
            raise docker.errors.APIError(f"the engine did not take the files of {spec.name}")

    async def _start_existing(self, spec: ContainerSpec) -> str:
        """The id of the container called ``spec.name``; started, with its files, if it was created and
        never started."""
        name = spec.name
        container = await asyncio.to_thread(self._client.containers.get, name)
        if container.status == "created":
            try:
                await self._put_files(container, spec)
                await asyncio.to_thread(container.start)
            except docker.errors.APIError as e:
                code, reason = start_failure(_explain(e))
                raise DriverError(f"start {name} failed", exit_code=code, reason=reason) from e
        return str(container.id)

    async def first_file(self, container_id: str, paths: tuple[str, ...]) -> str | None:
        api: Any = self._client.api

        def exists(path: str) -> bool:  # HEAD of the archive route: the file's stat, not its content
            response = api.head(api._url("/containers/{0}/archive", container_id), params={"path": path})
            if response.status_code == 404:
                return False
            api._raise_for_status(response)
            return True

        for path in paths:
            try:
                if await asyncio.to_thread(exists, path):
                    return path
            except docker.errors.APIError as e:
                raise DriverError(f"stat {path} in {container_id[:12]} failed", exit_code=EXIT_ENGINE_FAILURE,
                                  reason=f"the engine could not look into the container: {_explain(e)}") from e
        return None

    async def find(self, name: str) -> ContainerInfo | None:
        try:
            container = await asyncio.to_thread(self._client.containers.get, name)
        except docker.errors.NotFound:
            return None
        return _info(container.attrs)

    async def list_managed(self, node_id: str) -> list[ContainerInfo]:
        # The engine's summaries, not the SDK's models: those inspect each container after listing,
        # and fail when one is removed in between. Ended ones are inspected for their exit.
        summaries = await asyncio.to_thread(
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
        summaries = await asyncio.to_thread(
            self._client.api.containers, filters={"label": TaskLabels.selector("node", node_id), "status": "running"})
        return [ContainerInfo(id=s["Id"], name=str((s.get("Names") or [""])[0]).lstrip("/"), status="running",
                              running=True,
                              labels={k: v for k, v in (s.get("Labels") or {}).items() if TaskLabels.is_ours(k)})
                for s in summaries]

    async def written(self, node_id: str) -> dict[str, int]:
        summaries = await asyncio.to_thread(
            self._client.api.containers, size=True,
            filters={"label": TaskLabels.selector("node", node_id), "status": "running"})
        return {str(s["Id"]): int(s.get("SizeRw") or 0) for s in summaries}

    async def counters(self, container_id: str) -> Counters | None:
        # The engine answers a stats request on its collector's next tick (about a second), so the calls
        # of a sampling round wait side by side in a pool of their own, never in the default executor.
        loop = asyncio.get_running_loop()
        try:
            stats = await loop.run_in_executor(self._stats_pool, lambda: self._client.api.stats(
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
        stream = await asyncio.to_thread(
            self._client.events, decode=True,
            filters={"type": "container", "event": "die", "label": TaskLabels.selector("job")})
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
            attrs = await asyncio.to_thread(self._client.api.inspect_container, container_id)
        except docker.errors.NotFound:
            return None
        return _info(attrs)

    async def stop(self, container_id: str, grace_seconds: int) -> None:
        try:
            await asyncio.to_thread(self._client.api.stop, container_id, timeout=grace_seconds)
        except docker.errors.NotFound:
            return

    async def logs_tail(self, container_id: str, lines: int, *, stderr_only: bool = False) -> str:
        try:
            raw = await asyncio.to_thread(self._client.api.logs, container_id, stdout=not stderr_only,
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
            response = await asyncio.to_thread(_open_logs, self._client.api, container_id, params)
        except docker.errors.APIError as e:
            if e.status_code in (404, 409):  # gone, or being removed
                return
            raise
        pump = _LogPump(response, since_ns, asyncio.get_running_loop())
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
            await asyncio.to_thread(self._client.api.remove_container, container_id, force=True)
        except docker.errors.NotFound:
            return
        except docker.errors.APIError as e:
            if e.status_code != 409:  # removal already in progress
                raise

    async def close(self) -> None:
        for stream in self._streams:
            stream.close()
        self._stats_pool.shutdown(wait=False, cancel_futures=True)
        await asyncio.to_thread(self._client.close)


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


def _open_logs(api: docker.APIClient, container_id: str, params: dict[str, Any]) -> requests.Response:
    """The engine's log answer, streamed, through the SDK's public surface (its client is a requests
    session): no read timeout, since a followed container may stay quiet for hours."""
    url = f"{api.base_url}/v{api.api_version}/containers/{quote(container_id, safe='')}/logs"
    response = api.get(url, params=params, stream=True, timeout=None)
    try:
        response.raise_for_status()
    except requests.exceptions.HTTPError as e:
        raise docker.errors.create_api_error_from_http_exception(e) from e
    return response


class _LogPump:
    """Reads one log answer in its own thread and hands its lines to the event loop (None: the end)."""

    def __init__(self, response: requests.Response, since_ns: int, loop: asyncio.AbstractEventLoop) -> None:
        # The SDK's cancellable wrapper: closing it shuts the socket down, which wakes the blocked read
        # (closing the response would wait for that read to return: until the container writes or ends).
        self._frames = CancellableStream(_frames(response), response)
        self._since_ns = since_ns
        self._loop = loop
        self._closed = threading.Event()
        self.queue: asyncio.Queue[LogLine | BaseException | None] = asyncio.Queue()

    def _put(self, item: LogLine | BaseException | None) -> None:
        try:
            self._loop.call_soon_threadsafe(self.queue.put_nowait, item)
        except RuntimeError:  # the loop is gone
            self._closed.set()

    def run(self) -> None:
        try:
            for stream, payload in self._frames:
                if self._closed.is_set():
                    return
                line = _log_line(stream, payload, self._since_ns)
                if line is not None:
                    self._put(line)
        except Exception as e:
            if not self._closed.is_set():
                self._put(e)
        finally:
            self._put(None)

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(Exception):
            self._frames.close()


def _frames(response: requests.Response) -> Iterator[tuple[int, bytes]]:
    """(stream, payload) of each frame of a non-TTY container's log answer (1 stdout, 2 stderr).

    Not ``docker.utils.socket.frames_iter``: that reads a hijacked socket (attach, exec), whose bytes are
    the frames themselves. A log answer is an HTTP body sent chunked, which the HTTP client has partly
    read ahead into its buffer: its frames are read from the decoded body (``response.raw``), whole.
    """
    while True:
        header = response.raw.read(FRAME_HEADER.size)
        if len(header) < FRAME_HEADER.size:
            return
        stream, length = FRAME_HEADER.unpack(header)
        if not length:
            continue
        payload = response.raw.read(length)
        if not payload:
            return
        yield stream, payload


def _log_line(stream: int, payload: bytes, since_ns: int) -> LogLine | None:
    stamp, _, text = payload.decode(errors="replace").partition(" ")
    try:
        ts = engine_time_ns(stamp)
    except ValueError:
        ts, text = 0, payload.decode(errors="replace")
    if since_ns and ts <= since_ns:
        return None  # kept already (the engine's `since` is inclusive)
    return LogLine(stream="stderr" if stream == 2 else "stdout", ts_ns=ts, text=text)
