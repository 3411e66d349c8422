"""A hung Docker engine (it accepts calls and never answers) stalls neither ``paiq up``'s API nor its database
nor its scheduler (issue 37, item 5): the launcher's engine calls wait on threads of their own, never on the
event loop's default executor, which the database client (its DNS resolution and connects) and the API (bcrypt
of a login) need. It used to: each stuck call held one of that executor's few threads (six on two cores),
and a scheduler pass then waited 139 s in getaddrinfo, a POST over 120 s.

``paiq up`` talks to the real engine through a proxy the test freezes (bytes held both ways, new connections
accepted and never answered); jobs submitted meanwhile are placed and wait to start; once it flows again they
run to SUCCEEDED.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aiohttp
import docker
import pytest

from services.cli.client import paiq_client
from tests.chaos.proxy import FreezingProxy
from tests.e2e.conftest import job_config
from tests.infra import ADMIN_PASSWORD, ADMIN_USER, start_platform, stop_platform, wait_final

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

ENGINE_SOCKET = "/var/run/docker.sock"
ANSWER_WITHIN_S = 5.0  # every API call while the engine hangs
PATIENCE_S = 30.0  # how long a call is waited for, so that a stalled one is measured, not just failed


async def timed(session: aiohttp.ClientSession, method: str, url: str, **kw: Any) -> tuple[str, int, float]:
    """(what was called, its status (0: no answer within PATIENCE_S), seconds it took)."""
    began = time.monotonic()
    try:
        async with session.request(method, url, timeout=aiohttp.ClientTimeout(total=PATIENCE_S), **kw) as resp:
            await resp.read()
            status = resp.status
    except (TimeoutError, aiohttp.ClientError):
        status = 0
    return f"{method} {url.split('/', 3)[-1]}", status, time.monotonic() - began


async def test_a_hung_engine_stalls_neither_the_api_nor_the_scheduler(
        tmp_path: Path, docker_client: docker.DockerClient) -> None:
    proxy = FreezingProxy(target_socket=ENGINE_SOCKET)
    await proxy.start()
    # Started in a thread: the proxy serves the platform's engine calls from this loop meanwhile.
    platform = await asyncio.to_thread(start_platform, "all-in-one", tmp_path,
                                       PAIQ_DOCKER_URL=f"tcp://127.0.0.1:{proxy.port}")
    try:
        async with paiq_client(platform.api) as anonymous:
            token = (await anonymous.login(ADMIN_USER, ADMIN_PASSWORD))["token"]
        auth = {"Authorization": f"Bearer {token}"}
        jobs_url = f"{platform.api}/api/v1/user/{ADMIN_USER}/jobs"
        names = [f"hung{i}" for i in range(10)]
        proxy.freeze()
        async with aiohttp.ClientSession() as session:
            submitted = await asyncio.gather(*(
                timed(session, "POST", jobs_url, headers=auth, json=job_config(n, command="echo ok"))
                for n in names[:8]))
            await asyncio.sleep(3)  # their launches' engine calls are in flight now, and hang
            # side by side, so that the database client opens connections (which resolve on the default executor)
            calls = [timed(session, "GET", f"{platform.api}/api/v1/jobs?username={ADMIN_USER}", headers=auth)
                     for _ in range(12)]
            calls += [timed(session, "GET", f"{platform.api}/healthz") for _ in range(2)]
            calls += [timed(session, "POST", f"{platform.api}/api/v1/token",
                            json={"username": ADMIN_USER, "password": ADMIN_PASSWORD}) for _ in range(2)]
            calls += [timed(session, "POST", jobs_url, headers=auth, json=job_config(n, command="echo ok"))
                      for n in names[8:]]
            answered = [*submitted, *await asyncio.gather(*calls)]
            said = ", ".join(f"{what} -> {status} in {took:.1f} s" for what, status, took in answered)
            slow = [(what, status, round(took, 1)) for what, status, took in answered if took > ANSWER_WITHIN_S]
            assert not slow, f"API calls slower than {ANSWER_WITHIN_S:g} s while the engine hangs: {slow}; all: {said}"
            refused = [(what, status) for what, status, _ in answered
                       if status not in (200, 201, 202) and not (what.startswith("GET healthz") and status == 503)]
            assert not refused, f"refused while the engine hangs: {refused}; all: {said}"
            print(f"while the engine hangs, the slowest of {len(answered)} API calls took "
                  f"{max(took for _, _, took in answered):.2f} s")
            placed = await _wait_placed(session, platform.api, auth, names)
        proxy.thaw()
        async with paiq_client(platform.api, token) as api:
            finals = await asyncio.gather(*(wait_final(api, ADMIN_USER, n, limit_s=150) for n in names))
        states = {n: detail["jobStatus"]["state"] for n, (detail, _) in zip(names, finals, strict=True)}
        assert set(states.values()) == {"SUCCEEDED"}, (states, placed)
    finally:
        proxy.thaw()
        await asyncio.to_thread(stop_platform, platform, docker_client)
        await proxy.stop()


async def _wait_placed(session: aiohttp.ClientSession, api: str, auth: dict[str, str], names: list[str],
                       limit_s: float = 20) -> dict[str, str]:
    """Every job placed by the scheduler and waiting for its launch ("starting"), none running: the engine
    hangs. Their subStates, by name."""
    deadline = time.monotonic() + limit_s
    seen: dict[str, str] = {}
    while time.monotonic() < deadline:
        async with session.get(f"{api}/api/v1/jobs?username={ADMIN_USER}", headers=auth,
                               timeout=aiohttp.ClientTimeout(total=ANSWER_WITHIN_S)) as resp:
            jobs = await resp.json()
        seen = {j["name"]: f"{j['state']}/{j['subState']}" for j in jobs if j["name"] in names}
        if len(seen) == len(names) and set(seen.values()) == {"WAITING/starting"}:
            return seen
        assert not any(s.startswith("RUNNING") or s.endswith("completed") for s in seen.values()), \
            f"a job got past its launch while the engine hangs: {seen}"
        await asyncio.sleep(0.5)
    raise AssertionError(f"not every job was placed within {limit_s:g} s while the engine hangs: {seen}")
