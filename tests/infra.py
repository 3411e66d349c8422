"""Real test infrastructure: a MongoDB-wire server, RabbitMQ, the Docker engine, a registry, and paiq.

Everything here is started for real; nothing stands in for a component under test.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import docker
import docker.errors

from shared.db.embedded import free_port
from shared.jobconfig.sealing import new_key
from shared.ops.listen import PORT_TAKEN

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
FINAL = {"SUCCEEDED", "FAILED", "STOPPED"}
ADMIN_USER = "admin"
ADMIN_PASSWORD = uuid.uuid4().hex
# bcrypt's cost on test platforms and stores: every test user's password would cost a quarter of a CPU-second
# at paiq's default (12) to set and to log in with (most of the 22% less CPU the tests used from 2026-11-29,
# tests/cpuuse.py); the default itself is tested (tests/integration/test_password_cost.py) and the compose stack
# runs with it.
HASH_ROUNDS = 4


def rabbitmqctl(*args: str, timeout_s: float = 60) -> str:
    """``rabbitmqctl ARGS`` against the broker the tests use: the test run's own node when tests/run.sh
    started one (tests/testbroker.sh), else the machine's. Its output; CalledProcessError on failure."""
    node, home = os.environ.get("PAIQ_TEST_RABBITMQ_NODE"), os.environ.get("PAIQ_TEST_RABBITMQ_DIR")
    if node and home:
        cmd = ["/usr/lib/rabbitmq/bin/rabbitmqctl", "-n", node, *args]
        env = {**os.environ, "HOME": home}
    else:
        cmd, env = ["rabbitmqctl", *args], dict(os.environ)
    done = subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=timeout_s)
    return done.stdout.decode(errors="replace")


def unique(prefix: str = "t") -> str:
    return f"{prefix}{uuid.uuid4().hex[:10]}"


# --- a Docker registry ---------------------------------------------------------------------------


@dataclass
class Registry:
    host: str
    proc: subprocess.Popen[bytes]

    def image(self, name: str) -> str:
        return f"{self.host}/{name}"


@contextmanager
def run_registry(root: Path, *, login: tuple[str, str] | None = None) -> Iterator[Registry]:
    """A docker-registry of its own on a free port; with ``login`` (user, password), it admits only that user."""
    port = free_port()
    root.mkdir(parents=True, exist_ok=True)
    config = root / "config.yml"
    auth = ""
    if login is not None:
        htpasswd = root / "htpasswd"
        htpasswd.write_text(subprocess.run(["htpasswd", "-Bbn", *login], check=True, capture_output=True,
                                           text=True).stdout)
        auth = f"auth:\n  htpasswd:\n    realm: paiq-test\n    path: {htpasswd}\n"
    config.write_text(
        "version: 0.1\n"
        f"storage:\n  filesystem:\n    rootdirectory: {root / 'data'}\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
        f"{auth}"
    )
    with (root / "registry.log").open("wb") as out:
        proc = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=out, stderr=out)
    try:
        _wait_port(port, proc, "docker-registry")
        yield Registry(host=f"127.0.0.1:{port}", proc=proc)
    finally:
        proc.terminate()
        proc.wait(10)


def _wait_port(port: int, proc: subprocess.Popen[bytes], what: str, limit_s: float = 20) -> None:
    import socket

    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not listen on {port} within {limit_s}s")


def push_image(client: docker.DockerClient, source: str, target: str,
               auth: dict[str, str] | None = None) -> None:
    """Tag ``source`` as ``target``, push it, and remove the local tag (so a job must pull it)."""
    client.images.get(source).tag(target)
    repo, _, tag = target.rpartition(":")
    out = client.images.push(repo, tag=tag, auth_config=auth)
    if '"error"' in out:
        raise RuntimeError(f"push of {target} failed: {out}")
    client.images.remove(target)


# --- paiq itself, as real processes --------------------------------------------------------------


