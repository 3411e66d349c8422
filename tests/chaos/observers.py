"""What the chaos test watches while it breaks things: /healthz of every service, every container start
on the Docker engine, and every answer of the REST API.

They record only; the assertions are made afterwards, from the records, in test_chaos.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import docker

TaskKey = tuple[str, str, int, int]  # job id, role, index, attempt
HEALTH_TIMEOUT_S = 5.0  # a /healthz that takes longer than this counts as no answer
API_TIMEOUT_S = 30.0  # a request may wait out an outage (15 s) but must then be answered


# --- /healthz ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HealthSample:
    service: str
    at_s: float
    code: int | None  # None: no HTTP answer (refused, timed out)
    body: dict[str, Any] | None
    error: str = ""

    def short(self) -> str:
        if self.code is None:
            return f"t={self.at_s:.1f}s no answer within {HEALTH_TIMEOUT_S:g}s ({self.error})"
        reason = (self.body or {}).get("reason", "")
        return f"t={self.at_s:.1f}s {self.code}" + (f" ({reason})" if reason else "")


def reported_role(body: dict[str, Any] | None) -> str | None:
    """A scheduler's role from its /healthz body: ``"role": "leader"``, or ``"roles": {"scheduler": "leader"}``
    (both shapes have been proposed for the contract; either is taken)."""
    if not body:
        return None
    role = body.get("role")
    roles = body.get("roles")
    if role is None and isinstance(roles, dict):
        role = roles.get("scheduler")
    return str(role) if role is not None else None


@dataclass
class HealthProbe:
    """Polls every service's /healthz: every ``fast_s`` while :attr:`fast` (an outage), else every ``slow_s``."""

    urls: dict[str, str]  # service -> /healthz URL
    began: float
    fast_s: float = 0.5
    slow_s: float = 2.0
    fast: bool = False
    samples: list[HealthSample] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None

    async def check(self, session: aiohttp.ClientSession, service: str) -> HealthSample:
        at = time.monotonic() - self.began
        try:
            async with session.get(self.urls[service], timeout=aiohttp.ClientTimeout(total=HEALTH_TIMEOUT_S)) as resp:
                text = await resp.text()
                try:
                    body = json.loads(text)
                except ValueError:
                    body = {"raw": text[:200]}
                return HealthSample(service, at, resp.status, body if isinstance(body, dict) else {"raw": body})
        except (aiohttp.ClientError, TimeoutError) as e:
            return HealthSample(service, at, None, None, type(e).__name__)

    async def check_all(self, session: aiohttp.ClientSession) -> list[HealthSample]:
        return list(await asyncio.gather(*(self.check(session, s) for s in self.urls)))

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="chaos-health-probe")

    async def _loop(self) -> None:
        async with aiohttp.ClientSession() as session:
            while True:
                self.samples.extend(await self.check_all(session))
                await asyncio.sleep(self.fast_s if self.fast else self.slow_s)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def between(self, service: str, start_s: float, end_s: float) -> list[HealthSample]:
        return [s for s in self.samples if s.service == service and start_s <= s.at_s <= end_s]


# --- containers ------------------------------------------------------------------------------------


class ContainerWatch:
    """Every container start of the given nodes, from the engine's event stream, in a thread of its own.

    paiq removes a finished task's container once its log is saved, so what is left on the engine at the
    end cannot show a task that ran twice; the event stream sees every start, removed containers included."""

    def __init__(self, nodes: set[str]) -> None:
        self.nodes = nodes
        self.started: dict[TaskKey, set[str]] = defaultdict(set)
        self._lock = threading.Lock()
        self._client = docker.from_env()
        self._stream: Any = None
        self._thread: threading.Thread | None = None
        self._closing = False
        self.error = ""

    def start(self) -> None:
        self._stream = self._client.events(decode=True, filters={"type": "container", "event": "start",
                                                                 "label": "paiq.job"})
        self._thread = threading.Thread(target=self._read, name="chaos-container-watch", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for event in self._stream:
                self.note(str(event.get("id", "")), event.get("Actor", {}).get("Attributes", {}))
        except Exception as e:  # closing the stream may end the loop with an error; anything else is reported
            if not self._closing:
                self.error = repr(e)
        if not self._closing:
            self.error = self.error or "the engine's event stream ended early"


    def note(self, container_id: str, labels: dict[str, str]) -> None:
        """Count one container of a task attempt (from an event, or from the final listing)."""
        if labels.get("paiq.node") not in self.nodes:
            return
        try:
            key = (labels["paiq.job"], labels["paiq.role"], int(labels["paiq.index"]), int(labels["paiq.attempt"]))
        except (KeyError, ValueError):
            return
        with self._lock:
            self.started[key].add(container_id)

    def stop(self) -> None:
        self._closing = True
        if self._stream is not None:
            with contextlib.suppress(Exception):
                self._stream.close()
        if self._thread is not None:
            self._thread.join(10)
        self._client.close()

    def twice(self) -> dict[TaskKey, set[str]]:
        with self._lock:
            return {k: set(v) for k, v in self.started.items() if len(v) > 1}

    def jobs_seen(self) -> set[str]:
        with self._lock:
            return {k[0] for k in self.started}


# --- the REST API ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ApiAnswer:
    at_s: float
    method: str
    path: str
    status: int | None  # None: no answer (connection refused, reset, timed out)
    detail: str = ""
    took_s: float = 0.0


@dataclass
class Api:
    """The REST API as a client sees it; every answer (and every missing one) is recorded with its time."""

    base: str
    session: aiohttp.ClientSession
    began: float
    token: str = ""
    answers: list[ApiAnswer] = field(default_factory=list)

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int | None, Any]:
        """(status, JSON body) or (None, error text) when no answer came."""
        status, parsed, _ = await self.call_with_headers(method, path, body)
        return status, parsed

    async def call_with_headers(self, method: str, path: str, body: Any = None,
                                headers: dict[str, str] | None = None) -> tuple[int | None, Any, dict[str, str]]:
        """(status, JSON body, answer's headers) or (None, error text, {}) when no answer came."""
        at = time.monotonic() - self.began
        headers = {**({"Authorization": f"Bearer {self.token}"} if self.token else {}), **(headers or {})}
        try:
            async with self.session.request(method, self.base + path, json=body, headers=headers,
                                            timeout=aiohttp.ClientTimeout(total=API_TIMEOUT_S)) as resp:
                text = await resp.text()
                try:
                    parsed: Any = json.loads(text)
                except ValueError:
                    parsed = text
                self.answers.append(ApiAnswer(at, method, path, resp.status, text[:300] if resp.status >= 500 else "",
                                              time.monotonic() - self.began - at))
                return resp.status, parsed, dict(resp.headers)
        except (aiohttp.ClientError, TimeoutError) as e:
            waited = time.monotonic() - self.began - at
            self.answers.append(ApiAnswer(at, method, path, None, f"{e!r}"[:200] + f" after {waited:.1f}s"))
            return None, repr(e), {}
