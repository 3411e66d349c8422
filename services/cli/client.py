"""A small client of paiq's REST API, for the CLI, the tests and anyone scripting paiq."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import quote, urlencode

import aiohttp

from shared.errors import PaiqError


class ApiCallError(PaiqError):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.status = status
        self.code = code
        self.message = message


def _refusal(resp: aiohttp.ClientResponse, body: Any) -> ApiCallError:
    """The API's refusal (an answer of status 400 or more, ``body`` its JSON) as the error to raise."""
    body = body if isinstance(body, dict) else {}
    return ApiCallError(resp.status, str(body.get("code", "UnknownError")), str(body.get("message", resp.reason)))


class _Frame:
    """Server-Sent Events as the standard reads them: an event is whole only at the blank line after it, and
    its id counts from then (a stream cut between an event's ``id:`` and its end, a server killed mid-write,
    is taken up again before that event, not after it). A line cut short (no line end) is dropped."""

    def __init__(self) -> None:
        self.id: str | None = None  # the last whole event's id
        self._id: str | None = None
        self._data: list[str] = []

    def feed(self, raw: bytes) -> dict[str, Any] | None:
        """One line of the stream; the event it completes (its ``data`` as JSON), if any."""
        if not raw.endswith(b"\n"):
            return None  # the stream ended mid-line
        line = raw.decode().rstrip("\r\n")
        if line:
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "id" and "\0" not in value:
                self._id = value
            elif field == "data":
                self._data.append(value)
            return None
        data, self._data = self._data, []
        if self._id is not None:
            self.id = self._id
        return dict(json.loads("\n".join(data))) if data else None