@dataclass
class Platform:
    """A running paiq: all-in-one (``paiq up``) or the four services as separate processes."""

    shape: str
    api: str
    node_id: str
    env: dict[str, str]
    workdir: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    ops: dict[str, str] = field(default_factory=dict)  # service -> its /healthz and /metrics base URL
    extra_nodes: list[str] = field(default_factory=list)

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.workdir.glob("*.log")))


PORT_BLOCKS = Path(tempfile.gettempdir()) / "paiq-test-port-blocks"
BLOCK_COUNT = 156


def claim_port_block() -> int:
    """A block of 100 task ports in 10000-25599 that no other platform of a running test process holds: below
    the ephemeral ports (32768 up) the OS gives the tests' own listeners (brokers, APIs), and below the test
    brokers' distribution ports (25700 up). Every platform of a machine publishes its tasks' ports on one
    engine, so two platforms given the same port would refuse each other's containers ("port is already
    allocated"): a block is claimed by a file made exclusively, naming the claiming process, and a claim of a
    process that is gone is taken over."""
    PORT_BLOCKS.mkdir(exist_ok=True)
    first = free_port() % BLOCK_COUNT
    for i in range(2 * BLOCK_COUNT):
        base = (first + i) % BLOCK_COUNT
        path = PORT_BLOCKS / str(base)
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                holder = int(path.read_text() or "0")
                os.kill(holder, 0)
                continue  # held by a live process
            except (ValueError, ProcessLookupError, FileNotFoundError):
                path.unlink(missing_ok=True)  # its process is gone: free again (taken on the second round)
                continue
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        return base
    raise RuntimeError(f"all {BLOCK_COUNT} blocks of task ports are held by running test processes")


