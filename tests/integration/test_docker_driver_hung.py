"""The driver in front of an engine that hangs (a proxy that stops forwarding: calls accepted, never answered).

Its calls wait on threads of its own, a bounded number, never on the event loop's default executor (which the
database client resolves and connects through); each fails after the client's call timeout, freeing its
thread, and so does the opening of the engine's event stream; once the engine answers again, so does the
driver. (docs, Reliability; the whole platform's side is tests/e2e/test_hung_engine.py.)
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import requests.exceptions

from services.launcher.engine.docker_driver import CALL_THREADS, DockerDriver
from tests.chaos.proxy import FreezingProxy
from tests.integration.test_docker_driver import spec, watching

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

ENGINE_SOCKET = "/var/run/docker.sock"
TIMEOUT_S = 2


def engine_threads() -> int:
    return sum(t.name.startswith("paiq-docker-") and not t.name.startswith("paiq-docker-stats")
               for t in threading.enumerate())


async def test_calls_to_a_hung_engine_fail_after_their_timeout_on_threads_of_their_own() -> None:
    proxy = FreezingProxy(target_socket=ENGINE_SOCKET)
    await proxy.start()
    # in a thread: it asks the engine its version, which the proxy serves from this loop
    driver = await asyncio.to_thread(DockerDriver.from_url, f"tcp://127.0.0.1:{proxy.port}", call_timeout_s=TIMEOUT_S)
    loop = asyncio.get_running_loop()
    try:
        assert await driver.find("paiq-no-such-container") is None
        proxy.freeze()
        began = time.monotonic()
        hung = [asyncio.create_task(driver.find(f"paiq-no-such-{i}")) for i in range(CALL_THREADS + 4)]
        await asyncio.sleep(0.5)
        assert engine_threads() <= CALL_THREADS, "bounded: the calls beyond wait their turn"
        resolved = time.monotonic()
        await asyncio.wait_for(loop.getaddrinfo("localhost", 27017), 2)  # as the database client connects
        assert time.monotonic() - resolved < 1, "the default executor is free while the engine hangs"
        results = await asyncio.gather(*hung, return_exceptions=True)
        took = time.monotonic() - began
        assert all(isinstance(r, requests.exceptions.RequestException) for r in results), results
        # two turns of TIMEOUT_S: CALL_THREADS calls, then the 4 that waited for a thread
        assert 2 * TIMEOUT_S - 0.5 <= took < 2 * TIMEOUT_S + 4, f"{took:.1f} s"

        opened = time.monotonic()
        with pytest.raises(requests.exceptions.RequestException):
            await anext(driver.exits())  # the event stream's headers never come
        assert time.monotonic() - opened < TIMEOUT_S + 3

        proxy.thaw()
        assert await driver.find("paiq-no-such-container") is None, "the engine answers again"
    finally:
        proxy.thaw()
        await driver.close()
        await proxy.stop()


async def test_streams_quiet_for_longer_than_the_call_timeout_keep_flowing(node_id: str) -> None:
    """Only a stream's headers have the call timeout: its body may stay quiet for as long as the container does.
    (A timeout of 4 s, not 2: the exit's inspect is a call too, and a loaded engine took over 2 s to answer one.)"""
    timeout_s = 4
    driver = DockerDriver.from_url(None, call_timeout_s=timeout_s)
    try:
        s = spec(node_id, f"echo early; sleep {2 * timeout_s}; echo late; exit 3")
        watcher = await watching(driver, s.name)
        cid = await driver.run(s)
        lines = [line.text async for line in driver.follow_logs(cid)]
        assert lines == ["early\n", "late\n"]
        ex = await asyncio.wait_for(watcher, 10)
        assert ex.id == cid and ex.exit_code == 3
    finally:
        await driver.close()
