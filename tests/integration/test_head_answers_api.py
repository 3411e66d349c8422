"""A HEAD answer carries the GET's status and headers and no body, and leaves its connection usable: the
streaming routes (the event feed, a task's log, ``follow=true`` too) as much as every other GET of the route
table. Through the real app and store, on one raw keep-alive connection, where a body byte after a HEAD
answer would be read as the start of the next answer."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from pymongo import AsyncMongoClient

from services.submit.app import create_app
from services.submit.deps import SubmitDeps
from services.submit.routes.table import ROUTES
from services.submit.users import Users
from shared.bus.memory import MemoryBus
from shared.db.logs import LogStore
from shared.db.store import Store
from shared.settings.model import Settings
from shared.taskref import TaskRef
from tests.infra import HASH_ROUNDS
from tests.integration.test_task_runs_api import NAME, store_run, the_job

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

READ_SECONDS = 5.0
PLAIN = "/api/v1"  # a plain GET with a known answer: OpenPAI's API root
PLAIN_BODY = b"<pre>PAI RESTful API</pre>"
LOG = f"/api/v1/user/alice/jobs/{NAME}/tasks/main/0/log"
STREAMS = ("/api/v1/events", f"/api/v1/events?user=alice&job={NAME}", LOG, f"{LOG}?follow=true",
           f"{LOG}?tail=1&follow=true", f"/api/v2/jobs/alice~{NAME}/events")
# the job of tests/integration/test_task_runs_api.py: attempt 1, its task running at run 2, its log open
VALUES = {"user": "alice", "job": NAME, "vc": "default", "group": "none", "id": "none", "token": "none",
          "file": f"alice~{NAME}", "storage": "none", "role": "main", "index": "0", "attemptId": "1",
          "attemptIndex": "0", "taskAttemptId": "2", "key1": "a", "key2": "b", "key3": "c", "key4": "d"}
# what may differ between a GET's answer and its HEAD's: the time, and how a body that is not sent is framed
FRAMING = {"date", "content-length", "transfer-encoding"}


@dataclass
class Api:
    client: TestClient[Any, Any]
    token: str

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


@pytest.fixture
async def api(mongo_uri: str) -> AsyncIterator[Api]:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(mongo_uri)
    database = f"head_{uuid.uuid4().hex[:8]}"
    store = Store(client, database)
    await store.ensure_indexes()
    job = the_job()
    await store.insert_job(job)
    await store_run(LogStore(store.jobs.database),
                    TaskRef(job_id=job.id, attempt=1, role="main", index=0, task_attempt=2), None)
    users = Users(store, rounds=HASH_ROUNDS)
    await users.create("alice", "alice-password", admin=False)
    deps = SubmitDeps(settings=Settings.from_env({}), store=store, bus=MemoryBus(), users=users)
    async with TestClient(TestServer(create_app(deps))) as test_client:
        login = await test_client.post("/api/v2/authn/basic/login",
                                       json={"username": "alice", "password": "alice-password"})
        yield Api(test_client, (await login.json())["token"])
    deps.cpu.shutdown()
    await client.drop_database(database)
    await client.close()


@dataclass(frozen=True)
class Head:
    status: int
    headers: dict[str, str]  # names lower-cased


def parse_head(block: bytes) -> Head:
    status_line, *lines = block.decode("latin-1").rstrip("\r\n").split("\r\n")
    assert re.fullmatch(r"HTTP/1\.1 \d{3} .*", status_line), f"not an answer's status line: {block[:200]!r}"
    headers = dict(line.split(": ", 1) for line in lines)
    return Head(int(status_line.split(" ")[1]), {k.lower(): v for k, v in headers.items()})


class Connection:
    """One keep-alive HTTP/1.1 connection, read byte by byte as a client that trusts the framing would."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, auth: dict[str, str]) -> None:
        self.reader, self.writer, self.auth = reader, writer, auth

    def send(self, method: str, path: str, *, close: bool = False) -> None:
        headers = {"Host": "paiq", **self.auth, **({"Connection": "close"} if close else {})}
        self.writer.write(f"{method} {path} HTTP/1.1\r\n".encode()
                          + b"".join(f"{k}: {v}\r\n".encode() for k, v in headers.items()) + b"\r\n")

    async def head(self, path: str) -> Head:
        """HEAD ``path``: its answer's status line and headers, read up to the blank line that ends them."""
        self.send("HEAD", path)
        try:
            block = await asyncio.wait_for(self.reader.readuntil(b"\r\n\r\n"), READ_SECONDS)
        except TimeoutError:
            raise AssertionError(f"HEAD {path}: no whole answer within {READ_SECONDS}s; read: "
                                 f"{await self.buffered()!r}") from None
        return parse_head(block)

    async def plain_get(self) -> None:
        """GET the plain route last (closing the connection): its answer must come whole, first thing."""
        self.send("GET", PLAIN, close=True)
        try:
            rest = await asyncio.wait_for(self.reader.read(), READ_SECONDS)
        except TimeoutError:
            raise AssertionError(f"GET {PLAIN} after the HEADs: no whole answer within {READ_SECONDS}s; read: "
                                 f"{await self.buffered()!r}") from None
        block, _, body = rest.partition(b"\r\n\r\n")
        assert parse_head(block + b"\r\n").status == 200, rest[:300]
        assert body == PLAIN_BODY, rest[:300]

    async def buffered(self) -> bytes:
        """What arrived and was not yet taken (a timed-out read leaves it buffered)."""
        try:
            return await asyncio.wait_for(self.reader.read(300), 0.1)
        except TimeoutError:
            return b""

    def close(self) -> None:
        self.writer.close()