def release_port_block(env: dict[str, str]) -> None:
    low = int(env["PAIQ_NODE_PORT_RANGE"].split("-")[0])
    if 10000 <= low < 10000 + BLOCK_COUNT * 100 and (low - 10000) % 100 == 0:
        (PORT_BLOCKS / str((low - 10000) // 100)).unlink(missing_ok=True)


def platform_env(workdir: Path, node_id: str, **extra: str) -> dict[str, str]:
    base = claim_port_block()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAIQ_")}
    env.update({
        "PAIQ_API_PORT": str(free_port()),
        "PAIQ_DATA_DIR": str(workdir / "data"),
        "PAIQ_NODE_ID": node_id,
        "PAIQ_NODE_CPUS": "32",
        "PAIQ_NODE_MEMORY_MB": "65536",
        "PAIQ_NODE_PORT_RANGE": f"{10000 + base * 100}-{10000 + base * 100 + 99}",
        "PAIQ_RECONCILE_SECONDS": "2",
        "PAIQ_RETRY_BACKOFF_MS": "200",
        "PAIQ_STOP_GRACE_SECONDS": "2",
        "PAIQ_PROFILE_SECONDS": "1",  # every e2e task is profiled, often enough for a test to see it
        "PAIQ_BODY_TIMEOUT_SECONDS": "3",
        "PAIQ_LOG_FORMAT": "json",
        "PAIQ_LOG_LEVEL": "debug",
        "PAIQ_ADMIN_USER": ADMIN_USER,
        "PAIQ_ADMIN_PASSWORD": ADMIN_PASSWORD,
        "PAIQ_PASSWORD_HASH_ROUNDS": str(HASH_ROUNDS),
    })
    env.update(extra)
    return env


def start_platform(shape: str, workdir: Path, *, mongo_uri: str | None = None, amqp_url: str | None = None,
                   new_session: bool = False, **extra: str) -> Platform:
    """``new_session``: each process leads its own process group (a test may signal it as a terminal does).

    Its ports are picked free here but bound later by the platform's processes; a port another test takes
    meanwhile stops a process, saying so (shared/ops/listen.py), and the platform is started again on
    new ports, at most twice more."""
    tries = [workdir, workdir / "try1", workdir / "try2"]
    for folder in tries[:-1]:
        with contextlib.suppress(PortTakenError):
            return _start_platform(shape, folder, mongo_uri=mongo_uri, amqp_url=amqp_url, new_session=new_session,
                                   **extra)
    return _start_platform(shape, tries[-1], mongo_uri=mongo_uri, amqp_url=amqp_url, new_session=new_session, **extra)


class PortTakenError(RuntimeError):
    """A platform process could not listen on the port picked for it: another process took it first."""


def _start_platform(shape: str, workdir: Path, *, mongo_uri: str | None, amqp_url: str | None, new_session: bool,
                    **extra: str) -> Platform:
    workdir.mkdir(parents=True, exist_ok=True)
    node_id = unique("node-")
    env = platform_env(workdir, node_id, **extra)
    api = f"http://127.0.0.1:{env['PAIQ_API_PORT']}"
    platform = Platform(shape=shape, api=api, node_id=node_id, env=env, workdir=workdir)
    if shape == "all-in-one":
        commands = {"paiq-up": [PYTHON, "-m", "services.cli.main", "up"]}
    else:
        assert mongo_uri and amqp_url
        prefix = unique("paiqtest-")
        env.update({"PAIQ_MONGODB_URI": mongo_uri, "PAIQ_AMQP_URL": amqp_url,
                    "PAIQ_MONGODB_DATABASE": prefix.replace("-", "_"),
                    "PAIQ_EXCHANGE": f"{prefix}.events", "PAIQ_QUEUE_PREFIX": prefix})
        env.setdefault("PAIQ_SECRETS_KEY", new_key())  # paiq up makes its own in the data directory
        commands = {name: [PYTHON, "-m", f"services.{name}"] for name in ("status", "scheduler", "launcher", "submit")}
        for name in ("status", "scheduler", "launcher"):
            port = free_port()
            env[f"PAIQ_{name.upper()}_OPS_PORT"] = str(port)
            platform.ops[name] = f"http://127.0.0.1:{port}"
    for name, cmd in commands.items():
        with (workdir / f"{name}.log").open("wb") as out:
            platform.procs.append(subprocess.Popen(cmd, env=env, cwd=REPO, stdout=out, stderr=out,
                                                   start_new_session=new_session))
    try:
        _wait_healthy(platform)
    except BaseException:
        for p in platform.procs:  # none of them may outlive a platform that did not start
            if p.poll() is None:
                p.kill()
            p.wait()
        stop_orphaned_databases(workdir)  # a paiq up killed -9 leaves its database running
        raise
    return platform


def _wait_healthy(platform: Platform, limit_s: float = 60) -> None:
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        for p in platform.procs:
            if p.poll() is not None:
                logs = platform.logs()
                error = PortTakenError if PORT_TAKEN in logs else RuntimeError
                raise error(f"a paiq process exited with {p.returncode}:\n{logs[-4000:]}")
        try:
            with urllib.request.urlopen(platform.api + "/healthz", timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"paiq did not become healthy within {limit_s}s:\n{platform.logs()[-4000:]}")


def wait_answering(url: str, proc: subprocess.Popen[bytes], limit_s: float = 60) -> None:
    """Until ``url`` answers 200 (a service's /healthz), or RuntimeError when ``proc`` exits or time runs out."""
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args} exited with {proc.returncode} before {url} answered")
        with contextlib.suppress(urllib.error.URLError, ConnectionError, TimeoutError), \
                urllib.request.urlopen(url, timeout=2) as resp:
            if resp.status == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer within {limit_s}s")


def start_extra_launcher(platform: Platform, node_id: str, port_range: str, **extra: str) -> subprocess.Popen[bytes]:
    """Another launcher agent (another node) of a separate-shape platform, on this same Docker host."""
    env = {**platform.env, "PAIQ_NODE_ID": node_id, "PAIQ_NODE_PORT_RANGE": port_range,
           "PAIQ_LAUNCHER_OPS_PORT": str(free_port()), **extra}
    with (platform.workdir / f"launcher-{node_id}.log").open("wb") as out:
        proc = subprocess.Popen([PYTHON, "-m", "services.launcher"], env=env, cwd=REPO, stdout=out, stderr=out)
    platform.procs.append(proc)
    platform.extra_nodes.append(node_id)
    return proc


def start_extra_process(platform: Platform, name: str, module: str, **extra: str) -> subprocess.Popen[bytes]:
    """One more service process of a separate-shape platform (e.g. a standby scheduler)."""
    env = {**platform.env, **{f"PAIQ_{s.upper()}_OPS_PORT": str(free_port()) for s in ("scheduler", "status")},
           **extra}
    with (platform.workdir / f"{name}.log").open("wb") as out:
        proc = subprocess.Popen([PYTHON, "-m", module], env=env, cwd=REPO, stdout=out, stderr=out)
    platform.procs.append(proc)
    return proc


def stop_platform(platform: Platform, client: docker.DockerClient) -> None:
    for p in platform.procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in platform.procs:
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    for node in (platform.node_id, *platform.extra_nodes):
        for c in client.containers.list(all=True, filters={"label": f"paiq.node={node}"}):
            c.remove(force=True)
    stop_orphaned_databases(platform.workdir)
    release_port_block(platform.env)


def embedded_database_uri(platform: Platform) -> str:
    """The URI, with its login, of a ``paiq up``'s own SecantusDB: its child process's ``--port``, the login
    paiq up keeps in its data directory."""
    parent = platform.procs[0].pid
    login = json.loads((Path(platform.env["PAIQ_DATA_DIR"]) / "db-login.json").read_text())
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) != parent:
                continue
            argv = (stat.parent / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if b"--port" in argv:
            port = argv[argv.index(b"--port") + 1].decode()
            return (f"mongodb://{login['user']}:{login['password']}@127.0.0.1:{port}/"
                    "?directConnection=true&authSource=admin")
    raise AssertionError("paiq up's embedded database was not found among its child processes")


def secantus_processes() -> dict[int, list[bytes]]:
    """The SecantusDB servers running on this machine: each one's pid and arguments."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(b"secantusd" in a for a in args):
            found[int(proc.name)] = args
    return found


def stop_orphaned_databases(workdir: Path) -> None:
    """Kill the embedded SecantusDB of a ``paiq up`` that a test killed -9: it runs in a session of its own
    (shared.db.embedded), so it outlives its parent, its data in ``workdir``."""
    for pid, args in secantus_processes().items():
        if any(a.startswith(str(workdir).encode()) for a in args):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


# --- watching jobs and what tasks saw ---------------------------------------------------------------


async def wait_final(client: Any, user: str, name: str, limit_s: float = 90) -> tuple[dict[str, Any], list[str]]:
    """Poll a job until it is final; the last detail and every state seen, in order."""
    seen: list[str] = []
    deadline = asyncio.get_running_loop().time() + limit_s
    while True:
        detail = await client.job(user, name)
        state = detail["jobStatus"]["state"]
        if not seen or seen[-1] != state:
            seen.append(state)
        if state in FINAL:
            return detail, seen
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"job {user}~{name} not final within {limit_s}s; states {seen}: "
                                 f"{json.dumps(detail)[:2000]}")
        await asyncio.sleep(0.2)


class HostListener:
    """A TCP listener of the host that tasks reach with busybox ``nc $PAI_CONTAINER_HOST_IP PORT``: on every
    address, since a bridged task reaches the host at its node's address (the task network's gateway), a
    task on the host network at loopback."""

    def __init__(self) -> None:
        self.port = 0
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._on_conn, "0.0.0.0", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _on_conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError


class EnvSink(HostListener):
    """Collects what tasks send it: their environment (``env | nc $PAI_CONTAINER_HOST_IP PORT``)."""

    def __init__(self) -> None:
        super().__init__()
        self.received: list[dict[str, str]] = []
        self._arrived = asyncio.Condition()

    async def _on_conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = await reader.read()
        writer.close()
        env = dict(line.split("=", 1) for line in data.decode().splitlines() if "=" in line)
        async with self._arrived:
            self.received.append(env)
            self._arrived.notify_all()

    async def wait_for(self, count: int, limit_s: float = 60) -> list[dict[str, str]]:
        async with self._arrived:
            await asyncio.wait_for(self._arrived.wait_for(lambda: len(self.received) >= count), limit_s)
        return list(self.received)
