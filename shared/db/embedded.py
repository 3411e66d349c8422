"""Start SecantusDB (a MongoDB-wire server) as a child process: paiq up's embedded default, and tests'.

It runs as a separate server and is only ever talked to over the wire; nothing of it is imported.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import sys
from asyncio.subprocess import Process
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from pymongo import AsyncMongoClient
from pymongo.errors import PyMongoError

from shared.errors import StoreError


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _server_binary() -> str:
    beside = Path(sys.executable).parent / "secantusd-py"
    found = str(beside) if beside.exists() else shutil.which("secantusd-py")
    if not found:
        raise StoreError("secantusd-py not found: install paiq's dependencies (pip install -e .)")
    return found


@asynccontextmanager
async def embedded_mongo(storage: Path | None, *, log_file: Path | None = None, cache_size: str = "1G",
                         on_exit: Callable[[str], None] | None = None) -> AsyncIterator[str]:
    """Yield the URI of a private SecantusDB on a free loopback port; ``storage=None`` keeps it in memory.

    It runs in a session of its own, so a terminal's Ctrl-C reaches ``paiq up`` only, which then stops it
    last. ``on_exit`` is told if it exits by itself meanwhile (for ``paiq up``: fatal).

    ``cache_size`` is its WiredTiger cache. It must hold what is stored: with 256M, about 60,000 stored
    jobs filled it and every operation then stalled in cache eviction for minutes; 1G held 100,000 with
    no slowdown (measured with tests/benchmarks/history.py's jobs; capping the oplog did not help)."""
    if storage is not None:
        await asyncio.to_thread(storage.mkdir, parents=True, exist_ok=True)
    out = log_file.open("ab") if log_file else asyncio.subprocess.DEVNULL
    proc, uri = await _start(storage, cache_size, out, f"; its log: {log_file}" if log_file else "")
    watcher: asyncio.Task[int] | None = None
    try:
        if on_exit is not None:
            watcher = asyncio.create_task(proc.wait(), name="embedded-db-watch")
            where = f"; its log: {log_file}" if log_file else ""
            watcher.add_done_callback(lambda t: None if t.cancelled() else on_exit(
                f"the embedded MongoDB-wire server exited with code {t.result()}{where}"))
        yield uri
    finally:
        if watcher is not None:
            watcher.cancel()
        await _stop(proc)
        if log_file and not isinstance(out, int):
            out.close()


async def _start(storage: Path | None, cache_size: str, out: Any, log_hint: str,
                 tries: int = 3) -> tuple[Process, str]:
    """Start the server on a free port; the process and its URI once it answers.

    The port is free when picked but taken only when the server binds it, and on a busy host another
    process can take it meanwhile: the server then exits at once, or (worse) another server answers on
    it. So "ready" is our own process answering, and a server that exits at once is tried again on a new
    port (a bind that fails exits within a second; so does a bad storage path, which fails each try)."""
    lost: _NotOursError | None = None
    for _ in range(tries):
        port = free_port()
        proc = await asyncio.create_subprocess_exec(
            _server_binary(), "--host", "127.0.0.1", "--port", str(port),
            "--storage-path", str(storage) if storage else ":memory:", "--cache-size", cache_size,
            stdout=out, stderr=out, start_new_session=True)
        # retryWrites=false: SecantusDB 0.7.0b3 keeps a record of every retryable write and, past 10,000 of
        # them, sorts them all on each write to evict one; with 1,000 heartbeating nodes that pegged it at a
        # whole core (tests/benchmarks/nodes.py). On loopback a write is hardly ever worth retrying.
        uri = f"mongodb://127.0.0.1:{port}/?directConnection=true&retryWrites=false"
        try:
            await _wait_ready(uri, proc)
            return proc, uri
        except _NotOursError as e:
            lost = e
            await _stop(proc)
        except BaseException:
            await _stop(proc)
            raise
    raise StoreError(f"the embedded MongoDB-wire server did not start in {tries} tries, each on a new port; "
                     f"the last: {lost}{log_hint}")


class _NotOursError(Exception):
    """Our server exited at once, or another answered on its port: a port taken meanwhile, or a start that fails."""


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
