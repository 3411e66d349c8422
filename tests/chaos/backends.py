"""The chaos suite's own database and broker: started by the test, killed and restarted by the test.

Neither is shared with the rest of the suite: the MongoDB-wire server keeps its data on disk (so a
``kill -9`` and a restart on the same port and directory is a crash, not a wipe), and RabbitMQ is a
private node with its own name, ports, cookie and directories, so stopping its app never touches the
broker on 5672 that the other tests use.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

from pymongo import MongoClient
from pymongo.errors import PyMongoError

from shared.db.embedded import free_port

RABBITMQ_BIN = Path("/usr/lib/rabbitmq/bin")
START_LIMIT_S = 60.0
BROKER_USER = "paiq-chaos"  # the private broker's one user (no guest)
DB_USER = "paiq-chaos"  # the disk database's one user


def port_open(port: int) -> bool:
    """Whether something accepts TCP connections on the loopback ``port``."""
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def log_tail(path: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of a log file (for failure messages)."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode(errors="replace")
    except OSError as e:
        return f"(no log at {path}: {e})"
    return "\n".join(text.splitlines()[-lines:])


def _free_port_below(limit: int) -> int:
    """A free port of 25700 up to ``limit`` (an ephemeral one could put the CLI's ports past 65535)."""
    for port in range(25700, limit):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in 25700-{limit}")


def _stop_process(proc: subprocess.Popen[bytes], grace_s: float = 15) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
    proc.wait()


class DiskDatabase:
    """``secantusd-py`` on a fixed port and storage directory, to be killed -9 and started again."""

    def __init__(self, root: Path, binary: str) -> None:
        self.root = root
        self.storage = root / "storage"
        self.log = root / "secantusd.log"
        self.port = free_port()
        self.binary = binary
        self.proc: subprocess.Popen[bytes] | None = None
        self.password = secrets.token_hex(16)  # never a leading "-", which rabbitmqctl takes for an option
        self.login_made = False

    @property
    def uri(self) -> str:
        return (f"mongodb://{DB_USER}:{self.password}@127.0.0.1:{self.port}/"
                "?directConnection=true&retryWrites=false&authSource=admin")

    def start(self) -> None:
        """Start the server (again), with authentication as paiq's services require, and return once it
        answers ``ping``. The first start makes its user first (served for that moment without --auth)."""
        self.storage.mkdir(parents=True, exist_ok=True)
        if not self.login_made:
            self._spawn(auth=False)
            open_uri = f"mongodb://127.0.0.1:{self.port}/?directConnection=true"
            self._wait_ready(open_uri)
            with MongoClient(open_uri) as client:
                client.admin.command("createUser", DB_USER, pwd=self.password, roles=["root"])
            self.stop()
            self.login_made = True
        self._spawn(auth=True)
        self._wait_ready(self.uri)

    def _spawn(self, *, auth: bool) -> None:
        with self.log.open("ab") as out:
            out.write(f"\n=== chaos harness: starting secantusd-py at {time.strftime('%X')} ===\n".encode())
            out.flush()
            self.proc = subprocess.Popen(
                [self.binary, "--host", "127.0.0.1", "--port", str(self.port), "--storage-path", str(self.storage),
                 "--cache-size", "256M", "--sync-on-commit", *(["--auth"] if auth else [])], stdout=out, stderr=out)

    def _wait_ready(self, uri: str) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + START_LIMIT_S
        client: MongoClient[dict[str, object]] = MongoClient(uri, serverSelectionTimeoutMS=500)
        try:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"secantusd-py exited with {self.proc.returncode}:\n{log_tail(self.log)}")
                try:
                    client.admin.command("ping")
                    return
                except PyMongoError:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"secantusd-py did not answer within {START_LIMIT_S}s:\n"
                                           f"{log_tail(self.log)}") from None
                    time.sleep(0.2)
        finally:
            client.close()

    def kill(self) -> None:
        """``kill -9``: no chance to flush or close anything."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None:
            _stop_process(self.proc)


class PrivateBroker:
    """A RabbitMQ node of this test alone: own node name, AMQP and distribution ports, cookie, directories."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.node = f"paiqchaos-{uuid.uuid4().hex[:8]}@localhost"
        self.port = free_port()
        self.dist_port = _free_port_below(30000)  # the CLI's own ports are this + 10000..10010
        self.log = root / "rabbitmq-server.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.password = secrets.token_hex(16)  # never a leading "-", which rabbitmqctl takes for an option
        self.login_made = False

    @property
    def url(self) -> str:
        return f"amqp://{BROKER_USER}:{self.password}@127.0.0.1:{self.port}/"

    def _env(self) -> dict[str, str]:
        r = self.root
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RABBITMQ_", "PAIQ_"))}
        env.update({
            "HOME": str(r),  # the Erlang cookie of this node and its CLI calls lives here, not in ~rabbitmq
            "RABBITMQ_NODENAME": self.node, "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port), "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(r / "mnesia"), "RABBITMQ_LOG_BASE": str(r / "log"),
            "RABBITMQ_PID_FILE": str(r / "rabbitmq.pid"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(r / "enabled_plugins"),  # none: no management port clash
            "RABBITMQ_CONF_ENV_FILE": str(r / "rabbitmq-env.conf"),
            "RABBITMQ_CONFIG_FILE": str(r / "rabbitmq"), "RABBITMQ_ADVANCED_CONFIG_FILE": str(r / "advanced.config"),
        })
        return env

    def start(self) -> None:
        """Start the node and return once its AMQP listener accepts connections and the app has booted."""
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "enabled_plugins").write_text("[].\n")
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen([str(RABBITMQ_BIN / "rabbitmq-server")], env=self._env(), cwd=self.root,
                                         stdout=out, stderr=out)
        self._wait_listening()
        self.ctl("await_startup", "--timeout", "60")
        if not self.login_made:  # paiq never logs in as guest: a user of its own, made once (kept across restarts)
            self.ctl("add_user", BROKER_USER, self.password)
            self.ctl("set_permissions", "-p", "/", BROKER_USER, ".*", ".*", ".*")
            self.ctl("delete_user", "guest")
            self.login_made = True

    def _wait_listening(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + START_LIMIT_S
        while not port_open(self.port):
            if self.proc.poll() is not None:
                raise RuntimeError(f"rabbitmq-server exited with {self.proc.returncode}:\n{log_tail(self.log)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"rabbitmq node {self.node} did not listen within {START_LIMIT_S}s:\n"
                                   f"{log_tail(self.log)}")
            time.sleep(0.2)

    def ctl(self, *args: str, timeout_s: float = 90) -> str:
        """``rabbitmqctl -n <node> ARGS``; its standard output, or RuntimeError with what it said."""
        done = subprocess.run([str(RABBITMQ_BIN / "rabbitmqctl"), "-n", self.node, *args], env=self._env(),
                              cwd=self.root, capture_output=True, timeout=timeout_s, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"rabbitmqctl {' '.join(args)} failed ({done.returncode}): "
                               f"{done.stdout.decode(errors='replace')}{done.stderr.decode(errors='replace')}")
        return done.stdout.decode(errors="replace")

    def stop_app(self) -> None:
        self.ctl("stop_app")

    def start_app(self) -> None:
        self.ctl("start_app")
        deadline = time.monotonic() + START_LIMIT_S
        while not port_open(self.port) and time.monotonic() < deadline:
            time.sleep(0.2)

    def queues(self) -> dict[str, tuple[int, int]]:
        """Every queue of the node: name -> (messages, messages ready)."""
        out = self.ctl("list_queues", "name", "messages", "messages_ready", "--formatter", "json", "--quiet")
        rows = json.loads(out or "[]")
        return {str(r["name"]): (int(r["messages"]), int(r["messages_ready"])) for r in rows}

    def stop(self) -> None:
        """Stop the node for good and delete everything it wrote."""
        if self.proc is None:
            return
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            self.ctl("stop", timeout_s=60)
        _stop_process(self.proc)
        shutil.rmtree(self.root, ignore_errors=True)
