"""Start SecantusDB (a MongoDB-wire server) as a child process: paiq up's embedded default, and tests'.

It runs as a separate server and is only ever talked to over the wire; nothing of it is imported.

It never serves anyone without a login. It listens on loopback only, requires SCRAM-SHA-256
(``--auth``) with a login of its own (:class:`DbLogin`: for ``paiq up`` made once and kept in the data
directory, mode 0600, beside the secrets key; for tests one per process), and its files are its owner's
alone (directory 0700, files 0600: the server runs with umask 077, and files an older paiq left
readable are closed at start). SecantusDB makes its first user only over the wire, so a database
without it (a new one, or one an older paiq wrote) is provisioned first: started once without
``--auth`` on a fresh loopback port, the user created, stopped, then served with ``--auth``. That
takes a second, once, before any of paiq (and so any task) runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import shutil
import socket
import sys
import tempfile
from asyncio.subprocess import Process
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pymongo import AsyncMongoClient
from pymongo.errors import OperationFailure, PyMongoError

from shared.errors import StoreError

LOGIN_FILE = "db-login.json"  # in paiq up's data directory, beside secrets.key
_AUTH_FAILED = 18  # AuthenticationFailed: no such user, or another password
_USER_EXISTS = 51003


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class DbLogin:
    """The one user of an embedded server (role ``root``: the platform owns the whole server)."""

    user: str
    password: str = field(repr=False)

    def uri(self, port: int) -> str:
        # retryWrites=false: SecantusDB 0.7.0b3 keeps a record of every retryable write and, past 10,000 of
        # them, sorts them all on each write to evict one; with 1,000 heartbeating nodes that pegged it at a
        # whole core (tests/benchmarks/nodes.py). On loopback a write is hardly ever worth retrying.
        # serverMonitoringMode=poll: a streaming monitor's hello is held by the server in quarter-second polls
        # of its socket, four wake-ups a second per client for nothing (one server: no topology to follow).
        return (f"mongodb://{self.user}:{self.password}@127.0.0.1:{port}/"
                "?directConnection=true&retryWrites=false&authSource=admin&serverMonitoringMode=poll")


def new_login(user: str = "paiq") -> DbLogin:
    return DbLogin(user, secrets.token_urlsafe(32))  # URL-safe: it goes into the URI as it is


def local_login(data_dir: Path) -> DbLogin:
    """The login in ``data_dir/db-login.json``, made there (readable by its owner only) the first time."""
    path = data_dir / LOGIN_FILE
    try:
        doc = json.loads(path.read_text())
        return DbLogin(str(doc["user"]), str(doc["password"]))
    except FileNotFoundError:
        pass
    except (ValueError, KeyError, TypeError) as e:
        raise StoreError(f"{path} (the embedded database's login, made by paiq up) is not readable as "
                         f"{{\"user\": ..., \"password\": ...}}: restore it, or remove it and paiq up makes a "
                         f"new one ({e})") from None
    data_dir.mkdir(parents=True, exist_ok=True)
    login = new_login()
    try:
        with open(path, "x", opener=lambda p, flags: os.open(p, flags, 0o600)) as f:
            json.dump({"user": login.user, "password": login.password}, f)
    except FileExistsError:  # another paiq up made it meanwhile: use theirs
        return local_login(data_dir)
    return login


def owner_only(path: Path) -> None:
    """``path`` (a directory) and everything in it readable by its owner alone: 0700 folders, 0600 files.
    A database an older paiq wrote with the default umask (0644 files in a 0755 folder) is closed so."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o700)
    for root, dirs, files in os.walk(path):
        for name in dirs:
            with contextlib.suppress(FileNotFoundError):
                os.chmod(os.path.join(root, name), 0o700)
        for name in files:
            with contextlib.suppress(FileNotFoundError):  # a server's file removed meanwhile
                os.chmod(os.path.join(root, name), 0o600)


def _private_log(path: Path) -> Any:
    """The server's log, appended to, its owner's alone (an older paiq's, 0644, closed too)."""
    out = open(path, "ab", opener=lambda p, flags: os.open(p, flags, 0o600))  # noqa: SIM115 - closed by its caller
    path.chmod(0o600)
    return out