async def connect(api: Api) -> Connection:
    port = api.client.server.port
    assert port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    return Connection(reader, writer, api.auth)


async def get_head(api: Api, path: str) -> Head:
    """The GET's status and headers, on a connection of its own (a stream's body is not waited for)."""
    async with api.client.get(path, headers=api.auth) as resp:
        return Head(resp.status, {k.lower(): v for k, v in resp.headers.items()})


def same_but_framing(get: Head, head: Head) -> dict[str, Any]:
    """What differs between the two answers beyond the framing (empty: none)."""
    names = (get.headers.keys() | head.headers.keys()) - FRAMING
    diff: dict[str, Any] = {n: (get.headers.get(n), head.headers.get(n)) for n in names
                            if get.headers.get(n) != head.headers.get(n)}
    if get.status != head.status:
        diff["status"] = (get.status, head.status)
    return diff


async def test_a_head_of_a_stream_answers_its_headers_only_and_the_connection_goes_on(api: Api) -> None:
    conn = await connect(api)
    try:
        for path in STREAMS:
            head = await conn.head(path)
            assert head.status == 200, (path, head)
            assert head.headers.get("connection") != "close", (path, head)
            assert same_but_framing(await get_head(api, path), head) == {}, path
        await conn.plain_get()
    finally:
        conn.close()


async def test_every_get_routes_head_answers_the_gets_status_and_headers_without_a_body(api: Api) -> None:
    """Every GET of the route table, as alice (her job, its task's log, run 2 of attempt 1): HEAD after HEAD on
    one connection, then the plain GET, which a single stray body byte would spoil."""
    paths = [re.sub(r"\{(\w+)\}", lambda m: VALUES[m[1]], r.path) for r in ROUTES if r.method == "GET"]
    assert LOG in paths and "/api/v1/events" in paths
    conn = await connect(api)
    statuses: set[int] = set()
    try:
        for path in paths:
            head = await conn.head(path)
            statuses.add(head.status)
            assert same_but_framing(await get_head(api, path), head) == {}, path
        await conn.plain_get()
    finally:
        conn.close()
    assert {200, 404} <= statuses