class PaiqClient:
    def __init__(self, session: aiohttp.ClientSession, base_url: str, token: str | None = None) -> None:
        self._session = session
        self._base = base_url.rstrip("/")
        self._token = token

    async def _call(self, method: str, path: str, *, data: bytes | None = None, json: Any = None,
                    content_type: str = "application/json") -> tuple[Any, dict[str, str]]:
        headers: dict[str, str] = {"Content-Type": content_type} if data is not None else {}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        try:
            async with self._session.request(method, self._base + path, data=data, json=json,
                                             headers=headers) as resp:
                body = await resp.json(content_type=None) if resp.content_length != 0 else None
                if resp.status >= 400:
                    raise _refusal(resp, body)
                return body, dict(resp.headers)
        except aiohttp.ClientConnectionError as e:
            raise self._unreachable(e) from e

    async def _object(self, method: str, path: str, *, json: Any = None) -> dict[str, Any]:
        """A call whose answer is a JSON object."""
        answer, _ = await self._call(method, path, json=json)
        return dict(answer)

    def _unreachable(self, e: aiohttp.ClientConnectionError | aiohttp.ClientPayloadError) -> ApiCallError:
        return ApiCallError(0, "ConnectionError", f"cannot reach paiq at {self._base}: {e}")

    def with_token(self, token: str | None) -> PaiqClient:
        return PaiqClient(self._session, self._base, token)

    async def login(self, user: str, password: str, expiration_s: int | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"username": user, "password": password}
        if expiration_s is not None:
            body["expiration"] = expiration_s
        return await self._object("POST", "/api/v1/token", json=body)

    async def put_user(self, user: str, password: str | None, *, admin: bool = False,
                       modify: bool = False) -> dict[str, Any]:
        body: dict[str, Any] = {"username": user, "admin": admin, "modify": modify}
        if password is not None:
            body["password"] = password
        return await self._object("PUT", "/api/v1/user", json=body)

    async def users(self) -> list[dict[str, Any]]:
        """Every user (an admin's call)."""
        answer, _ = await self._call("GET", "/api/v1/user")
        return list(answer)

    async def user(self, user: str) -> dict[str, Any]:
        return await self._object("GET", f"/api/v1/user/{quote(user)}")

    async def delete_user(self, user: str) -> dict[str, Any]:
        return await self._object("DELETE", "/api/v1/user", json={"username": user})

    async def stop(self, user: str, name: str) -> dict[str, Any]:
        return await self._object("PUT", f"/api/v1/user/{quote(user)}/jobs/{quote(name)}/executionType",
                                    json={"value": "STOP"})

    async def delete(self, user: str, name: str) -> dict[str, Any]:
        return await self._object("DELETE", f"/api/v1/user/{quote(user)}/jobs/{quote(name)}")

    async def config(self, user: str, name: str) -> dict[str, Any]:
        return await self._object("GET", f"/api/v1/user/{quote(user)}/jobs/{quote(name)}/config")

    async def put_virtual_cluster(self, name: str, quota: dict[str, float] | None, users: list[str] | None,
                                  groups: list[str] | None = None, *,
                                  borrowing: dict[str, float] | None = None) -> dict[str, Any]:
        """Create or replace a VC (an admin's call). ``quota`` and ``borrowing``: percent of the cluster by
        resource (cpus, memory, gpus). A ``None`` is left out of the body (the server's default: no quota, no
        borrowing, every user, no group); ``default`` takes only ``borrowing``: pass ``None, None`` for the rest."""
        body: dict[str, Any] = {"quota": quota, "borrowing": borrowing, "users": users, "groups": groups}
        return await self._object("PUT", f"/api/v1/virtual-clusters/{quote(name)}",
                                    json={k: v for k, v in body.items() if v is not None})

    async def usage(self, query: dict[str, str]) -> dict[str, Any]:
        """The usage report (paiq's extension): ``from``, ``to``, ``by``, ``vc``, ``user``."""
        return await self._object("GET", f"/api/v1/usage?{urlencode(query)}")

    async def delete_virtual_cluster(self, name: str) -> dict[str, Any]:
        return await self._object("DELETE", f"/api/v1/virtual-clusters/{quote(name)}")

    async def virtual_clusters(self) -> dict[str, Any]:
        return await self._object("GET", "/api/v1/virtual-clusters")

    async def virtual_cluster(self, name: str) -> dict[str, Any]:
        return await self._object("GET", f"/api/v1/virtual-clusters/{quote(name)}")

    async def events(self, user: str | None = None, job: str | None = None, since: str | None = None, *,
                     reconnect: bool = False) -> AsyncIterator[dict[str, Any]]:
        """The event stream (Server-Sent Events), each event as its CloudEvents JSON: from ``since`` (an event's
        number or id, a time, or 10m/2h/1d ago; None: from now). With ``reconnect``, a stream that breaks (the
        server restarted) is taken up again after the last event seen (``Last-Event-ID``), so nothing is
        missed; a refusal (410: older than the server keeps) raises :class:`ApiCallError`."""
        query = {k: v for k, v in (("user", user), ("job", job), ("since", since)) if v}
        timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
        last: str | None = None
        delay = 0.5
        while True:
            headers = {"Last-Event-ID": last} if last else {}
            try:
                async with self._session.get(self._base + "/api/v1/events", params=query, headers=headers,
                                             timeout=timeout) as resp:
                    if resp.status >= 400:
                        raise _refusal(resp, await resp.json(content_type=None))
                    delay = 0.5
                    frame = _Frame()
                    async for raw in resp.content:
                        event = frame.feed(raw)
                        if event is not None:
                            if frame.id is not None:
                                last = frame.id
                            yield event
            except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as e:  # refused, or cut mid-answer
                if not reconnect:
                    raise self._unreachable(e) from e
            if not reconnect:
                return
            await asyncio.sleep(delay)  # the stream ended or broke: take it up again after the last event seen
            delay = min(delay * 2, 10.0)

    async def submit(self, user: str, config: bytes) -> tuple[dict[str, Any], dict[str, str]]:
        body, headers = await self._call("POST", f"/api/v1/user/{quote(user)}/jobs", data=config)
        return body, headers

    async def submit_v2(self, config: bytes, content_type: str = "text/yaml") -> tuple[dict[str, Any], dict[str, str]]:
        """Submit a protocol v2 job (YAML, or JSON) as the token's user."""
        body, headers = await self._call("POST", "/api/v2/jobs", data=config, content_type=content_type)
        return body, headers

    async def v2_config(self, user: str, name: str) -> str:
        """A job's config as a protocol v2 document (text that a YAML loader reads)."""
        async with self._session.get(f"{self._base}/api/v2/jobs/{quote(user)}~{quote(name)}/config") as resp:
            text = await resp.text()
            if resp.status >= 400:
                raise ApiCallError(resp.status, "NoJobError" if resp.status == 404 else "InvalidParametersError", text)
            return text

    async def put_job(self, user: str, name: str, config: bytes) -> tuple[dict[str, Any], dict[str, str]]:
        """Submit by OpenPAI's older ``PUT .../jobs/{name}``: the path names the job."""
        body, headers = await self._call("PUT", f"/api/v1/user/{quote(user)}/jobs/{quote(name)}", data=config)
        return body, headers

    async def job(self, user: str, name: str) -> dict[str, Any]:
        return await self._object("GET", f"/api/v1/user/{quote(user)}/jobs/{quote(name)}")

    async def v2_job(self, user: str, name: str) -> dict[str, Any]:
        """A job's detail as OpenPAI v1.8's ``GET /api/v2/jobs/{user}~{job}`` answers it."""
        return await self._object("GET", f"/api/v2/jobs/{quote(user)}~{quote(name)}")

    async def profile(self, user: str, name: str) -> dict[str, Any]:
        """The job's usage: summed, and each task's latest (paiq's extension)."""
        return await self._object("GET", f"/api/v1/user/{quote(user)}/jobs/{quote(name)}/profile")

    async def task_profile(self, user: str, name: str, role: str, index: int, since_ms: int = 0) -> dict[str, Any]:
        """One task's usage series, oldest first (paiq's extension)."""
        path = f"/api/v1/user/{quote(user)}/jobs/{quote(name)}/tasks/{quote(role)}/{index}/profile"
        return await self._object("GET", path + (f"?since={since_ms}" if since_ms else ""))

    async def queue(self, vc: str) -> dict[str, Any]:
        """A virtual cluster's queue in the scheduler's order (paiq's extension)."""
        return await self._object("GET", f"/api/v1/virtual-clusters/{quote(vc)}/queue")

    async def jobs_page(self, user: str | None = None, *, state: str | None = None, limit: int = 1000,
                        cursor: str | None = None) -> tuple[list[dict[str, Any]], str | None]:
        """One page of job summaries, newest first, and the next page's cursor (None: the last page)."""
        query = {k: v for k, v in (("username", user), ("state", state), ("limit", str(limit)),
                                   ("cursor", cursor)) if v}
        body, headers = await self._call("GET", f"/api/v1/jobs?{urlencode(query)}")
        return list(body), headers.get("X-Next-Cursor")

    async def jobs(self, user: str | None = None, *, state: str | None = None,
                   at_most: int | None = None) -> list[dict[str, Any]]:
        return [job async for job in self.iter_jobs(user, state=state, at_most=at_most)]

    async def iter_jobs(self, user: str | None = None, *, state: str | None = None,
                        at_most: int | None = None) -> AsyncIterator[dict[str, Any]]:
        """Job summaries, newest first, page after page (``at_most`` of them, or all)."""
        cursor: str | None = None
        left = at_most
        while left is None or left > 0:
            page, cursor = await self.jobs_page(user, state=state, limit=min(1000, left or 1000), cursor=cursor)
            for job in page:
                yield job
            left = None if left is None else left - len(page)
            if cursor is None:
                return

    async def ssh_info(self, user: str, name: str) -> dict[str, Any]:
        return await self._object("GET", f"/api/v1/user/{quote(user)}/jobs/{quote(name)}/ssh")

    async def key_file(self, user: str, name: str, file: str) -> str:
        """A key file of the job's SSH key pair (the private key needs the owner's or an admin's token)."""
        path = f"/api/v1/user/{quote(user)}/jobs/{quote(name)}/ssh/{quote(file)}"
        headers = {"Authorization": f"Bearer {self._token}"} if self._token else {}
        try:
            async with self._session.get(self._base + path, headers=headers) as resp:
                if resp.status >= 400:
                    raise _refusal(resp, await resp.json(content_type=None))
                return await resp.text()
        except aiohttp.ClientConnectionError as e:
            raise self._unreachable(e) from e

    async def task_log(self, user: str, name: str, role: str, index: int, *, tail: int | None = None,
                       follow: bool = False, stream: str = "all", attempt: int | None = None,
                       run: int | None = None) -> AsyncIterator[str]:
        """A task's log, line by line; with ``follow``, new lines as they come until the log is complete. By
        default its last run in the job's current attempt; ``attempt``: the job's attempt K (0 first), ``run``:
        the task's run T within it (protocol v2's taskRetryCount)."""
        path = f"/api/v1/user/{quote(user)}/jobs/{quote(name)}/tasks/{quote(role)}/{index}/log"
        params = {"follow": "true" if follow else "false", "stream": stream}
        for key, value in (("tail", tail), ("attempt", attempt), ("taskAttempt", run)):
            if value is not None:
                params[key] = str(value)
        headers = {"Authorization": f"Bearer {self._token}"} if self._token else {}
        try:
            async with self._session.get(self._base + path, params=params, headers=headers,
                                         timeout=aiohttp.ClientTimeout(total=None, sock_connect=30)) as resp:
                if resp.status >= 400:
                    raise _refusal(resp, await resp.json(content_type=None))
                async for raw in resp.content:
                    yield raw.decode(errors="replace")
        except aiohttp.ClientConnectionError as e:
            raise self._unreachable(e) from e


@asynccontextmanager
async def paiq_client(base_url: str, token: str | None = None) -> AsyncIterator[PaiqClient]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        yield PaiqClient(session, base_url, token)