def _server_binary() -> str:
    beside = Path(sys.executable).parent / "secantusd-py"
    found = str(beside) if beside.exists() else shutil.which("secantusd-py")
    if not found:
        raise StoreError("secantusd-py not found: install paiq's dependencies (pip install -e .)")
    return found


@asynccontextmanager
async def embedded_mongo(storage: Path | None, *, login: DbLogin | None = None, log_file: Path | None = None,
                         cache_size: str = "1G", on_exit: Callable[[str], None] | None = None) -> AsyncIterator[str]:
    """Yield the URI (with its login) of a private SecantusDB on a free loopback port.

    ``storage=None``: a database of its own in a temporary directory, removed at the end (tests); it starts
    from a copy of one provisioned once per process with a login of that process, unless ``login`` is given.
    Otherwise ``login`` is required: the server's user, made when the database lacks it.

    It runs in a session of its own, so a terminal's Ctrl-C reaches ``paiq up`` only, which then stops it
    last. ``on_exit`` is told if it exits by itself meanwhile (for ``paiq up``: fatal).

    ``cache_size`` is its WiredTiger cache. It must hold what is stored: with 256M, about 60,000 stored
    jobs filled it and every operation then stalled in cache eviction for minutes; 1G held 100,000 with
    no slowdown (measured with tests/benchmarks/history.py's jobs; capping the oplog did not help), and stalled
    at 71,000-81,000 with paiq up beside the fill. ``paiq up`` sizes it and watches it: shared.db.footprint."""
    scratch: Path | None = None
    if storage is None:
        scratch = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="paiq-db-"))
        storage = scratch / "db"
        if login is None:
            login = _process_login()
            await _copy_template(storage, login, cache_size)
    elif login is None:
        raise StoreError("an embedded database on disk needs its login (paiq up keeps it in its data directory)")
    out: Any = asyncio.subprocess.DEVNULL
    try:
        await asyncio.to_thread(owner_only, storage)
        if log_file:
            out = await asyncio.to_thread(_private_log, log_file)
        hint = f"; its log: {log_file}" if log_file else ""
        proc, uri = await _start(storage, login, cache_size, out, hint)
        watcher: asyncio.Task[int] | None = None
        try:
            if on_exit is not None:
                watcher = asyncio.create_task(proc.wait(), name="embedded-db-watch")
                watcher.add_done_callback(lambda t: None if t.cancelled() else on_exit(
                    f"the embedded MongoDB-wire server exited with code {t.result()}{hint}"))
            yield uri
        finally:
            if watcher is not None:
                watcher.cancel()
            await _stop(proc)
    finally:
        if not isinstance(out, int):
            out.close()
        if scratch is not None:
            await asyncio.to_thread(shutil.rmtree, scratch, True)


_PROCESS_LOGIN: DbLogin | None = None
_TEMPLATES: dict[str, Path] = {}


def _process_login() -> DbLogin:
    global _PROCESS_LOGIN  # one login for every test server of this process
    if _PROCESS_LOGIN is None:
        _PROCESS_LOGIN = new_login("paiq-test")
    return _PROCESS_LOGIN


async def _copy_template(storage: Path, login: DbLogin, cache_size: str) -> None:
    """``storage`` as a copy of an empty database that has ``login`` (provisioned once per process and
    login: a provisioning costs a server's start and stop, a copy milliseconds)."""
    template = _TEMPLATES.get(login.password)
    if template is None or not template.exists():
        made = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="paiq-db-template-")) / "db"
        await asyncio.to_thread(owner_only, made)
        await _provision(made, login, cache_size, asyncio.subprocess.DEVNULL, "")
        template = _TEMPLATES.setdefault(login.password, made)  # two at once: the first kept
    await asyncio.to_thread(shutil.copytree, template, storage)


