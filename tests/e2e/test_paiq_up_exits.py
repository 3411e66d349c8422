"""``paiq up`` exits (code 1, one clear line) within 10 s when its embedded database dies, whatever it was
doing: here with calls in flight into a database frozen for 5 s, then killed -9 (issue 37: it used to close
its API port and keep running for minutes, so no supervisor restarted it and a second one could start)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path

import aiohttp
import docker
import pytest

from tests.infra import ADMIN_PASSWORD, ADMIN_USER, start_platform, stop_platform

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


def _database_pid(parent: int) -> int:
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == parent and \
                    b"secantusd" in (stat.parent / "cmdline").read_bytes():
                return int(stat.parent.name)
    raise AssertionError("paiq up's database was not found among its children")


async def _keep_calling(api: str, token: str, stop: asyncio.Event, n: int) -> None:
    """Submissions and reads in flight all along (each waits on the database, frozen or gone)."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        i = 0
        while not stop.is_set():
            i += 1
            body = {"jobName": f"inflight{n}x{i}", "image": "local/busybox:latest",
                    "taskRoles": [{"name": "main", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 128,
                                   "command": "true"}]}
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with session.post(f"{api}/api/v1/user/{ADMIN_USER}/jobs", json=body,
                                        headers={"Authorization": f"Bearer {token}"}) as resp:
                    await resp.read()
                async with session.get(f"{api}/api/v1/jobs") as resp:
                    await resp.read()


async def test_paiq_up_exits_within_10_s_when_its_database_dies_with_calls_in_flight(
        tmp_path: Path, docker_client: docker.DockerClient) -> None:
    platform = start_platform("all-in-one", tmp_path)
    try:
        up = platform.procs[0]
        db = _database_pid(up.pid)
        async with aiohttp.ClientSession() as session, session.post(
                f"{platform.api}/api/v1/token", json={"username": ADMIN_USER, "password": ADMIN_PASSWORD}) as resp:
            token = (await resp.json())["token"]
        stop = asyncio.Event()
        load = asyncio.gather(*(_keep_calling(platform.api, token, stop, n) for n in range(8)))
        await asyncio.sleep(1)
        os.kill(db, signal.SIGSTOP)  # frozen: calls in flight wait on it
        await asyncio.sleep(5)
        os.kill(db, signal.SIGKILL)
        died = time.monotonic()
        for _ in range(300):
            if up.poll() is not None:
                break
            await asyncio.sleep(0.1)
        took = time.monotonic() - died
        stop.set()
        load.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await load
        assert up.returncode == 1, f"paiq up still ran {took:.0f} s after its database died (or exited " \
                                   f"{up.returncode}):\n{platform.logs()[-3000:]}"
        assert took <= 12, f"paiq up exited {took:.1f} s after its database died"
        log = (platform.workdir / "paiq-up.log").read_text(errors="replace")
        assert "the embedded MongoDB-wire server exited with code -9" in log, log[-2000:]
        assert "Traceback" not in log.split("exited with code -9", 1)[1], "one clear line, no traceback"
    finally:
        stop_platform(platform, docker_client)