async def _start(storage: Path, login: DbLogin, cache_size: str, out: Any, log_hint: str,
                 tries: int = 3) -> tuple[Process, str]:
    """Serve ``storage`` with ``--auth``; the process and its URI once it answers to ``login``.

    A database without the login (new, or an older paiq's) is provisioned first. The port is free when
    picked but taken only when the server binds it, and on a busy host another process can take it
    meanwhile: the server then exits at once, or (worse) another server answers on it. So "ready" is our
    own process answering, and a server that exits at once is tried again on a new port (a bind that fails
    exits within a second; so does a bad storage path, which fails each try)."""
    if not (storage / "WiredTiger").exists():
        await _provision(storage, login, cache_size, out, log_hint)
    lost: _NotOursError | None = None
    provisioned = False
    for _ in range(tries):
        proc, port = await _spawn(storage, cache_size, out, auth=True)
        uri = login.uri(port)
        try:
            await _wait_ready(uri, proc)
            return proc, uri
        except _NoLoginError:
            await _stop(proc)
            if provisioned:
                raise StoreError(f"the embedded MongoDB-wire server refused its own login after it was made"
                                 f"{log_hint}") from None
            await _provision(storage, login, cache_size, out, log_hint)
            provisioned = True
        except _NotOursError as e:
            lost = e
            await _stop(proc)
        except BaseException:
            await _stop(proc)
            raise
    raise StoreError(f"the embedded MongoDB-wire server did not start in {tries} tries, each on a new port; "
                     f"the last: {lost}{log_hint}")


async def _provision(storage: Path, login: DbLogin, cache_size: str, out: Any, log_hint: str,
                     tries: int = 3) -> None:
    """Give the database at ``storage`` the user ``login`` (made, or its password set), served for that
    moment without ``--auth`` on a fresh loopback port, then stopped."""
    lost: _NotOursError | None = None
    for _ in range(tries):
        proc, port = await _spawn(storage, cache_size, out, auth=False)
        try:
            uri = f"mongodb://127.0.0.1:{port}/?directConnection=true&retryWrites=false"
            try:
                await _wait_ready(uri, proc)
            except _NotOursError as e:
                lost = e
                continue
            client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(uri)
            try:
                try:
                    await client.admin.command("createUser", login.user, pwd=login.password, roles=["root"])
                except OperationFailure as e:
                    if e.code != _USER_EXISTS:
                        raise
                    await client.admin.command("updateUser", login.user, pwd=login.password, roles=["root"])
            finally:
                await client.close()
            return
        finally:
            await _stop(proc)
    raise StoreError(f"the embedded MongoDB-wire server could not be given its login in {tries} tries, each on "
                     f"a new port; the last: {lost}{log_hint}")


# Flags for the server's oplog (none: its defaults, an hour or 100,000 entries); paiq reads no oplog.
OPLOG_ARGS: tuple[str, ...] = ()


async def _spawn(storage: Path, cache_size: str, out: Any, *, auth: bool) -> tuple[Process, int]:
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        _server_binary(), "--host", "127.0.0.1", "--port", str(port), "--storage-path", str(storage),
        "--cache-size", cache_size, *OPLOG_ARGS, *(("--auth",) if auth else ()),
        stdout=out, stderr=out, start_new_session=True, umask=0o077)
    return proc, port


class _NotOursError(Exception):
    """Our server exited at once, or another answered on its port: a port taken meanwhile, or a start that fails."""


class _NoLoginError(Exception):
    """Our server answered, but not to our login: its database lacks the user (new, or an older paiq's)."""


async def _stop(proc: Process) -> None:
    if proc.returncode is None:
        proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except TimeoutError:
            proc.kill()
            await proc.wait()


async def _wait_ready(uri: str, proc: Process, limit_s: float = 30.0) -> None:
    """Return once ``proc`` itself answers at ``uri``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(uri, serverSelectionTimeoutMS=500)
    try:
        while True:
            if proc.returncode is not None:
                raise _NotOursError(f"it exited with code {proc.returncode} before it answered")
            try:
                status = await client.admin.command("serverStatus")
            except OperationFailure as e:
                if e.code == _AUTH_FAILED:
                    raise _NoLoginError from None
                raise
            except PyMongoError:
                if loop.time() > deadline:
                    raise StoreError(f"the embedded MongoDB-wire server did not answer within {limit_s}s") from None
                await asyncio.sleep(0.2)
                continue
            if status.get("pid") != proc.pid:
                raise _NotOursError(f"another server (pid {status.get('pid')}) answered on its port")
            return
    finally:
        await client.close()
